"""The experiment format (`kind: sweep | ramp | compare`): its models and its loading, checked
against the inventory without touching any host. The runner is chaoskit/drill/experiment.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from chaoskit.inventory.models import Inventory
from chaoskit.models import Frozen
from chaoskit.playbook.models import JmeterConfig, Seconds, refuse_renamed_patroni
from chaoskit.validation import FreeText, Name
from chaoskit.workload import spec as load_defaults

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


JMETER_TEST = "jmeter"  # the grid's workload that runs the experiment's JMeter plan


class ToolConfig(Frozen):
    """An experiment whose load a tool makes (seed 002 ran its ladder with sysbench, seed 003 its
    gradient with JMeter): which tool, and its tables or plan; the grid's `workload` names the
    tool's tests (sysbench: oltp_*; pgbench: its builtin scripts, tpcb-like, simple-update,
    select-only, on tables of `scale`; JMeter: `jmeter`, the plan, whose threads each cell sets
    through the property chaoskit.threads)."""

    tool: Literal["sysbench", "pgbench", "jmeter"] = "sysbench"
    tables: int = Field(4, ge=1, le=1000)  # sysbench
    table_size: int = Field(10_000, ge=1, le=100_000_000)  # sysbench
    scale: int = Field(1, ge=1, le=10_000)  # pgbench
    jmeter: JmeterConfig | None = None  # the plan and the JMeter to run it (paths relative to the experiment)
    prepare: bool = True

    @model_validator(mode="after")
    def _jmeter_plan(self) -> ToolConfig:
        if (self.tool == "jmeter") != (self.jmeter is not None):
            raise ValueError("a JMeter load needs jmeter: {plan: my-plan.jmx}" if self.tool == "jmeter" else
                             f"jmeter: {{...}} is for tool: jmeter, not {self.tool}")
        return self

    @property
    def tests(self) -> tuple[str, ...]:
        """The names a cell's workload may take to run this tool."""
        from chaoskit.tools import pgbench, sysbench

        return {"sysbench": sysbench.TESTS, "pgbench": pgbench.BUILTIN_SCRIPTS, "jmeter": (JMETER_TEST,)}[self.tool]


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
    def _plan_threads_follow_the_grid(self) -> Experiment:
        """A JMeter cell's clients are its plan's threads: the plan must run `workers` threads when
        chaoskit.threads is set to it (a thread group of `${__P(chaoskit.threads,N)}`), else the
        cells would all measure the plan's own count under other names."""
        from chaoskit.tools import jmeter

        if self.load is None or self.load.jmeter is None or JMETER_TEST not in self.grid.workload:
            return self
        for workers in self.grid.workers:
            try:
                threads = jmeter.plan_threads(self.load.jmeter.plan, {jmeter.THREADS_PROPERTY: workers})
            except jmeter.PlanError as exc:
                raise ValueError(str(exc)) from None
            if threads != workers:
                raise ValueError(f"grid.workers {workers}: the plan runs {threads or 'an unknown number of'} threads "
                                 f"with {jmeter.THREADS_PROPERTY}={workers}; a JMeter ladder's thread group takes its "
                                 f"threads from ${{__P({jmeter.THREADS_PROPERTY},N)}}")
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
    from chaoskit.playbook.loader import tool_engine_refusal
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
    return exp
