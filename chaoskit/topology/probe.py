"""The role probe: every member's writability (asked of the server) and the HA manager's view,
every `interval`, plus the manager's own event stream, all as events on the recorder's clock.

One thread per member keeps its own connection (reconnecting with short timeouts), so a dead or
frozen member never delays the others' samples. Every sample is kept in compact form (time,
member, writable) for split-brain and promotion timing; changes become events. The manager's
view (`HAManager.members()`) is polled too: leader changes seen that way are detection events of
their own (`source: <kind>-poll`, the interval as uncertainty), beside the manager's native
events (`HAManager.watch`), which carry its own timestamps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.ha.base import LEADER, UNKNOWN, HAManager, ManagerEvent, Watcher
from chaoskit.inventory.models import Cluster, Inventory, Member


@dataclass
class ProbeLog:
    samples: list[tuple[float, str, str]] = field(default_factory=list)  # (t, member, primary|replica|down)
    manager: list[tuple[float, str | None, dict[str, str]]] = field(default_factory=list)  # (t, leader, states)
    lag: list[tuple[float, dict[str, int | None], dict[str, int | None]]] = field(default_factory=list)  # lag, timeline
    manager_events: list[ManagerEvent] = field(default_factory=list)
    # as the primary reports its standbys (PostgreSQL), or each replica itself (MySQL):
    # (t, {member: (state, replay lag bytes, replay delay s)})
    replication: list[tuple[float, dict[str, tuple[str, int | None, float | None]]]] = field(default_factory=list)
    positions: list[tuple[float, str, str]] = field(default_factory=list)  # (t, member, GTID set or LSN)
    # multi-writer clusters (Galera): (t, member, the component it is in), see writer_view
    components: list[tuple[float, str, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sink: Callable[[dict[str, Any]], None] | None = None  # e.g. the run directory: events as they happen

    def emit(self, ev: dict[str, Any]) -> None:
        """Record an event (call with the lock held)."""
        self.events.append(ev)
        if self.sink is not None:
            self.sink(ev)

    def current_roles(self) -> dict[str, str]:
        with self.lock:
            latest: dict[str, str] = {}
            for _, member, role in self.samples[-64:]:
                latest[member] = role
            return latest

    def current_sync(self) -> set[str]:
        with self.lock:
            if not self.manager:
                return set()
            _, _, states = self.manager[-1]
        return {m for m, s in states.items() if s.endswith("/sync")}

    def add_manager_event(self, ev: ManagerEvent) -> None:
        with self.lock:
            self.manager_events.append(ev)
            self.emit(ev.to_dict())


class RoleProbe:
    def __init__(self, cluster: Cluster, inventory: Inventory, ha: HAManager, interval: float = 0.1,
                 sink: Callable[[dict[str, Any]], None] | None = None, driver: Driver | None = None) -> None:
        self.cluster = cluster
        self.inventory = inventory
        self.ha = ha
        self.interval = interval
        self.driver: Driver = (driver or driver_for(cluster, inventory)).tuned(
            connect_timeout=min(1.0, 5 * interval), op_timeout=min(1.0, 5 * interval))
        self.log = ProbeLog(sink=sink)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.watcher: Watcher | None = None

    def start(self) -> None:
        for member in self.cluster.members:
            self._spawn(self._member_loop, f"probe-{member.host}", member)
        if self.ha.observable:
            self._spawn(self._manager_loop, f"probe-{self.ha.kind}")
            self.watcher = self.ha.watch(self.log.add_manager_event, self.interval)

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        if self.watcher is not None:
            self.watcher.stop()
            for err in self.watcher.errors:
                with self.log.lock:
                    self.log.emit({"kind": "manager_watch_error", "t": time.time(), "error": err})
        for t in self._threads:
            t.join(timeout=5)
        self.ha.close()  # the member sessions its polls kept open (MHA, Galera)

    def _tick(self, next_t: float) -> float:
        next_t += self.interval
        self._stop.wait(max(0.0, next_t - time.time()))
        if next_t < time.time() - self.interval:  # fell behind (a slow connect): resync
            next_t = time.time()
        return next_t

    def _member_loop(self, member: Member) -> None:
        conn = None
        last = None
        next_t = time.time()
        by_address = {self.inventory.member_address(m): m.host for m in self.cluster.members}
        # engines whose replicas report their own replication and position (MySQL)
        own = getattr(type(self.driver), "replica_state", Driver.replica_state)
        self_reporting = own is not Driver.replica_state
        multi_writer = getattr(self.ha, "multi_writer", False)
        while not self._stop.is_set():
            role = "down"
            standbys = None
            position = None
            component = None
            try:
                if conn is None:
                    conn = self.driver.connect_member(member)
                role, position = self.driver.role_and_position(conn)
                if role == "primary":  # the standbys' catch-up, as their primary sees it
                    standbys = {by_address.get(a, a): (st, b, d)
                                for a, st, b, d in self.driver.replication_status(conn)}
                    if self_reporting:  # a promoted replica's own state ends here
                        standbys[member.host] = ("primary", None, None)
                elif self_reporting:  # or as the replica itself says (MySQL)
                    own = self.driver.replica_state(conn)
                    standbys = {member.host: own} if own is not None else None
                if multi_writer:
                    component = self.driver.component(conn)
            except Exception:
                Driver.close_quietly(conn)
                conn = None
            t = time.time()
            with self.log.lock:
                if standbys is not None:
                    self.log.replication.append((t, standbys))
                if position is not None:
                    self.log.positions.append((t, member.host, position))
                if component is not None:
                    self.log.components.append((t, member.host, component))
                self.log.samples.append((t, member.host, role))
                if role != last:
                    self.log.emit({"kind": "role", "t": t, "member": member.host, "role": role,
                                            "previous": last})
            last = role
            next_t = self._tick(next_t)
        Driver.close_quietly(conn)

    def _manager_loop(self) -> None:
        """The manager's view, polled; its leader changes and a leader leaving its healthy state
        are detection events with the poll interval as uncertainty."""
        source = f"{self.ha.kind}-poll"
        last_leader: str | None = "?"
        last_states: dict[str, str] = {}
        next_t = time.time()
        while not self._stop.is_set():
            try:
                views = self.ha.members()
            except Exception:  # a poll that fails is a sample missed
                views = []
            t = time.time()
            if views and not all(v.role == UNKNOWN for v in views):
                leader = next((v.member for v in views if v.role == LEADER), None)
                states = {v.member: f"{v.role}/{v.state}" + ("/sync" if v.sync else "") for v in views}
                lags = {v.member: v.lag_bytes for v in views}
                timelines = {v.member: v.timeline for v in views}
                with self.log.lock:
                    self.log.manager.append((t, leader, states))
                    self.log.lag.append((t, lags, timelines))
                    if states != last_states:
                        self.log.emit({"kind": "manager_members", "t": t, "members": states})
                if last_leader != "?" and leader != last_leader and getattr(self.ha, "view_is_own", True):
                    self.log.add_manager_event(ManagerEvent(
                        t, "leader_lost" if leader is None else "leader_changed", source, leader or last_leader,
                        f"leader {last_leader} -> {leader}", uncertainty_s=self.interval))
                healthy = self.ha.healthy_states
                if healthy and leader is not None and leader == last_leader:
                    now_state, before = states.get(leader, "").split("/")[1], last_states.get(leader, "/").split("/")[1]
                    if before in healthy and now_state not in healthy:
                        self.log.add_manager_event(ManagerEvent(
                            t, "demoted", source, leader, f"leader {leader} state {now_state}",
                            uncertainty_s=self.interval))
                last_leader, last_states = leader, states
            next_t = self._tick(next_t)



def same_component(a: str | None, b: str | None) -> bool:
    """Two members' components (`Driver.component`: "<status>:<member,member,...>") are one
    database when both see members in common: a node is in one component at a time, so two
    Primary Components never share one, while members of one component that see a view change
    an instant apart (one still lists the departed node) do. Unknown components (single-writer
    engines) count as one."""
    if a is None or b is None:
        return a == b
    seen_a, seen_b = (set(c.partition(":")[2].split(",")) - {""} for c in (a, b))
    return a == b or bool(seen_a & seen_b)


def first_writer(roles: dict[str, str], order: list[str]) -> dict[str, str]:
    """Member roles now (member -> primary | replica | down) with only the first writable member
    in `order` left `primary`: the writer of a multi-writer cluster as its clients use it."""
    first = next((m for m in order if roles.get(m) == "primary"), None)
    return {m: ("replica" if r == "primary" and m != first else r) for m, r in roles.items()}


def writer_view(log: ProbeLog, order: list[str]) -> ProbeLog:
    """The probe's samples as a multi-writer cluster's clients see them: of the writable members
    of one component only the first in `order` (the inventory's) is `primary`, the writer
    HAProxy's one-writer-plus-backups and an endpoint list searched in order both use; the
    others are `replica` (writable, not written to). Two components each with a writer stay two
    primaries: split-brain. Everything but the samples is shared with `log`."""
    rank = {m: i for i, m in enumerate(order)}
    changes = sorted([(t, 0, m, r) for t, m, r in log.samples] + [(t, -1, m, c) for t, m, c in log.components],
                     key=lambda x: (x[0], x[1]))
    component: dict[str, str] = {}
    writable: dict[str, bool] = {}
    samples = []
    for t, is_component, member, value in changes:
        if is_component:
            component[member] = value
            continue
        writable[member] = value == "primary"
        role = value
        if value == "primary":
            mine = component.get(member)
            if any(writable.get(o) and same_component(component.get(o), mine)
                   for o in order if rank[o] < rank.get(member, 1 << 30)):
                role = "replica"
        samples.append((t, member, role))
    out = ProbeLog(samples=samples, manager=log.manager, lag=log.lag, manager_events=log.manager_events,
                   replication=log.replication, positions=log.positions, events=log.events,
                   components=sorted(log.components))
    return out
