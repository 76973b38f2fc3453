"""Who makes a client group's load: the `LoadEngine` family (`load.groups[].tool`, an experiment's
`load.tool`). One module per engine in `chaoskit.workload.engines`, found by `plugins.Plugins`:
chaoskit's own clients (`builtin`) and the external tools (pgbench, sysbench, JMeter). An engine
declares, once, everything the rest of chaoskit asks of it:

- `measures`: what its output can give (the outage edges' resolution, RPO, latency, whether
  chaoskit's client profiles shape its connections);
- `speaks`: the database families it drives (None: every one chaoskit has a driver for);
- `settings`: the one model of its settings (`<tool>: {...}` beside `tool:` in a playbook's client
  group and in an experiment's `load:` alike), or None when it has none;
- `tests`: the names an experiment cell's `workload` may take to run it, and how a cell's
  settings follow from the experiment's (`cell_settings`);
- its group runner: `describe` (what `validate` shows), `prepare` (its tables, before the load)
  and `runner` (the object the tool group's process ticks: `chaoskit.workload.tool_group`).

A new tool is its module in `chaoskit/workload/engines/` (a subclass of LoadEngine with a `name`),
its playbooks and its tests; README "Adding a load tool" says what each hook must do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from pydantic import ValidationError

from chaoskit.models import Frozen
from chaoskit.plugins import Plugins
from chaoskit.recorder import Recorder
from chaoskit.workload.spec import ClientGroup, LoadSpec

if TYPE_CHECKING:
    from chaoskit.db.base import Driver
    from chaoskit.inventory.models import Cluster, Inventory

TOOL_FIGURE_PREFIX = "tool_"  # a figure a tool says in its own terms (`window_latency`) is named tool_*
BUILTIN = "builtin"  # chaoskit's own clients: run by the load runner's worker processes, not a tool group


class Measures(NamedTuple):
    """What a load source can give: the resolution of its clients' outage edges (0: each op's own
    instants), whether the writes it acknowledged can be looked up afterwards (RPO), and whether
    each op's latency is known; whether chaoskit's client profiles shape its connections."""

    rto_resolution_s: float
    rpo: bool
    latency: bool
    profiles: bool  # whether chaoskit's client profiles (deadline, pool, per-op) shape its connections


@dataclass
class ToolGroupBase:
    """What every tool group has: its group and load, where its tool's output is kept, the
    Recorder it books ops in, the events it has to say (shipped by `tool_main`), and whether the
    load is stopping."""

    group: ClientGroup
    spec: LoadSpec
    raw: Path
    recorder: Recorder
    rate_share: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    stopping: bool = False
    # what `tool_main` gives to be called during long work (a backlog read at the stop): it ships
    # what is booked so far, so the load runner hears from a group that is busy, not hung
    heartbeat: Callable[[], None] | None = None

    def tick(self, now: float) -> None:
        """Start, read and restart the tool as `now` asks (called every POLL_S)."""
        raise NotImplementedError

    def stop(self) -> None:
        """End the tool at the load's stop and book what it wrote last."""
        raise NotImplementedError

    def beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat()

    def event(self, kind: str, t: float, worker: int, **data: Any) -> None:
        """`tool_client_aborted`, `tool_client_back`, `tool_client_killed`: one of the tool's clients."""
        self.events.append({"kind": kind, "t": t, "group": self.group.name, "tool": self.group.tool, "worker": worker,
                            **data})


