"""What a drill is given, what it records as it runs, and what it hands on: three typed records
between the drill's stages (`chaoskit.drill`), its analysis (`chaoskit.analysis.drill`) and its
evidence (`chaoskit.report.writer`).

They live beside the playbook's models, below analysis and report, so both read them without an
import that climbs: the live handles of a drill (SSH pool, HA manager, fault manager, load, probe)
are not here; they belong to the drill and die with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chaoskit.db.roles import observed
from chaoskit.faults.manager import InjectedFault
from chaoskit.hostmetrics import HostSeries
from chaoskit.incomplete import Failures
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.lifeline import operator_identity
from chaoskit.playbook.models import Audit, Playbook
from chaoskit.recorder import Recorder
from chaoskit.topology.probe import ProbeLog


class EvidenceSink(Protocol):
    """Where a drill writes as it goes (a run directory): events flushed one by one, and files
    (the members' log windows)."""

    def event(self, ev: dict[str, Any]) -> None: ...

    def write_text(self, name: str, text: str) -> Any: ...

    def file(self, name: str) -> Path: ...


@dataclass(frozen=True)
class DrillInputs:
    """Everything a drill is given before it touches a host: the validated playbook and inventory,
    where they came from (path and the SHA-256 of the bytes loaded), whether production targets are
    allowed, and the audit fields (the playbook's `evidence:` with what the command line added)."""

    playbook: Playbook
    inventory: Inventory
    playbook_path: str
    inventory_path: str
    playbook_sha256: str = ""
    allow_production: bool = False
    audit: Audit | None = None  # None: the playbook's own `evidence:`

    @property
    def cluster(self) -> Cluster:
        """The cluster as the drill watches it: the inventory's, or for a managed service its
        endpoints standing in for members (`db.roles.observed`)."""
        return observed(self.inventory.clusters[self.playbook.cluster], self.inventory)

    @property
    def evidence(self) -> Audit:
        return self.audit if self.audit is not None else self.playbook.evidence

    @property
    def operator(self) -> str:
        return self.evidence.operator or operator_identity()


@dataclass
class DrillRecord:
    """What one drill did, filled in as it runs: its instants, the preflight's findings, every
    fault, action and event, the heal, the settings it changed, the logs it kept, the client groups,
    and how it ended (`aborted`, `refused`, `incomplete`). Every event goes to memory and, flushed,
    to `sink`.

    Threads: events come from the drill's thread and from the load's collector (a tool group's
    clients restarting); `event` appends under the record's lock, and a reader while the drill runs
    (the live view, the heal) takes `events_now()`, a copy. The other fields are written by the
    drill's thread alone."""

    started: float
    sink: Callable[[dict[str, Any]], None] | None = None
    ended: float = 0.0
    t0: float = 0.0  # load start: step offsets count from here
    run_id: str = ""
    preflight: dict[str, Any] = field(default_factory=dict)
    faults: list[InjectedFault] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    heal: dict[str, Any] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)  # chaoskit.hostlogs records
    settings_changed: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # client group -> profile, workers, route
    client_cpu: dict[str, Any] = field(default_factory=dict)  # the load's own CPU (chaoskit.workload.client_cpu)
    host_metrics: dict[str, HostSeries] = field(default_factory=dict)  # host -> its figures (chaoskit.hostmetrics)
    archive: list[dict[str, Any]] = field(default_factory=list)  # the primary's archiving each second (backup.watch)
    # steps `after` an event: what each waited for and saw (or why it was skipped)
    triggered: list[dict[str, Any]] = field(default_factory=list)
    aborted: str | None = None
    refused: str | None = None  # preflight refused: nothing was started
    # what failed after the drill started (the run is still sealed: `chaoskit.incomplete`)
    failures: Failures = field(default_factory=Failures)
    # what the abort rule judged: how far behind the present the delivered second was
    abort_rule: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def incomplete(self) -> str | None:
        return self.failures.summary()

    def event(self, kind: str, t: float, **data: Any) -> None:
        """Record an event now: in memory and, flushed, in the sink."""
        ev = {"kind": kind, "t": t, **data}
        with self._lock:
            self.events.append(ev)
        if self.sink is not None:
            self.sink(ev)  # the run directory orders and chains events under its own lock

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Events another part kept (the role probe's), into memory only (its sink had them)."""
        with self._lock:
            self.events.extend(events)

    def events_now(self) -> list[dict[str, Any]]:
        """The events so far (a copy: safe while other threads add to them)."""
        with self._lock:
            return list(self.events)


@dataclass(frozen=True)
class DrillResult:
    """A finished drill, for the evidence: its inputs and record, the load's recorder and the role
    probe's log (None when the drill never got that far), what was read from the cluster after it
    (`truth`), and the analysis (`results`: figures and verdicts)."""

    inputs: DrillInputs
    record: DrillRecord
    recorder: Recorder | None = None
    probe: ProbeLog | None = None
    truth: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
