"""The experiment format (`kind: sweep | ramp | compare`): its models and its loading, checked
against the inventory without touching any host. The runner is chaoskit/drill/experiment.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from chaoskit.inventory.models import Inventory
from chaoskit.models import Frozen
from chaoskit.playbook.models import (
    Seconds,
    Where,
    fill_tool_settings,
    refuse_renamed_patroni,
    tool_settings,
    with_tool_fields,
)
from chaoskit.validation import FreeText, Name
from chaoskit.workload import spec as load_defaults
from chaoskit.workload.engine import ENGINES, engine, tool_engine_refusal

# a server variable / parameter name: it is put into `SELECT @@global.<name>` or `SHOW <name>`
SettingName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$")]


class Link(Frozen):
    """A network link whose latency the proxy backend controls: connections from `source` hosts
    to `dest` hosts on `port` (e.g. replica -> primary replication), or `source: client`: the
    load's own connections, through relays on the control node (e.g. a managed database)."""

    source: str = Field(pattern=r"^(client|[A-Za-z0-9][A-Za-z0-9_.-]{0,62}|role:[a-z_]+(@(one|all|minority))?)$")
    dest: str | None = Field(None, pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62}|role:[a-z_]+(@(one|all|minority))?)$")
    port: int = Field(5432, ge=1, le=65535)
    stream: Literal["both", "upstream", "downstream"] = "both"
    jitter_ms: float = Field(0.0, ge=0, le=60_000)

    @model_validator(mode="after")
    def _dest(self) -> Link:
        if self.source != "client" and not self.dest:
            raise ValueError("a host link needs dest (e.g. role:primary); or use source: client")
        return self


class Grid(Frozen):
    delay_ms: tuple[Annotated[float, Field(ge=0, le=60_000)], ...] = (0.0,)
    workers: tuple[Annotated[int, Field(ge=1, le=4096)], ...] = (load_defaults.THROUGHPUT.workers,)
    workload: tuple[Name, ...] = ("update",)
    synchronous_mode: tuple[bool, ...] = ()


class ToolBase(Frozen):
    """An experiment whose load a tool makes (seed 002 ran its ladder with sysbench, seed 003 its
    gradient with JMeter): which tool, and its settings under its own name, as a playbook's client
    group says them (`{tool: sysbench, sysbench: {tables: 4, table_size: 100000}}`). The grid's
    `workload` names the tool's tests (`chaoskit.workload.engine`: sysbench's oltp_*, pgbench's
    builtin scripts, `jmeter` for the plan, whose threads each cell sets through the property
    chaoskit.threads). `ToolConfig` is this with a field per tool that has settings."""

    tool: str = "sysbench"

    @model_validator(mode="before")
    @classmethod
    def _settings_moved(cls, data: Any) -> Any:
        """The settings an experiment once wrote beside `tool:` are refused with their new place."""
        if isinstance(data, dict) and isinstance(data.get("tool", "sysbench"), str):
            tool = data.get("tool", "sysbench")
            model = ENGINES.all()[tool].settings if tool in ENGINES.all() else None
            renamed = {"prepare": "init"} if tool == "pgbench" else {}  # pgbench's own word for it
            flat = [k for k in data if k != "tool" and k != tool and
                    (k in renamed or (model is not None and k in model.model_fields))]
            if flat:
                said = ", ".join(f"{renamed.get(k, k)}: ..." for k in flat)
                raise ValueError(f"{', '.join(flat)} now go under the tool's name, as a playbook's client group "
                                 f"says them: load: {{tool: {tool}, {tool}: {{{said}}}}}")
        return data

    @field_validator("tool")
    @classmethod
    def _a_tool(cls, value: str) -> str:
        eng = ENGINES.get(value)  # an unknown name raises UnknownPlugin, a ValueError listing the known ones
        if not eng.tests:
            raise ValueError(f"{value} runs no experiment cell; tools that do: "
                             f"{', '.join(n for n, e in ENGINES.all().items() if e.tests)}")
        return value

    @model_validator(mode="after")
    def _its_settings(self) -> ToolBase:
        fill_tool_settings(self, self.tool, "tool")
        return self

    @property
    def settings(self) -> Any:
        return tool_settings(self, self.tool)

    @property
    def tests(self) -> tuple[str, ...]:
        """The names a cell's workload may take to run this tool."""
        return engine(self.tool).tests


