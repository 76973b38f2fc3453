"""Playbook models (frozen, no unknown fields). Durations accept `30s`, `100ms`, `2m`.

A step's fault is one of the fault kinds' own models (`chaoskit.faults.spec`); the playbook's
cluster is its default cluster, and a fault without an explicit `ttl` gets the drill's bound
(`chaoskit.faults.ttl.drill_fault_ttl`) before it is validated, so `ttl >= duration` and the cap
are checked on the values the host will actually get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BeforeValidator,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from chaoskit.faults.spec import CLIENT, FaultBase, FaultSpec, Seconds
from chaoskit.faults.ttl import drill_fault_ttl
from chaoskit.models import Frozen
from chaoskit.units import parse_duration
from chaoskit.validation import FreeText, Name, SafePath, Tag, input_file
from chaoskit.workload import spec
from chaoskit.workload.engine import BUILTIN, ENGINES, engine
from chaoskit.workload.sql_script import SqlScript, load_script
from chaoskit.workload.workloads import WorkloadParams

if TYPE_CHECKING:
    from chaoskit.inventory.models import Inventory

CheckName = Annotated[str, Field(pattern=r"^[a-z_]{1,40}$")]  # which ones: the load's workload says
MAX_DRILL_S = 24 * 3600.0


def _load_so_far(info: ValidationInfo) -> Any:
    """A playbook's `load` for the fields validated after it: its LoadConfig, or None when it failed."""
    return info.data.get("load")


def refuse_renamed_patroni(data: Any) -> None:
    """A playbook or experiment written when only Patroni's settings could change (`patroni: {...}`)
    is refused with the new name, never read as something else."""
    if isinstance(data, dict) and "patroni" in data and "settings" not in data:
        raise ValueError("patroni: {...} is now settings: {...} (the cluster's HA manager applies them)")


class SqlWorkloadConfig(Frozen):
    """`workload: {sql: my.sql}`: your own SQL as the load (its format: README, "Your own SQL"),
    a path relative to the playbook. It is read and checked when the playbook is: a mistake in it
    is one line naming the SQL file, its line and what is wrong."""

    sql: SafePath
    _script: SqlScript | None = PrivateAttr(None)

    @field_validator("sql")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        return input_file(value, info)

    @model_validator(mode="after")
    def _read(self) -> SqlWorkloadConfig:
        self._script = load_script(self.sql)  # an InputError of the SQL file goes out as it is
        return self

    @property
    def script(self) -> SqlScript:
        assert self._script is not None
        return self._script


RayLabelKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9_./-]{0,62})$")]
RayLabelValue = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int | float | bool) else v),
                          Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,62})$")]


class Where(Frozen):
    """Where a client group's load runs: on the inventory's loader hosts (`loaders:`) of a zone
    (`az: b`, the hosts' `az` tag), on one of them by name (`host: ld-b`), or on those whose live
    Ray node carries labels (`labels: {rack: r2}`: every one) or has resources (`resources:
    {loadgen: 1}`: at least that much of each); without it, on the control node. Exactly one of
    the four. Labels and resources are the Ray cluster's: they are matched against its live nodes
    when the drill starts (`live()`), never offline."""

    az: Tag | None = None
    host: Name | None = None
    labels: dict[RayLabelKey, RayLabelValue] | None = Field(None, min_length=1)
    resources: dict[Name, Annotated[float, Field(gt=0)]] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> Where:
        if sum(x is not None for x in (self.az, self.host, self.labels, self.resources)) != 1:
            raise ValueError("where: takes exactly one of az, host, labels or resources")
        return self

    @property
    def live(self) -> bool:
        """Matched against the Ray cluster's live nodes (labels, resources), not the inventory."""
        return self.labels is not None or self.resources is not None

    def hosts(self, inventory: Inventory) -> list[str]:
        """The inventory's loader hosts it names, in their order (empty: none); a live form
        (labels, resources) is matched by `chaoskit.workload.ray_plane.matching_hosts`."""
        if self.live:
            raise ValueError("where: labels/resources are matched against the live Ray nodes")
        loaders = inventory.loaders.hosts if inventory.loaders is not None else ()
        if self.host is not None:
            return [h for h in loaders if h == self.host]
        return [h for h in loaders if inventory.hosts[h].tags.get("az") == str(self.az).lower()]

    def said(self) -> dict[str, Any]:
        if self.labels is not None:
            return {"labels": dict(self.labels)}
        if self.resources is not None:
            return {"resources": dict(self.resources)}
        return {"az": str(self.az)} if self.az is not None else {"host": str(self.host)}


