"""Galera: roles from wsrep status recorded on the lab (tests/fixtures/ha/galera-*), provider
options, the writer view of a multi-writer cluster, split-brain across components, the
non-Primary spans and the no-promotion phases. Every expected value is read off the fixture or
worked out by hand from the samples written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaoskit.analysis.checks import split_brain
from chaoskit.analysis.failover import analyse_fault, fault_outcome, non_primary_spans
from chaoskit.ha.base import DOWN, LEADER, REPLICA
from chaoskit.ha.galera import assign_roles, describe_change, iso_seconds, parse_options, view_of
from chaoskit.recorder import Recorder
from chaoskit.topology.probe import ProbeLog, first_writer, same_component, writer_view

FIX = Path(__file__).parents[1] / "fixtures" / "ha"
ORDER = ["galera1", "galera2", "galera3"]
ALL3 = "Primary:10.77.0.71:3306,10.77.0.72:3306,10.77.0.73:3306"
TWO = "Primary:10.77.0.71:3306,10.77.0.72:3306"


def nodes(name: str) -> dict[str, dict[str, str]]:
    return json.loads((FIX / name).read_text())["nodes"]


def test_healthy_cluster_has_one_leader_first_in_order() -> None:
    st = nodes("galera-10.11-status-healthy.json")
    views = assign_roles([view_of(m, st[m]) for m in ORDER])
    assert [(v.member, v.role, v.state) for v in views] == [
        ("galera1", LEADER, "Synced"), ("galera2", REPLICA, "Synced"), ("galera3", REPLICA, "Synced")]


def test_cut_off_node_is_down_refusing_writes_and_the_rest_keep_their_leader() -> None:
    st = nodes("galera-10.11-status-minority-cut.json")
    views = {v.member: v for v in assign_roles([view_of(m, st[m]) for m in ORDER])}
    assert views["galera1"].role == LEADER and views["galera2"].role == REPLICA
    # the fixture: non-Primary, size 1, wsrep_ready OFF
    assert views["galera3"].role == DOWN and views["galera3"].state == "non-Primary"
    assert views["galera3"].error == "non-Primary component of size 1: refuses writes"


def test_a_node_that_does_not_answer_is_down_and_the_next_synced_one_leads() -> None:
    st = nodes("galera-10.11-status-healthy.json")
    views = assign_roles([view_of("galera1", None, "connect_refused: [Errno 111]"),
                          view_of("galera2", st["galera2"]), view_of("galera3", st["galera3"])])
    assert [v.role for v in views] == [DOWN, LEADER, REPLICA] and views[0].error == "connect_refused: [Errno 111]"


def test_a_donor_takes_no_writer_role() -> None:
    st = nodes("galera-10.11-status-healthy.json")
    donor = {**st["galera1"], "wsrep_local_state_comment": "Donor/Desynced"}
    views = assign_roles([view_of("galera1", donor), view_of("galera2", st["galera2"]),
                          view_of("galera3", st["galera3"])])
    assert [(v.role, v.state) for v in views] == [(REPLICA, "Donor/Desynced"), (LEADER, "Synced"), (REPLICA, "Synced")]


def test_provider_options_and_suspect_timeout() -> None:
    options = parse_options((FIX / "galera-4-provider-options.txt").read_text())
    assert options["evs.suspect_timeout"] == "PT5S" and options["evs.inactive_timeout"] == "PT15S"
    assert options["gcache.size"] == "64M" and options["pc.ignore_quorum"] == "false"
    assert iso_seconds("PT5S") == 5.0 and iso_seconds("PT1M30S") == 90.0 and iso_seconds("PT0.5S") == 0.5
    assert iso_seconds("5s") is None and iso_seconds("PT") is None


def test_view_change_words() -> None:
    assert describe_change(("13", "3", "Primary"), ("14", "2", "Primary")) == "view 13 -> 14, size 3 -> 2, Primary"
    assert describe_change(("13", "3", "Primary"), ("18446744073709551615", "1", "non-Primary")) == \
        "view 13 -> none, size 3 -> 1, Primary -> non-Primary"


def test_same_component() -> None:
    assert same_component(ALL3, TWO)  # one component, one member still listing the departed node
    assert not same_component("Primary:10.77.0.71:3306", "Primary:10.77.0.72:3306,10.77.0.73:3306")
    assert same_component(None, None) and not same_component(None, TWO)


def test_first_writer() -> None:
    assert first_writer({"galera1": "primary", "galera2": "primary", "galera3": "primary"}, ORDER) == {
        "galera1": "primary", "galera2": "replica", "galera3": "replica"}
    assert first_writer({"galera1": "down", "galera2": "primary", "galera3": "primary"}, ORDER) == {
        "galera1": "down", "galera2": "primary", "galera3": "replica"}


def _log(samples: list[tuple[float, str, str]], components: list[tuple[float, str, str]]) -> ProbeLog:
    return ProbeLog(samples=samples, components=components)


def test_writer_view_moves_the_writer_when_the_first_node_dies() -> None:
    # every node writable at t=0; galera1 dies at 1.0; galera2 and galera3 install a view without
    # it at 2.0 (galera3 sees it first: its sample at 2.0 already has the new view, galera2's not)
    samples, comps = [], []
    for t in (0.0, 1.0, 2.0):
        for m in ORDER:
            alive = m != "galera1" or t < 1.0
            samples.append((t, m, "primary" if alive else "down"))
            comps.append((t, m, (TWO.replace("71", "73") if t >= 2.0 and m == "galera3" else ALL3)))
    view = writer_view(_log(samples, comps), ORDER)
    assert view.samples == [
        (0.0, "galera1", "primary"), (0.0, "galera2", "replica"), (0.0, "galera3", "replica"),
        (1.0, "galera1", "down"), (1.0, "galera2", "primary"), (1.0, "galera3", "replica"),
        # galera3's new view {72, 73} and galera2's old {71, 72, 73} share members: one component
        (2.0, "galera1", "down"), (2.0, "galera2", "primary"), (2.0, "galera3", "replica")]
    out = fault_outcome(view, 0.5, 3.0, outage=True)
    assert (out["outcome"], out["new_primary"], out["t_new_primary"]) == ("failover", "galera2", 1.0)


def test_split_brain_across_components_and_not_within_one() -> None:
    one = "Primary:10.77.0.71:3306"
    other = "Primary:10.77.0.72:3306,10.77.0.73:3306"
    samples, comps = [], []
    for i in range(11):  # 0.0 .. 1.0 s, every 0.1 s: galera1 alone in a Primary Component of its own
        t = round(i / 10, 1)
        for m in ORDER:
            samples.append((t, m, "primary"))
            comps.append((t, m, one if m == "galera1" else other))
    view = writer_view(_log(samples, comps), ORDER)
    assert {m for t, m, r in view.samples if r == "primary"} == {"galera1", "galera2"}
    brain = split_brain(view, 0.1, multi_writer=True)
    # galera1 and galera2 writable together from 0.0 until galera2's last sample's span ends at
    # min(next sample, t + 2 x interval) = 1.0 + 0.1 (the last one: next = t + interval)
    assert brain["valid"] is False and brain["overlap_count"] == 1
    assert brain["overlaps"][0]["members"] == ["galera1", "galera2"] and brain["overlaps"][0]["seconds"] == 1.1
    # the same samples in one component: one writer, nothing to report
    same = writer_view(_log(samples, [(t, m, ALL3) for t, m, _ in comps]), ORDER)
    assert split_brain(same, 0.1, multi_writer=True)["valid"] is True


def test_a_two_sample_disagreement_is_not_split_brain() -> None:
    # galera2 and galera3 disjoint for one sample only (0.1 s), then one component again
    samples = [(0.0, "galera2", "primary"), (0.0, "galera3", "primary"),
               (0.1, "galera2", "primary"), (0.1, "galera3", "primary")]
    comps = [(0.0, "galera2", "Primary:10.77.0.72:3306"), (0.0, "galera3", "Primary:10.77.0.73:3306"),
             (0.1, "galera2", ALL3), (0.1, "galera3", ALL3)]
    brain = split_brain(writer_view(_log(samples, comps), ORDER), 0.1, multi_writer=True)
    # galera3's "primary" at 0.0 spans to 0.1 (its next sample): 0.1 s <= 2 x interval, ignored
    assert brain["valid"] is True and brain["short_overlaps_ignored"] == 1


def test_non_primary_spans_from_the_managers_poll() -> None:
    log = ProbeLog(manager=[
        (10.0, "galera1", {"galera3": "replica/Synced"}),
        (16.0, "galera1", {"galera3": "down/non-Primary"}),
        (16.1, "galera1", {"galera3": "down/non-Primary"}),
        (31.9, "galera1", {"galera3": "down/non-Primary"}),
        (32.0, "galera1", {"galera3": "replica/Joining"}),
        (50.0, "galera1", {"galera3": "down/non-Primary"}),
    ])
    assert non_primary_spans(log, 10.0, 40.0) == [{"member": "galera3", "from_s": 6.0, "to_s": 21.9}]


def test_no_promotion_in_a_multi_writer_cluster() -> None:
    """Kill galera1 at t=100: clients fail from 100.0, the view change is seen at 106.0, the
    first write goes through at 106.2: RTO 6.2, detection 6.0, no promotion, reconnect 0.2."""
    rec = Recorder(50.0, interval=0.1)
    for i in range(1000):  # 10 ops/s per worker before, then the outage, then writes again
        t = 50.0 + i * 0.1
        outcome = "fail" if 100.0 <= t < 106.2 - 1e-9 else "ok"
        rec.record(0, "write", t, t + 0.01, outcome, None if outcome == "ok" else "timeout")
    probe = ProbeLog(samples=[(99.9, "galera1", "primary"), (99.9, "galera2", "replica"),
                              (100.1, "galera1", "down"), (100.2, "galera2", "primary")])
    from chaoskit.ha.base import ManagerEvent

    probe.manager_events.append(ManagerEvent(106.0, "view_change", "wsrep-poll", "galera2",
                                             "view 7 -> 8, size 3 -> 2, Primary", uncertainty_s=0.1))
    fault = {"id": "f0", "kind": "kill", "host": "galera1", "t_effect": 100.0}
    out = analyse_fault(fault, rec, probe, baseline=None, window_end=140.0, tps_fraction=0.9, hold=3.0,
                        promotes=False)
    assert out["t_promoted"] is None and out["outcome"] == "failover" and out["new_primary"] == "galera2"
    assert out["rto_first_client_s"] == pytest.approx(6.21, abs=1e-6)  # first ok write done at 106.2 + 0.01
    assert out["phases"]["detection_s"] == pytest.approx(6.0) and out["phases"]["promotion_s"] is None
    assert out["phases"]["reconnect_s"] == pytest.approx(0.21, abs=1e-6)
