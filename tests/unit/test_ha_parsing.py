"""Each manager's parsing against outputs recorded on the lab (tests/fixtures/ha/): Patroni 3.0.2's
/cluster and etcd's leader-key watch (gateway and etcdctl), pg_auto_failover 2.0's monitor rows
during a switchover, repmgr 5.3's nodes, events and repmgrd log around a failover. Expected values
are read off the fixture files by eye, not produced by the code under test."""

from __future__ import annotations

import json
from pathlib import Path

from chaoskit.ha import patroni, pg_auto_failover, repmgr
from chaoskit.ha.base import ManagerEvent

FIX = Path(__file__).parents[1] / "fixtures" / "ha"


def load(name: str) -> object:
    return json.loads((FIX / name).read_text())


def views(vs: list) -> list[tuple]:
    return [(v.member, v.role, v.state, v.lag_bytes, v.timeline) for v in vs]


# -- Patroni --------------------------------------------------------------------------------
def test_patroni_cluster_before_and_after_a_switchover() -> None:
    before = patroni.member_views(load("patroni-3.0.2-cluster.json"), ["pg1", "pg2", "pg3", "pg4"])
    assert views(before) == [("pg1", "replica", "running", 0, 1), ("pg2", "leader", "running", None, 1),
                             ("pg3", "replica", "running", 0, 1), ("pg4", "down", None, None, None)]
    after = patroni.member_views(load("patroni-3.0.2-cluster-after-switchover.json"), ["pg1", "pg2", "pg3"])
    # pg3 had not reported its timeline yet, and was 280 bytes behind
    assert views(after) == [("pg1", "leader", "running", None, 2), ("pg2", "replica", "running", 0, 2),
                            ("pg3", "replica", "running", 280, None)]


def test_etcd_watch_lines_in_both_formats_give_the_same_leader_events() -> None:
    for name in ("etcd-gateway-watch.jsonl", "etcdctl-watch.jsonl"):
        changes = [c for line in (FIX / name).read_text().splitlines() for c in patroni.key_changes(line)]
        assert changes == [patroni.KeyChange(True, None, 65), patroni.KeyChange(False, "pg1", 67)], name
        got: list[ManagerEvent] = []
        tracker = patroni.LeaderKeyTracker("pg2")
        for i, change in enumerate([*changes, patroni.KeyChange(False, "pg1", 70)]):  # + a lease renewal
            tracker.feed(got.append, "w", change, 100.0 + i, None, 0.001)
        assert [(e.kind, e.member, e.revision, e.t) for e in got] == [("leader_lost", "pg2", 65, 100.0),
                                                                       ("leader_changed", "pg1", 67, 101.0)]
        assert got[0].detail == "leader key deleted (lease of pg2 ended)"
    assert patroni.key_changes("not json") == [] and patroni.key_changes("[1]") == []


# -- pg_auto_failover -----------------------------------------------------------------------
def test_pgaf_nodes_steady_and_in_the_middle_of_a_switchover() -> None:
    hosts, names = ["af1", "af2", "af3"], {}
    assert views(pg_auto_failover.member_views(load("pgaf-2.0-nodes.json"), hosts, names)) == [
        ("af1", "leader", "primary", 0, 1), ("af2", "replica", "secondary", 0, 1),
        ("af3", "replica", "secondary", 0, 1)]
    # while the monitor asks every node for its LSN, nobody leads
    assert views(pg_auto_failover.member_views(load("pgaf-2.0-nodes-during-switchover.json"), hosts, names)) == [
        ("af1", "replica", "report_lsn", 0, 1), ("af2", "replica", "prepare_promotion>wait_primary", 0, 1),
        ("af3", "replica", "report_lsn", 0, 1)]


def test_pgaf_switchover_events() -> None:
    leaders = {"af1"}
    out = pg_auto_failover.classify_events(load("pgaf-2.0-events-switchover.json"), {}, leaders)
    kinds = [(eventid, member, kind) for eventid, _, member, kind, _ in out]
    # 25/26: af1 goal draining; 28-30: every node goal report_lsn; 35: af2 goal prepare_promotion;
    # 38/39: af3, af1 goal join_secondary (not a failover goal); 40: af2 reports wait_primary
    assert kinds == [(25, "af1", "failover_started"), (26, "af1", "failover_started"),
                     (28, "af1", "failover_started"), (29, "af2", "failover_started"),
                     (30, "af3", "failover_started"), (35, "af2", "failover_started"), (40, "af2", "promoted")]
    assert leaders == {"af2"}  # 48 (af2 reports primary) is therefore not a second promotion


# -- repmgr ---------------------------------------------------------------------------------
def test_repmgr_nodes_after_a_failover() -> None:
    rows = [tuple(r) for r in load("repmgr-5.3-nodes-after-failover.json")]
    assert views(repmgr.member_views(rows, ["rm1", "rm2", "rm3"], {})) == [
        ("rm1", "down", "primary (inactive)", None, None), ("rm2", "leader", "primary", None, None),
        ("rm3", "replica", "standby", None, None)]
    assert [v.role for v in repmgr.member_views([], ["rm1"], {})] == ["unknown"]


def test_repmgr_events_of_a_failover() -> None:
    got = [(e[1], repmgr.event_kind(e[1], e[2])) for e in load("repmgr-5.3-events-failover.json")]
    assert got == [("standby_promote", "promoted"), ("repmgrd_failover_promote", "promoted"),
                   ("repmgrd_reload", None), ("standby_follow", None),
                   ("repmgrd_failover_follow", "failover_started"), ("child_node_new_connect", "member_state")]
    assert repmgr.event_kind("standby_promote", False) == "failover_started"  # a failed promotion is a reaction


def test_repmgrd_logs_of_the_promoted_and_the_following_standby() -> None:
    def hits(name: str) -> list:
        return [(line[1:20], h) for line in (FIX / name).read_text().splitlines()
                if (h := repmgr.log_event(line)) is not None]

    assert hits("repmgrd-5.3-promoted-standby.log") == [
        ("2026-11-30 19:40:20", ("leader_lost", "rm1")), ("2026-11-30 19:40:21", ("failover_started", "rm1")),
        ("2026-11-30 19:40:21", ("failover_started", None)), ("2026-11-30 19:40:22", ("promoted", None))]
    assert hits("repmgrd-5.3-following-standby.log") == [
        ("2026-11-30 19:40:19", ("leader_lost", "rm1")), ("2026-11-30 19:40:20", ("failover_started", "rm1")),
        ("2026-11-30 19:40:22", ("member_state", None))]