class GroupBase(Frozen):
    """One client group of the load (see chaoskit.workload.spec.ClientGroup for the profiles).
    `tool` says who makes its load: chaoskit's own clients (`builtin`) or an external load tool
    (`chaoskit.workload.engine`) run on the control node against the same route, its settings
    under its own name (`pgbench: {scale: 10}`). `GroupConfig` is this with a field per tool that
    has settings, made from the engines found."""

    name: Name | None = None  # default: the profile's name (a tool group's: the tool's)
    tool: str = BUILTIN
    profile: Literal["deadline", "pool", "per-op"] = "deadline"
    workers: int = Field(spec.DRILL.workers, ge=1, le=2048)
    statement_timeout: Seconds | None = None  # pool / per-op: the server-side timeout, if the application sets one
    validation: bool = False  # pool: a validation query before each op (as a pool's test-on-borrow)
    # the inventory cluster whose endpoints this group connects through: the same members reached
    # another way (e.g. through HAProxy instead of the endpoint list), so one failover gives the
    # RTO of each route; default: the drill's cluster
    route: Name | None = None
    where: Where | None = None  # on loader hosts (an agent per share), else on the control node
    # with where: on how many of the loader hosts it matches (the first N, in inventory order),
    # each taking at least one agent; default: every one it matches
    loaders: int | None = Field(None, ge=1, le=256)

    @field_validator("tool")
    @classmethod
    def _known_tool(cls, value: str) -> str:
        ENGINES.get(value)  # an unknown name raises UnknownPlugin, a ValueError listing the known ones
        return value

    @property
    def group_name(self) -> str:
        return self.name or (self.profile if self.tool == BUILTIN else self.tool)

    @property
    def settings(self) -> Any:
        """The tool's settings (None for chaoskit's own clients)."""
        return tool_settings(self, self.tool)

    @model_validator(mode="after")
    def _fits_tool(self) -> GroupBase:
        tool = engine(self.tool)
        fill_tool_settings(self, self.tool, "a group with tool")
        if self.settings is not None:
            object.__setattr__(self, "workers", tool.group_workers(self.settings, self.workers,
                                                                   "workers" in self.model_fields_set))
        if not tool.measures.profiles and (self.profile != "deadline" or self.statement_timeout is not None):
            raise ValueError(f"{self.tool} keeps its connections its own way: profile and statement_timeout do not "
                             "apply")
        if tool.external() and self.validation:
            raise ValueError(f"{self.tool} has no check on checkout: validation is for chaoskit's own pool clients")
        if self.where is not None and not tool.on_loaders:
            raise ValueError(f"where: a {self.tool} group runs on the control node (its files are read there); "
                             "chaoskit's own clients, pgbench and sysbench run on loader hosts")
        if self.where is not None and tool.external() and (self.loaders or 1) > 1:
            raise ValueError(f"loaders: a {self.tool} group is one {self.tool} on one loader host (the first its "
                             "where: matches); give a group per host for more")
        return self

    @model_validator(mode="after")
    def _fits_loaders(self) -> GroupBase:
        if self.loaders is not None and self.where is None:
            raise ValueError("loaders: N spreads a group over N of the loader hosts its where: matches; give where: "
                             "too")
        if self.loaders is not None and self.loaders > self.workers:
            raise ValueError(f"loaders: {self.loaders} needs at least {self.loaders} workers (one agent per loader "
                             f"host at least), the group has {self.workers}")
        return self

    def loader_hosts(self, inventory: Inventory) -> list[str]:
        """The loader hosts its agents run on: the first `loaders` of those a zone or name `where`
        matches (a tool group's one tool: the first); a live `where` (labels, resources) is matched
        in the preflight (`chaoskit.drill.preflight.where_hosts`)."""
        assert self.where is not None
        return self.where.hosts(inventory)[:self.loaders if self.tool == BUILTIN else 1]

    @model_validator(mode="after")
    def _fits_profile(self) -> GroupBase:
        if self.profile == "deadline" and (self.statement_timeout is not None or self.validation):
            raise ValueError("a deadline group takes its timeout from load.op_timeout; statement_timeout and "
                             "validation are for pool and per-op groups")
        if self.validation and self.profile != "pool":
            raise ValueError("validation is a pool's check on checkout (profile: pool)")
        return self


