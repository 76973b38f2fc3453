"""The role probe's view of a failover (fake driver and fake HA manager, real threads at a 10 ms
interval) and the drill's schedule as a pure function."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from chaoskit.ha.base import DOWN, LEADER, REPLICA, MemberView, Watcher
from chaoskit.inventory import load_inventory
from chaoskit.playbook import schedule
from chaoskit.playbook.models import Playbook
from chaoskit.topology.probe import RoleProbe


class World:
    """pg1 is the writer until `failed`, then down; pg2 becomes the writer at `promoted`."""

    def __init__(self) -> None:
        self.failed = threading.Event()
        self.promoted = threading.Event()


class FakeDriver:
    def __init__(self, world: World) -> None:
        self.world = world
        self.tunings: list[dict[str, Any]] = []

    def tuned(self, **changes: Any) -> FakeDriver:
        self.tunings.append(changes)
        return self

    def connect_member(self, member: Any) -> str:
        if member.host == "pg1" and self.world.failed.is_set():
            raise ConnectionRefusedError("pg1 down")
        return member.host

    def role_and_position(self, conn: str) -> tuple[str, str | None]:
        if conn == "pg1" and self.world.failed.is_set():
            raise ConnectionResetError("pg1 gone")
        writable = conn == "pg1" or (conn == "pg2" and self.world.promoted.is_set())
        return ("primary" if writable else "replica"), None

    def replication_status(self, conn: str) -> list[tuple[str, str, int, float]]:
        return [("127.0.0.3", "streaming", 0, 0.0)]


class FakeManager:
    kind = "fake"
    observable = True
    healthy_states = frozenset({"running"})

    def __init__(self, world: World) -> None:
        self.world = world
        self.watched = False
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def members(self) -> list[MemberView]:
        w = self.world
        if w.promoted.is_set():
            return [MemberView("pg1", DOWN, "stopped"), MemberView("pg2", LEADER, "running")]
        if w.failed.is_set():
            return [MemberView("pg1", LEADER, "stopped"), MemberView("pg2", REPLICA, "streaming")]
        return [MemberView("pg1", LEADER, "running"), MemberView("pg2", REPLICA, "streaming", sync=True)]

    def watch(self, sink: Any, interval: float) -> Watcher:
        self.watched = True
        return Watcher()


def test_the_probe_sees_the_failover_as_it_happens(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent("""
        hosts:
          pg1: {address: 127.0.0.2}
          pg2: {address: 127.0.0.3}
        clusters:
          pg: {engine: postgres, user: u, members: [pg1, pg2]}
        """))
    inv = load_inventory(p)
    world = World()
    driver = FakeDriver(world)
    ha = FakeManager(world)
    sunk: list[dict] = []
    probe = RoleProbe(inv.clusters["pg"], inv, ha, interval=0.01, sink=sunk.append,  # type: ignore[arg-type]
                      driver=driver)  # type: ignore[arg-type]
    # the drill's driver, with the probe's short timeouts (5 intervals, at most 1 s)
    assert driver.tunings == [{"connect_timeout": 0.05, "op_timeout": 0.05}]
    probe.start()
    def seen(member: str, role: str) -> None:  # waits for the probe (the machine may be busy)
        deadline = time.time() + 10
        while probe.log.current_roles().get(member) != role and time.time() < deadline:
            time.sleep(0.01)

    def manager_saw(state: str) -> None:
        deadline = time.time() + 10
        while not (probe.log.manager and probe.log.manager[-1][2].get("pg1", "").endswith(state)) \
                and time.time() < deadline:
            time.sleep(0.01)

    try:
        seen("pg1", "primary"), seen("pg2", "replica"), manager_saw("running")
        assert probe.log.current_roles() == {"pg1": "primary", "pg2": "replica"}
        assert probe.log.current_sync() == {"pg2"}
        t_fail = time.time()
        world.failed.set()
        seen("pg1", "down"), manager_saw("stopped")
        t_promote = time.time()
        world.promoted.set()
        seen("pg2", "primary"), manager_saw("down/stopped")
    finally:
        probe.stop()
    assert ha.watched and ha.closed  # the probe released what the manager kept open
    log = probe.log
    assert log.current_roles() == {"pg1": "down", "pg2": "primary"}
    roles = [(e["member"], e["previous"], e["role"]) for e in log.events if e["kind"] == "role"]
    assert sorted(roles, key=str) == sorted([("pg1", None, "primary"), ("pg2", None, "replica"),
                                             ("pg1", "primary", "down"), ("pg2", "replica", "primary")], key=str)
    # the manager's view, polled: the leader left its healthy state, then the leader changed
    events = [(e.kind, e.source, e.member, e.detail, e.uncertainty_s) for e in log.manager_events]
    assert events == [("demoted", "fake-poll", "pg1", "leader pg1 state stopped", 0.01),
                      ("leader_changed", "fake-poll", "pg2", "leader pg1 -> pg2", 0.01)]
    demoted, changed = log.manager_events
    assert t_fail <= demoted.t <= t_promote and changed.t >= t_promote
    # the primary's view of its standbys, keyed by member name (address 127.0.0.3 is pg2)
    assert log.replication and log.replication[0][1] == {"pg2": ("streaming", 0, 0.0)}
    # everything the log emitted reached the sink as it happened
    assert [e["kind"] for e in sunk] == [e["kind"] for e in log.events]


def test_schedule_is_a_pure_function_of_the_playbook_and_t0() -> None:
    pb = Playbook.model_validate({
        "name": "s", "cluster": "pg", "baseline": "1s", "duration": "30s",
        "steps": [
            {"at": "10s", "fault": {"kind": "kill", "target": "role:primary"}},
            {"at": "1s", "fault": {"kind": "pause", "target": "pg2", "duration": "1s"}},
            {"at": "12s", "fault": {"kind": "latency", "target": "client", "delay_ms": 50, "duration": "2s"}},
            {"at": "20s", "action": {"kind": "switchover"}},
        ]})
    items = schedule.plan(pb, 100.0)
    assert [(i.t, i.what, i.step) for i in items] == [
        (100.0, "stage", 1),  # 1 s - 1.5 s ahead: not before the load started
        (101.0, "trigger", 1),
        (108.5, "stage", 0),  # 10 s - 1.5 s
        (110.0, "trigger", 0),
        (112.0, "trigger", 2),  # the load's own link: nothing to stage on a host
        (120.0, "action", 3)]
    assert schedule.plan(pb, 100.0) == items
    # at one instant a stage comes before a trigger, a trigger before a revert
    Do, Item = schedule.Do, schedule.Item
    assert sorted([schedule.revert_item(0, 5.0), Item.of(5.0, Do.TRIGGER, 1), Item.of(5.0, Do.STAGE, 2)]) == [
        Item.of(5.0, Do.STAGE, 2), Item.of(5.0, Do.TRIGGER, 1), schedule.revert_item(0, 5.0)]
    # a trigger and an action due together go in step order, whichever is which
    assert sorted([Item.of(5.0, Do.TRIGGER, 3), Item.of(5.0, Do.ACTION, 2)]) == [
        Item.of(5.0, Do.ACTION, 2), Item.of(5.0, Do.TRIGGER, 3)]
    assert all(isinstance(i.what, Do) for i in items)
