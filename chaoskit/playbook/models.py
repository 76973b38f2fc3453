"""Playbook models (frozen, no unknown fields). Durations accept `30s`, `100ms`, `2m`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from chaoskit.faults.models import FaultSpec
from chaoskit.models import Frozen
from chaoskit.units import parse_duration

Seconds = Annotated[float, BeforeValidator(parse_duration)]
CheckName = Literal["rpo", "bank", "replica_convergence", "split_brain"]


class LoadConfig(Frozen):
    workload: str = "ledger"

    @field_validator("workload")
    @classmethod
    def _known(cls, value: str) -> str:
        from chaoskit.workload.workloads import WORKLOADS

        if value not in WORKLOADS:
            raise ValueError(f"unknown workload {value!r}; choose from {', '.join(WORKLOADS)}")
        return value

    workers: int = Field(4, ge=1, le=2048)
    rate: float | None = Field(None, gt=0)
    warmup: Seconds = 5.0
    op_timeout: Seconds = 2.0
    connect_timeout: Seconds = 1.0
    processes: int | None = Field(None, ge=1)
    table_rows: int = Field(10_000, ge=10)


class ProbeConfig(Frozen):
    interval: Seconds = 0.1


class StepFault(FaultSpec):
    """A fault in a schedule: `duration` reverts it that long after injection (else at heal)."""

    duration: Seconds | None = None

    @classmethod
    def _role_needs_cluster(cls) -> bool:
        return False  # the playbook's cluster is the default


class Action(Frozen):
    """switchover (Patroni REST, planned); restart: start a member's processes that are not running
    (its configured start command, over SSH); rejoin: rebuild a member from the leader (Patroni
    POST /reinitialize), e.g. an old primary that diverged."""

    kind: Literal["switchover", "restart", "rejoin"]
    candidate: str | None = None  # switchover: a member name; default: Patroni chooses
    target: str | None = None  # restart / rejoin: a member host

    @model_validator(mode="after")
    def _needs_target(self) -> Action:
        if self.kind in ("restart", "rejoin") and not self.target:
            raise ValueError(f"{self.kind} needs target (a member host)")
        return self


class Step(Frozen):
    at: Seconds
    fault: StepFault | None = None
    action: Action | None = None

    @model_validator(mode="after")
    def _one(self) -> Step:
        if (self.fault is None) == (self.action is None):
            raise ValueError("a step has exactly one of fault or action")
        return self


class Recovery(Frozen):
    within: Seconds = 60.0
    tps_fraction: float = Field(0.9, gt=0, le=1)
    hold: Seconds = 5.0


class Slo(Frozen):
    rto_max: Seconds | None = None
    rpo_max_writes: int | None = Field(None, ge=0)
    max_error_rate_after_recovery: float | None = Field(None, ge=0, le=1)


class Abort(Frozen):
    error_rate_above: float = Field(0.95, gt=0, le=1)
    for_: Seconds = Field(60.0, alias="for")


class PatroniSettings(Frozen):
    synchronous_mode: bool | None = None


class Playbook(Frozen):
    """Fields are validated in order: later checks can rely on earlier fields."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    cluster: str
    load: LoadConfig = LoadConfig()
    probes: ProbeConfig = ProbeConfig()
    baseline: Seconds = 10.0
    duration: Seconds
    recovery: Recovery = Recovery()
    checks: tuple[CheckName, ...] = ("rpo", "split_brain", "replica_convergence")
    slo: Slo = Slo()
    abort: Abort = Abort()
    patroni: PatroniSettings | None = None  # set for the drill, restored afterwards
    steps: tuple[Step, ...]

    @field_validator("checks")
    @classmethod
    def _checks_fit_workload(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        load = info.data.get("load")
        workload = load.workload if load else "ledger"
        if "bank" in value and workload != "bank":
            raise ValueError("the bank check needs load.workload: bank")
        if "rpo" in value and workload != "ledger":
            raise ValueError("the rpo check needs load.workload: ledger")
        return value

    @field_validator("steps")
    @classmethod
    def _schedule(cls, value: tuple[Step, ...], info: ValidationInfo) -> tuple[Step, ...]:
        if not value:
            raise ValueError("a playbook needs at least one step")
        baseline, duration = info.data.get("baseline"), info.data.get("duration")
        for i, step in enumerate(value):
            if baseline is not None and step.at < baseline:
                raise ValueError(f"steps[{i}].at ({step.at:g}s) is inside the baseline window ({baseline:g}s)")
            end = step.at + ((step.fault.duration or 0) if step.fault else 0)
            if duration is not None and end > duration:
                raise ValueError(f"steps[{i}] ends at {end:g}s, after the drill's duration ({duration:g}s)")
        return value

    def fault_ttl(self, step: Step) -> float:
        """Bounded: the step's own TTL if given, else the drill's remaining time plus a margin."""
        assert step.fault is not None
        if "ttl" in step.fault.model_fields_set:
            return step.fault.ttl
        return self.duration - step.at + self.recovery.within + 60