def tool_settings(model: Any, tool: str) -> Any:
    """The settings a model holds under the tool's name (None: none, or a tool without settings)."""
    return getattr(model, tool, None) if engine(tool).settings is not None else None


def fill_tool_settings(model: Any, tool: str, where: str) -> None:
    """One tool's settings and no other's: a tool's `<name>: {...}` beside another tool is
    refused; the tool's own, when not given, is its default (or refused when it has required
    fields). `where` names what takes the settings, for the message."""
    for name, eng in ENGINES.all().items():
        if eng.settings is not None and getattr(model, name, None) is not None and name != tool:
            raise ValueError(f"{name}: {{...}} is for {where}: {name}, not {tool}")
    if engine(tool).settings is not None and getattr(model, tool, None) is None:
        object.__setattr__(model, tool, engine(tool).default_settings())


def with_tool_fields(base: type[Frozen], name: str) -> type[Frozen]:
    """`base` with one optional field per engine that has settings, named after the engine and
    typed by its settings model: the engines found say the format, no list is kept by hand."""
    fields: dict[str, Any] = {n: (e.settings | None, None) for n, e in ENGINES.all().items()
                              if e.settings is not None}
    return create_model(name, __base__=base, __module__=base.__module__, **fields)


if TYPE_CHECKING:
    GroupConfig = GroupBase
else:
    GroupConfig = with_tool_fields(GroupBase, "GroupConfig")


