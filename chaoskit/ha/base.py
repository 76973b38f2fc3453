"""The HA manager contract: everything manager-specific behind one abstract base (the model is
Patroni's own `AbstractDCS`: one base, one module per implementation, chosen by a config key).

A cluster's inventory entry names its manager, `ha: {kind: patroni, ...}`; the module in
`chaoskit/ha/` whose `HAManager` subclass has that `kind` is used, with its own `Config` model
for the rest of the mapping. Drill runner, preflight, probes, analysis, experiments and the lab
talk to managers only through this interface.

Contract for a manager:
- `members()`: every member's role as the manager sees it right now (`leader | replica | down |
  unknown`), its state string, replication lag and whether it is the synchronous standby. Never
  raises for a member that does not answer: it is `down`/`unknown` with the reason.
- `watch(sink)`: detection events with the manager's own timestamps where it has them (Patroni:
  the DCS's leader key as it changes; pg_auto_failover: the monitor's event table; repmgr:
  `repmgr.events`; MHA: its log), each on the control clock with its uncertainty. Beside it the
  role probe polls `members()` and reports leader changes itself (`source: <kind>-poll`,
  uncertainty = the interval). `observable = False` (no manager) means: no detection signal
  exists; the analysis reports it as null with that reason, never invents one.
- `switchover(candidate)`, `rejoin(member)`: planned switchover and bringing an old primary back
  as a replica (rewind or rebuild), as the manager does them; `ActionResult` says what happened.
- `read_settings()` / `apply_settings(values)`: the settings that matter for the evidence (failover
  timings, synchronous replication) read from the cluster; changes return the previous values so
  the caller journals them and restores them (errors raise: a 401 or a TLS failure must never
  leave a "sync" drill running async).
- `multi_writer`: every member of the quorum takes writes (Galera); see the attribute.
- `health()`: preflight; `detection_bound_s()`: how long a failed leader can go unnoticed with
  these settings (a failover drill whose fault is shorter would measure nothing);
  `log_sources()`: where its and the database's logs are on each member.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from chaoskit.inventory.haconfig import HaConfig

if TYPE_CHECKING:
    from chaoskit.db.base import Driver
    from chaoskit.ha.sessions import MemberSessions
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.inventory.models import Cluster, Inventory

LEADER, REPLICA, DOWN, UNKNOWN = "leader", "replica", "down", "unknown"


@dataclass(frozen=True)
class MemberView:
    member: str  # the member's host name in the inventory
    role: str  # leader | replica | down | unknown, as the manager sees it
    state: str | None = None  # the manager's own state word (running, streaming, primary, ...)
    lag_bytes: int | None = None
    sync: bool = False  # the manager names it the synchronous standby
    timeline: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ManagerEvent:
    """Something the manager did or saw, on the control clock."""

    t: float
    # leader_lost | leader_changed | failover_started | confirmed | promoted | demoted | member_state | view_change
    kind: str
    source: str  # e.g. etcd-watch, rest-poll, monitor-events, repmgr-events, mha-log, poll
    member: str | None = None
    detail: str = ""
    uncertainty_s: float = 0.0
    t_host: float | None = None  # the manager's own timestamp, before offset correction
    revision: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["event"] = data.pop("kind")
        return {"kind": "manager_event", **data}


# events that mean the manager reacted to a failure (T_detect is the first one after T_fault)
REACTION_EVENTS = frozenset({"leader_lost", "leader_changed", "failover_started", "demoted", "view_change",
                             "confirmed"})
# DM's confirmation monitor agreed the primary failed and a standby's takeover runs: the end of
# detection's confirmation sub-phase (chaoskit/docs/methodology.md)
CONFIRMATION_EVENT = "confirmed"


@dataclass
class ActionResult:
    kind: str  # switchover | rejoin
    ok: bool
    t_sent: float
    t_answered: float
    member: str | None = None  # switchover: the leader it was asked of; rejoin: the member
    candidate: str | None = None
    answer: str = ""
    rewound: bool | None = None  # rejoin: pg_rewind used (None: not observable)
    rebuilt: bool | None = None  # rejoin: the member was re-cloned
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Watcher:
    """A running event stream; `stop()` ends it. The default polls `members()`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closers: list[Callable[[], None]] = []
        self.errors: list[str] = []

    def on_stop(self, closer: Callable[[], None]) -> None:
        """Called at stop, e.g. to shut a socket a thread is blocked reading."""
        self._closers.append(closer)

    def spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=self._guard(target), name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # a watcher that dies says so in the evidence, never kills the drill
                self.errors.append(f"{type(exc).__name__}: {exc}")

        return run

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()
        for closer in self._closers:
            try:
                closer()
            except Exception as exc:  # closing what is already closed
                self.errors.append(f"on stop: {exc}")
        for t in self._threads:
            t.join(timeout=5)