if TYPE_CHECKING:
    ToolConfig = ToolBase
else:
    ToolConfig = with_tool_fields(ToolBase, "ToolConfig")


class Experiment(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    kind: Literal["sweep", "ramp", "compare"]
    description: FreeText = ""
    cluster: Name
    targets: tuple[Name, ...] = ()  # compare: cluster names, alternated
    link: Link | None = None
    grid: Grid = Grid()
    warmup: Seconds = 2.0
    measure: Seconds = 5.0
    repeats: int = Field(1, ge=1, le=20)
    table_rows: int = Field(load_defaults.THROUGHPUT.table_rows, ge=10, le=100_000_000)
    op_timeout: Seconds = load_defaults.THROUGHPUT.op_timeout_s
    # HA manager settings fixed for the whole experiment (journaled, restored), e.g. {synchronous_mode: true}
    settings: dict[Name, bool | int | float | str] = Field(default_factory=dict)
    # server settings every target must already have, or nothing runs (e.g. durability:
    # {sync_binlog: 1, innodb_flush_log_at_trx_commit: 1}); read, never changed
    require: dict[SettingName, bool | int | float | str] = Field(default_factory=dict)
    # the load: chaoskit's own clients (default), or a tool run on this machine (`load: {tool: sysbench}`)
    load: ToolConfig | None = None
    # chaoskit's own clients on loader hosts (a playbook group's `where:` and `loaders:`): each cell's
    # clients split over the hosts it matches, each share a load agent there
    where: Where | None = None
    loaders: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        refuse_renamed_patroni(data)
        return data

    @model_validator(mode="after")
    def _workloads_of_the_load(self) -> Experiment:
        """The grid's workloads are chaoskit's workloads and, with a tool, the tool's tests: a cell
        whose workload is a tool test runs the tool, one whose workload is chaoskit's runs chaoskit's
        clients (seed 002 ran sysbench and its own clients over the same steps)."""
        from chaoskit.workload.workloads import WORKLOADS

        known = (*WORKLOADS, *(self.load.tests if self.load is not None else ()))
        for name in self.grid.workload:
            if name not in known:
                who = f"workloads or {self.load.tool} tests" if self.load is not None else "workloads"
                raise ValueError(f"grid.workload {name!r} is not one of the {who}: {', '.join(known)}")
        return self

    @model_validator(mode="after")
    def _tool_takes_the_grid(self) -> Experiment:
        """The tool can run a cell at each of the grid's worker counts (a JMeter plan must take its
        threads from chaoskit.threads, else every cell would measure the plan's own count)."""
        if self.load is not None and any(w in self.load.tests for w in self.grid.workload):
            engine(self.load.tool).check_ladder(self.load.settings, self.grid.workers)
        return self

    @model_validator(mode="after")
    def _delays_need_a_link(self) -> Experiment:
        """An added delay is on a link the experiment names; a compare delays each route's own
        client link (the relays on this machine), the same for every target."""
        if any(self.grid.delay_ms) and self.link is None:
            raise ValueError("grid.delay_ms adds delay to a link: give link (e.g. {source: client})")
        if self.kind == "compare" and self.link is not None and self.link.source != "client":
            raise ValueError("compare adds the same delay to each target's client link: link: {source: client}")
        return self

    @field_validator("where")
    @classmethod
    def _own_clients_placed(cls, value: Where | None, info: ValidationInfo) -> Where | None:
        load = info.data.get("load")
        if value is not None and load is not None:
            raise ValueError(f"where: places chaoskit's own clients; {load.tool}'s cells run on this machine (their "
                             "output is read here)")
        return value

    @field_validator("loaders")
    @classmethod
    def _loaders_placed(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        if info.data.get("where") is None:
            raise ValueError("loaders: N spreads each cell's clients over N of the loader hosts where: matches; give "
                             "where: too")
        grid = info.data.get("grid")
        if grid is not None and value > min(grid.workers):
            raise ValueError(f"loaders: {value} needs at least {value} workers in every cell (one agent per loader "
                             f"host at least), and grid.workers has {min(grid.workers)}")
        return value

    @model_validator(mode="after")
    def _one_mode_source(self) -> Experiment:
        if self.grid.synchronous_mode and "synchronous_mode" in self.settings:
            raise ValueError("synchronous_mode is either fixed (settings) or a grid axis, not both")
        if self.grid.synchronous_mode and self.kind == "compare":
            raise ValueError("compare alternates targets; sweep synchronous_mode with kind: sweep")
        return self


def tool_of_cell(workload: str, load: ToolConfig | None) -> ToolConfig | None:
    """The tool that makes a cell's load: the experiment's tool when the cell's workload is one of
    its tests, else None (chaoskit's own clients)."""
    return load if load is not None and workload in load.tests else None


def is_experiment(path: Path) -> bool:
    """A playbook file that is an experiment (`kind: sweep | ramp | compare` at its top level)
    rather than a drill (drills have no kind)."""
    from chaoskit.yamlsrc import load_yaml

    data = load_yaml(path).data
    return isinstance(data, dict) and "kind" in data


def load_experiment(path: Path, inv: Inventory) -> Experiment:
    """The experiment in `path`, checked against the inventory without touching any host (its
    clusters exist, its tool fits their engines, a managed cluster's link is its client link, the
    settings it changes can be changed by the manager); bad input is an InputError naming the
    file, line and field."""
    from pydantic import ValidationError

    from chaoskit.ha.registry import managers
    from chaoskit.yamlsrc import load_yaml, raise_validation

    doc = load_yaml(path)
    try:
        exp = Experiment.model_validate(doc.data, context={"base_dir": str(Path(path).parent)})
    except ValidationError as exc:
        raise raise_validation(exc, doc) from None
    for name in (exp.cluster, *exp.targets):
        if name not in inv.clusters:
            raise doc.error(("cluster",), f"unknown cluster {name!r} in {inv.source}")
        refusal = tool_engine_refusal(exp.load.tool, name, inv.clusters[name].engine) if exp.load else None
        if refusal:
            raise doc.error(("load", "tool"), refusal)
        if inv.clusters[name].managed and exp.link is not None and exp.link.source != "client":
            raise doc.error(("link", "source"), f"cluster {name!r} is managed (no host to SSH into): only its "
                                                "client link can be delayed (link: {source: client})")
    changeable = managers()[inv.clusters[exp.cluster].ha.kind].changeable_settings
    if exp.grid.synchronous_mode and "synchronous_mode" not in changeable:
        raise doc.error(("grid", "synchronous_mode"),
                        f"cluster {exp.cluster!r} (ha: {inv.clusters[exp.cluster].ha.kind}) cannot switch "
                        "synchronous_mode")
    unknown = set(exp.settings) - changeable
    if unknown:
        raise doc.error(("settings",), f"cannot change {', '.join(sorted(unknown))} on {exp.cluster}")
    if exp.where is not None:
        from chaoskit.playbook.loader import where_refusal

        for name in (exp.cluster, *exp.targets):
            refused = where_refusal(exp.where, exp.loaders, inv, name)
            if refused:
                raise doc.error(refused[0], refused[1])
        if exp.link is not None and exp.link.source == "client":
            raise doc.error(("link", "source"), "link: {source: client} delays the control node's client link, and "
                                                "the clients run on loader hosts (where:)")
    return exp