class LoadConfig(Frozen):
    """The background load. `groups` runs several client profiles side by side (the shipped drills
    compare chaoskit's careful `deadline` clients with `pool` clients as applications keep them);
    without it, `workers` deadline clients."""

    workload: str | SqlWorkloadConfig = spec.DRILL.workload
    workers: int = Field(spec.DRILL.workers, ge=1, le=2048)
    rate: float | None = Field(None, gt=0, le=1_000_000)
    warmup: Seconds = spec.DRILL.warmup_s
    op_timeout: Seconds = spec.DRILL.op_timeout_s
    connect_timeout: Seconds = spec.DRILL.connect_timeout_s
    processes: int | None = Field(None, ge=1, le=256)
    table_rows: int = Field(spec.DRILL.table_rows, ge=10, le=100_000_000)
    # list-append: the level its transactions run at, and are judged at (the engine's promise there)
    isolation: Literal["read committed", "repeatable read", "serializable"] | None = None
    groups: tuple[GroupConfig, ...] | None = None

    @model_validator(mode="after")
    def _workers_from_groups(self) -> LoadConfig:
        """With groups, `workers` is their sum: computed once the groups are typed (a pre-validator
        summing raw input met strings and lists before their types were checked)."""
        if self.groups is None:
            return self
        paced = next((g.tool for g in self.groups if engine(g.tool).paced_by), None)
        if self.rate is not None and paced is not None:
            raise ValueError(f"a {paced} group is paced by {engine(paced).paced_by}: rate (open loop) does not apply")
        total = sum(g.workers for g in self.groups)
        if "workers" in self.model_fields_set and self.workers != total:
            raise ValueError(f"workers ({self.workers}) must be the sum of the groups' workers ({total}), "
                             "or left out")
        if total > 2048:
            raise ValueError(f"the groups' workers add up to {total}; at most 2048")
        object.__setattr__(self, "workers", total)  # frozen: set once, here, before anyone reads it
        return self

    @field_validator("groups")
    @classmethod
    def _unique(cls, value: tuple[GroupConfig, ...] | None) -> tuple[GroupConfig, ...] | None:
        if value is not None:
            if not value:
                raise ValueError("groups needs at least one group")
            names = [g.group_name for g in value]
            dup = next((n for n in names if names.count(n) > 1), None)
            if dup:
                raise ValueError(f"two groups named {dup!r}: give each a name")
        return value

    @field_validator("workload")
    @classmethod
    def _known(cls, value: str | SqlWorkloadConfig) -> str | SqlWorkloadConfig:
        from chaoskit.workload.workloads import WORKLOADS

        if isinstance(value, SqlWorkloadConfig):
            return value
        if value == "sql":
            raise ValueError("the sql workload runs your file: workload: {sql: my.sql}")
        if value not in WORKLOADS:
            raise ValueError(f"unknown workload {value[:40]!r}; choose from {', '.join(WORKLOADS)}, or your own "
                             "SQL: {sql: my.sql}")
        return value

    @model_validator(mode="after")
    def _isolation_for_list_append(self) -> LoadConfig:
        if self.isolation is not None and self.workload != "list-append":
            raise ValueError("isolation is the list-append workload's (its transactions run and are judged at it)")
        if self.workload == "list-append" and self.isolation is None:
            raise ValueError("the list-append workload needs isolation: read committed | repeatable read | "
                             "serializable (the level it is judged at)")
        return self

    @property
    def workload_name(self) -> str:
        return "sql" if isinstance(self.workload, SqlWorkloadConfig) else self.workload

    def workload_params(self) -> WorkloadParams:
        sql = self.workload.script if isinstance(self.workload, SqlWorkloadConfig) else None
        return WorkloadParams(table_rows=self.table_rows, sql=sql, isolation=self.isolation)

    @property
    def builtin_clients(self) -> bool:
        """Whether chaoskit's own clients run (they write the workload's keys: the checks that read
        them need them)."""
        return self.groups is None or any(g.tool == BUILTIN for g in self.groups)

    def to_spec(self) -> spec.LoadSpec:
        """The load this says, as the load runner takes it: client groups numbered in order (a
        worker's id says its group), one `deadline` group "main" when none is named."""
        groups: list[spec.ClientGroup] = []
        first = 1
        for g in self.groups or ():
            groups.append(spec.ClientGroup(g.group_name, g.profile, g.workers, g.statement_timeout, g.validation,
                                           first, g.route, g.tool, g.settings))
            first += g.workers
        return spec.LoadSpec(workload=self.workload_name, workers=self.workers, rate=self.rate,
                             processes=self.processes, op_timeout=self.op_timeout,
                             connect_timeout=self.connect_timeout, params=self.workload_params(), groups=tuple(groups))


class ProbeConfig(Frozen):
    interval: Seconds = 0.1

    @field_validator("interval")
    @classmethod
    def _sane(cls, value: float) -> float:
        if not 0.01 <= value <= 10:
            raise ValueError("probe interval must be within [10ms, 10s]")
        return value


ActionTarget = Annotated[str, StringConstraints(pattern=r"^(fault\.[0-9]{1,3}|[A-Za-z0-9][A-Za-z0-9_.-]{0,62})$")]


class RestoreAt(Frozen):
    """Where a restore's recovery stops: `before` seconds before step `step` started (the
    disaster's instant as the drill recorded it), or the instant `time` (with its zone)."""

    step: int | None = Field(None, ge=0)
    before: Seconds = 0.0
    time: AwareDatetime | None = None

    @model_validator(mode="after")
    def _one(self) -> RestoreAt:
        if (self.step is None) == (self.time is None):
            raise ValueError("a restore target is {step: N, before: 2s} (before a step of this drill) or "
                             "{time: 2026-01-31T10:00:00Z}")
        if self.time is not None and self.before:
            raise ValueError("before goes with step, not with time")
        if self.before < 0:
            raise ValueError("before must be >= 0")
        return self


DR_ACTIONS = ("backup", "drop_table", "restore")  # the actions on the cluster's backups (chaoskit.drill.dr)