class HAManager(ABC):
    kind: ClassVar[str] = ""
    Config: ClassVar[type[HaConfig]] = HaConfig
    observable: ClassVar[bool] = True  # has a signal of its own for T_detect
    # members() is the manager's own view (a leader change seen by polling it is the manager
    # reacting); False where members() asks the servers (MHA): only watch() events then count
    view_is_own: ClassVar[bool] = True
    # every member of the quorum takes writes (Galera): the writer the clients use is the first
    # writable member in inventory order (what HAProxy's one-writer-plus-backups and an endpoint
    # list both pick), several writable members in one component are no split-brain, and
    # nothing is promoted (t_promoted is null; the clients' first write ends the outage)
    multi_writer: ClassVar[bool] = False
    changeable_settings: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, cluster: Cluster, inventory: Inventory, pool: RemotePool | None = None) -> None:
        self.cluster = cluster
        self.inventory = inventory
        self.pool = pool
        self.config = cluster.ha
        self._sessions: MemberSessions | None = None
        self._sessions_lock = threading.Lock()

    def sessions(self) -> MemberSessions:
        """One kept connection per member, for managers whose view is asked of the servers
        themselves (MHA, Galera): see `chaoskit.ha.sessions`. Closed by `close()`."""
        from chaoskit.ha.sessions import MemberSessions

        with self._sessions_lock:
            if self._sessions is None:
                self._sessions = MemberSessions(self.session_driver(), list(self.cluster.members))
            return self._sessions

    def session_driver(self) -> Driver:
        """The driver (and its timeouts) the member sessions connect with."""
        from chaoskit.db.registry import driver_for

        return driver_for(self.cluster, self.inventory).tuned(connect_timeout=2.0, op_timeout=3.0)

    def close(self) -> None:
        """Release what the manager keeps open between calls (its member sessions)."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, None
        if sessions is not None:
            sessions.close()

    # -- roles -------------------------------------------------------------------------------
    @abstractmethod
    def members(self) -> list[MemberView]:
        """Every member's role as the manager sees it now."""

    def leader(self) -> str | None:
        return next((m.member for m in self.members() if m.role == LEADER), None)

    # -- detection ---------------------------------------------------------------------------
    # the manager's own state words for a member that is fine (a leader leaving them is a reaction)
    healthy_states: ClassVar[frozenset[str]] = frozenset()

    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        """The manager's native event stream (its own timestamps). The default has none: the role
        probe's poll of `members()` is then the only signal, and says so."""
        return Watcher()

    # -- actions -----------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> ActionResult:
        raise NotImplementedError(f"{self.kind}: no planned switchover")

    def rejoin(self, member: str) -> ActionResult:
        raise NotImplementedError(f"{self.kind}: no rejoin of an old primary")

    def takeover(self, candidate: str | None = None) -> ActionResult:
        """A standby made the primary while the old primary is down (DM's `takeover`): the
        operator's move where the manager does not fail over by itself."""
        raise NotImplementedError(f"{self.kind}: no takeover")

    # the drill starts the member's declared processes before `rejoin` (DM: the watcher rejoins a
    # running old primary by itself) rather than after it (the others bring the server up themselves)
    rejoin_after_restart: ClassVar[bool] = False

    def switchover_pair(self, candidate: str | None) -> tuple[str | None, str | None]:
        """(the leader now, the member to promote: the one asked for, else the first replica)."""
        leader = self.leader()
        if candidate is None:
            candidate = next((m.member for m in self.members() if m.role == REPLICA), None)
        return leader, candidate

    # how long a rejoin waits for another member to be the primary: a rejoin is scheduled at a fixed
    # offset, and a failover that has to apply a lagging replica's relay log first (MHA) can still be
    # under way then (measured here: 13 to 35 s after the kill)
    REJOIN_WAIT_S: ClassVar[float] = 60.0

    def rejoin_target(self, member: str, wait_s: float | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> tuple[str | None, ActionResult | None]:
        """The leader an old primary rejoins, waiting up to `wait_s` for a member other than it to
        be the primary (a failover still under way); the refusal, with how long it waited, when
        there is none."""
        t = time.time()
        bound = self.REJOIN_WAIT_S if wait_s is None else wait_s
        while True:
            leader = self.leader()
            if leader is not None and leader != member:
                return leader, None
            waited = time.time() - t
            if waited >= bound:
                return None, ActionResult("rejoin", False, t, time.time(), member=member,
                                          answer=f"no other primary to rejoin after waiting {waited:.1f} s "
                                                 f"(leader: {leader})")
            sleep(min(0.5, bound - waited))

    @property
    def can_switchover(self) -> bool:
        return type(self).switchover is not HAManager.switchover

    @property
    def can_rejoin(self) -> bool:
        return type(self).rejoin is not HAManager.rejoin

    @property
    def can_takeover(self) -> bool:
        return type(self).takeover is not HAManager.takeover

    # -- settings ----------------------------------------------------------------------------
    def read_settings(self) -> dict[str, Any]:
        return {}

    def apply_settings(self, values: dict[str, Any]) -> dict[str, Any]:
        """Change settings; returns the previous values. Raises on any error."""
        raise NotImplementedError(f"{self.kind}: settings cannot be changed by chaoskit")

    # -- preflight, bounds, logs -------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        views = self.members()
        leaders = [m.member for m in views if m.role == LEADER]
        down = [f"{m.member} ({m.error or m.state})" for m in views if m.role in (DOWN, UNKNOWN)]
        if len(leaders) != 1 or down:
            return False, f"leaders={leaders or 'none'}, down={down or 'none'}"
        return True, "ok"

    def detection_bound_s(self) -> float | None:
        return None

    def version(self) -> str | None:
        return None

    def log_sources(self) -> dict[str, dict[str, str]]:
        """member host -> {label: log file} the manager knows of beyond the inventory's `logs`
        (e.g. repmgrd's `log_file` from repmgr.conf); kept for the run's window (chaoskit.hostlogs)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """For the evidence: what manager, which version, its settings."""
        return {"manager": self.kind, "version": self.version(), "settings": self.read_settings()}