class LoadEngine:
    """One way of making a group's load. Every hook is a class method: an engine holds no state
    (its group runner does)."""

    name: ClassVar[str] = ""
    measures: ClassVar[Measures]
    speaks: ClassVar[tuple[str, ...] | None] = None
    settings: ClassVar[type[Frozen] | None] = None
    settings_example: ClassVar[str] = "{...}"  # what `<tool>: ...` looks like where its settings are required
    tests: ClassVar[tuple[str, ...]] = ()
    on_loaders: ClassVar[bool] = True  # its group may run on a loader host (`where:`)
    paced_by: ClassVar[str | None] = None  # what paces it where an open-loop `load.rate` cannot (JMeter: its plan)

    @classmethod
    def external(cls) -> bool:
        """Whether a tool group's process runs it (every engine but chaoskit's own clients)."""
        return cls.name != BUILTIN

    @classmethod
    def default_settings(cls) -> Frozen | None:
        """Its settings when a group gives none; raises ValueError when some must be given."""
        if cls.settings is None:
            return None
        try:
            return cls.settings()
        except ValidationError:  # a required field: the group must say it
            raise ValueError(f"a {cls.name} group needs {cls.name}: {cls.settings_example}") from None

    @classmethod
    def group_workers(cls, settings: Any, workers: int, given: bool) -> int:
        """A group's clients, from its `workers` (`given`: written in the playbook) and settings;
        raises ValueError when they disagree. Default: `workers`."""
        return workers

    @classmethod
    def check_ladder(cls, settings: Any, workers: tuple[int, ...]) -> None:
        """An experiment whose cells run this tool at each of `workers` clients: ValueError if the
        settings cannot (default: every count can)."""

    @classmethod
    def cell_settings(cls, settings: Any, test: str, prepare: bool) -> Any:
        """The settings of one experiment cell running `test` (one of `tests`), its tables made first
        when `prepare` (once per test and target)."""
        raise NotImplementedError(f"{cls.name} runs no experiment cell")

    @classmethod
    def tables_of(cls, test: str) -> str:
        """Which tables a test runs on (tests that share tables are made once per target)."""
        return test

    @classmethod
    def window_latency(cls, raw: Path, t_from: float, t_to: float) -> dict[str, float | None]:
        """What a rate-only tool says of latency in a measured window (its own names, each starting
        with TOOL_FIGURE_PREFIX), from its output kept in `raw`; an engine that knows each op's
        latency says nothing here."""
        return {}

    @classmethod
    def programs(cls, settings: Any) -> tuple[str, ...]:
        """The programs its group runs, as found on PATH (or absolute): a loader host that runs
        the group must have each one (default: none)."""
        return ()

    @classmethod
    def describe(cls, group: ClientGroup, route: Cluster) -> list[str]:
        """The command lines the group will run on the control node, for `chaoskit validate`."""
        return []

    @classmethod
    def prepare(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
        """Before the load: the tool's own tables, through the group's route. Default: nothing."""

    @classmethod
    def runner(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
               recorder: Recorder, rate_share: float | None) -> ToolGroupBase:
        """The group runner its tool group's process ticks (`tick(now)`, `stop()`, `events`)."""
        raise NotImplementedError(f"{cls.name} has no tool group runner")


ENGINES: Plugins[type[LoadEngine]] = Plugins("chaoskit.workload.engines", LoadEngine, "name", "load tool")


def engine(name: str) -> type[LoadEngine]:
    return ENGINES.get(name)


def measures(tool: str) -> Measures:
    return ENGINES.get(tool).measures


def group_driver(cluster: Cluster, inventory: Inventory, spec: LoadSpec, group: ClientGroup) -> Driver:
    """The database driver a tool group reaches its route with: the load's connect and op timeouts,
    the group's client profile (a tool's connection string, its writer search)."""
    from chaoskit.db.registry import driver_for

    return driver_for(cluster, inventory, connect_timeout=spec.connect_timeout, op_timeout=spec.op_timeout,
                      profile=group.client_profile())


def tool_engine_refusal(tool: str, cluster: str, family: str) -> str | None:
    """Why `tool` cannot load cluster `cluster` of database family `family` (None: it can), for a
    playbook's group and an experiment's load alike."""
    speaks = ENGINES.get(tool).speaks
    if speaks is None or family in speaks:
        return None
    return f"{tool} drives {' and '.join(speaks)} only; cluster {cluster} is {family}"