class Action(Frozen):
    """switchover (the HA manager's planned switchover); takeover (a standby made the primary while
    the old one is down, where the manager offers it: DM); restart: start a member's processes that
    are not running (its configured start command, over SSH); rejoin: bring an old primary back as
    a replica the HA manager's way (rewind or rebuild), then start whatever of it is not running.
    `target` is a member host, or `fault.N`: the host step N's fault was applied to (a role
    target is resolved when the fault happens).

    Disaster recovery (the cluster's `backup:` in the inventory): backup takes a backup now (`type`
    full, diff or incr, as the tool offers); drop_table drops the load's own ledger table on the
    primary (a mistake to recover from; the archive's state at that instant is recorded); restore
    restores the latest backup before `to` on the inventory's restore target and recovers to `to`
    (`latest`: every archived change), the archive first made to hold everything written so far
    while the primary answers (`flush_archive`)."""

    kind: Literal["switchover", "takeover", "restart", "rejoin", "backup", "drop_table", "restore"]
    candidate: Name | None = None  # switchover / takeover: a member name; default: the first standby
    target: ActionTarget | None = None
    type: Literal["full", "diff", "incr"] = "full"  # backup
    to: RestoreAt | Literal["latest"] = "latest"  # restore
    flush_archive: bool = True  # restore

    @model_validator(mode="after")
    def _needs_target(self) -> Action:
        if self.kind in ("restart", "rejoin") and not self.target:
            raise ValueError(f"{self.kind} needs target (a member host)")
        if self.kind in ("backup", "drop_table", "restore") and (self.target or self.candidate):
            raise ValueError(f"{self.kind} takes no target or candidate: it acts on the cluster's backups "
                             "(the inventory's backup: section)")
        return self


# what a step may wait for: the HA manager's own events (as each manager reports them) and what
# the role probe sees (a member becoming the primary, leaving it, going down, an old primary
# following again, the cluster steady: one primary, every member answering)
TRIGGER_EVENTS = ("leader_lost", "leader_changed", "failover_started", "confirmed", "promoted", "demoted",
                  "member_state", "view_change", "member_down", "rejoin_started", "cluster_steady")


class Trigger(Frozen):
    """`after:` a step starts `delay` after the first `event` (of `member`, when named) seen once the
    step before it has started; none within `within` of that: the step is skipped, and said so."""

    event: Literal[TRIGGER_EVENTS]  # type: ignore[valid-type]
    member: Name | None = None
    delay: Seconds = 0.0
    within: Seconds = 60.0

    @model_validator(mode="after")
    def _bounded(self) -> Trigger:
        if self.delay < 0 or not 0 < self.within <= 3600:
            raise ValueError("delay must be >= 0 and within in (0, 3600s]")
        if self.event == "cluster_steady" and self.member is not None:
            raise ValueError("cluster_steady is the whole cluster's: it takes no member")
        return self


MAX_FAULTS_PER_STEP = 8


class Step(Frozen):
    """One fault, several faults started at one instant (`faults:`, e.g. the primary and its sync
    standby together), or an action; at a fixed offset (`at`) or after an event (`after`). `expect:
    failover` says the step's point is a failover: the verdict fails unless it led to one, and
    preflight refuses a fault shorter than the HA manager's detection bound (`short_fault: warn`
    runs it anyway, with the warning in the evidence: a drill of what a short blip does)."""

    at: Seconds | None = None
    after: Trigger | None = None
    fault: FaultSpec | None = None
    faults: tuple[FaultSpec, ...] = ()
    action: Action | None = None
    expect: Literal["failover", "any"] = "any"
    short_fault: Literal["refuse", "warn"] = "refuse"

    @model_validator(mode="after")
    def _one(self) -> Step:
        if sum((self.fault is not None, bool(self.faults), self.action is not None)) != 1:
            raise ValueError("a step has exactly one of fault, faults (several at one instant) or action")
        if (self.at is None) == (self.after is None):
            raise ValueError("a step has exactly one of at (an offset) or after (an event)")
        together: tuple[FaultBase, ...] = self.faults
        if together:
            if not 2 <= len(together) <= MAX_FAULTS_PER_STEP:
                raise ValueError(f"faults: 2 to {MAX_FAULTS_PER_STEP} faults started together (one fault: fault:)")
            if len({f.duration for f in together}) != 1:
                raise ValueError("the faults of one step share their duration (they start and end together; "
                                 "give a fault with another duration a step of its own at the same instant)")
            if any(f.target == CLIENT for f in together):
                raise ValueError("target client goes in a step of its own (fault:), not in faults:")
        return self

    @property
    def specs(self) -> tuple[FaultBase, ...]:
        """The step's faults: none for an action, one for `fault:`, several for `faults:`."""
        return (self.fault,) if self.fault is not None else tuple(self.faults)

    @property
    def duration(self) -> float | None:
        """How long the step's faults last (they share it), None for an action or an open end."""
        return self.specs[0].duration if self.specs else None


class Recovery(Frozen):
    within: Seconds = 60.0
    tps_fraction: float = Field(0.9, gt=0, le=1)
    hold: Seconds = 5.0


class Slo(Frozen):
    """Targets; each applies to every client group of the load (the worst group counts) unless
    `group` names one."""

    group: Name | None = None
    rto_max: Seconds | None = None
    rpo_max_writes: int | None = Field(None, ge=0)
    max_error_rate_after_recovery: float | None = Field(None, ge=0, le=1)


class Abort(Frozen):
    error_rate_above: float = Field(0.95, gt=0, le=1)
    for_: Seconds = Field(60.0, alias="for")


class Audit(Frozen):
    """What a reviewer of a DR test record asks besides the figures: who took part, what was in
    scope, under which change, to show what; whether the testers were independent of the system's
    operators. From the playbook's `evidence:` and the command line (which adds to it)."""

    operator: FreeText | None = None  # default: user@host of the controller
    participants: tuple[FreeText, ...] = ()
    scope: FreeText = ""
    change_ref: FreeText = ""
    objectives: tuple[FreeText, ...] = ()
    independent_testers: bool | None = None
    # the run's window of each member's logs is kept under logs/ up to this many bytes per file
    # (first and last half beyond it); 0 keeps none
    log_bytes_per_file: int = Field(256 * 1024, ge=0, le=64 * 1024 * 1024)


class Playbook(Frozen):
    """Fields are validated in order: later checks can rely on earlier fields."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    description: FreeText = ""
    cluster: Name
    load: LoadConfig = LoadConfig()
    probes: ProbeConfig = ProbeConfig()
    baseline: Seconds = 10.0
    duration: Seconds
    recovery: Recovery = Recovery()
    # None: the workload's own checks and the cluster's (workload.workloads.default_checks)
    checks: tuple[CheckName, ...] = Field(None, validate_default=True)
    slo: Slo = Slo()
    abort: Abort = Abort()
    # HA manager settings set for the drill and restored afterwards (journaled like a fault), e.g.
    # {synchronous_mode: true} for Patroni; the cluster's manager says which it can change
    settings: dict[Name, bool | int | float | str] = Field(default_factory=dict)
    evidence: Audit = Audit()
    steps: tuple[Step, ...]

    @model_validator(mode="before")
    @classmethod
    def _fault_defaults(cls, data: Any) -> Any:
        """Each step fault gets the playbook's cluster and the drill's TTL unless it names its own."""
        refuse_renamed_patroni(data)
        if not isinstance(data, dict):
            return data
        try:
            duration = parse_duration(data["duration"])
            within = parse_duration((data.get("recovery") or {}).get("within", 60.0))
        except (ValueError, TypeError, AttributeError, KeyError):
            return data  # the fields' own validation reports it
        steps = data.get("steps")
        if not isinstance(steps, list):
            return data
        def completed(step: dict[str, Any], given: Any) -> Any:
            if not isinstance(given, dict):
                return given
            fault = dict(given)
            fault.setdefault("cluster", data.get("cluster"))
            if "ttl" not in fault:
                try:
                    at = parse_duration(step["at"])
                    dur = parse_duration(fault["duration"]) if fault.get("duration") is not None else None
                except (ValueError, TypeError, KeyError):
                    at, dur = None, None
                if at is not None:
                    fault["ttl"] = drill_fault_ttl(None, dur, max(0.0, duration - at), within)
            return fault

        out = []
        for step in steps:
            if isinstance(step, dict) and isinstance(step.get("fault"), dict):
                step = {**step, "fault": completed(step, step["fault"])}
            if isinstance(step, dict) and isinstance(step.get("faults"), list):
                step = {**step, "faults": [completed(step, f) for f in step["faults"]]}
            out.append(step)
        return {**data, "steps": out}

    @field_validator("duration")
    @classmethod
    def _bounded(cls, value: float) -> float:
        if not 0 < value <= MAX_DRILL_S:
            raise ValueError(f"a drill lasts between 0 and {MAX_DRILL_S / 3600:g} h")
        return value

    @field_validator("slo")
    @classmethod
    def _slo_group_exists(cls, value: Slo, info: ValidationInfo) -> Slo:
        load = _load_so_far(info)
        names = [g.group_name for g in (load.groups or ())] if load and load.groups else ["main"]
        if value.group is not None and value.group not in names:
            raise ValueError(f"slo.group {value.group!r} is not a group of the load ({', '.join(names)})")
        tools = {g.group_name: g.tool for g in (load.groups or ()) if not engine(g.tool).measures.rpo} if load else {}
        if value.rpo_max_writes is not None and (value.group in tools or (tools and not load.builtin_clients)):
            name = value.group if value.group in tools else next(iter(tools))
            raise ValueError(f"rpo_max_writes needs writes whose fate is known; group {name!r} runs {tools[name]}, "
                             "which does not say which writes it had acknowledged (its RPO is null): name a "
                             "builtin group in slo.group")
        return value

    @field_validator("checks", mode="before")
    @classmethod
    def _checks_default(cls, value: Any, info: ValidationInfo) -> Any:
        """No checks named: the ones the load's workload can judge, and the cluster's."""
        from chaoskit.workload.workloads import CLUSTER_CHECKS, default_checks

        load = _load_so_far(info)
        if value is not None:
            return value
        if load is None:
            return ()
        return default_checks(load.workload_name, load.workload_params()) if load.builtin_clients else CLUSTER_CHECKS

    @field_validator("checks")
    @classmethod
    def _checks_fit_workload(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """The workload says which checks it can judge; one it cannot is refused, never dropped."""
        from chaoskit.workload.workloads import CLUSTER_CHECKS, unsupported_check

        load = _load_so_far(info)
        for check in value if load is not None else ():
            why = unsupported_check(load.workload_name, check, load.workload_params())
            if why:
                raise ValueError(why)
            if check not in CLUSTER_CHECKS and not load.builtin_clients:
                tools = sorted({g.tool for g in load.groups or ()})
                raise ValueError(f"the {check} check reads the keys chaoskit's own clients write; every group here "
                                 f"is a tool ({', '.join(tools)}), which does not say which writes it had "
                                 "acknowledged: add a group with tool: builtin, or leave the check out")
        return value

    @field_validator("steps")
    @classmethod
    def _schedule(cls, value: tuple[Step, ...], info: ValidationInfo) -> tuple[Step, ...]:
        if not value:
            raise ValueError("a playbook needs at least one step")
        baseline, duration = info.data.get("baseline"), info.data.get("duration")
        if value[0].after is not None:
            raise ValueError("steps[0] starts at an offset: `after` waits for an event once the step before it started")
        for i, step in enumerate(value):
            if step.at is None:  # after an event: when is known at run time, bounded by its `within`
                continue
            if baseline is not None and step.at < baseline:
                raise ValueError(f"steps[{i}].at ({step.at:g}s) is inside the baseline window ({baseline:g}s)")
            end = step.at + (step.duration or 0)
            if duration is not None and end > duration:
                raise ValueError(f"steps[{i}] ends at {end:g}s, after the drill's duration ({duration:g}s)")
        return value

    def actions(self, *kinds: str) -> list[Action]:
        """The steps' actions of these kinds, in step order."""
        return [st.action for st in self.steps if st.action is not None and st.action.kind in kinds]
