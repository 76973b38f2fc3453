"""What a fault led to, in words: each case is a role-probe timeline written out by hand, with the
outcome, its times and the expectation verdict read off that timeline (not computed by the code)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chaoskit.analysis.drill import expectations, mark_split_brain
from chaoskit.analysis.failover import fault_outcome
from chaoskit.topology.probe import ProbeLog

T = 1_000.0  # the fault's instant


def probe(*samples: tuple[float, str, str]) -> ProbeLog:
    """Samples as (seconds after the fault, member, role); the cluster before: pg1 primary."""
    log = ProbeLog()
    log.samples = [(T - 1, "pg1", "primary"), (T - 1, "pg2", "replica"), (T - 1, "pg3", "replica")]
    log.samples += sorted((T + dt, m, r) for dt, m, r in samples)
    return log


def test_failover_names_the_member_that_took_over() -> None:
    out = fault_outcome(probe((0.1, "pg1", "down"), (9.3, "pg2", "primary"), (9.4, "pg3", "replica")),
                        T, T + 60, outage=True)
    assert out["outcome"] == "failover"
    assert out["outcome_text"] == "failover from pg1 to pg2"
    assert out["t_new_primary"] == T + 9.3 and out["t_left"] == T + 0.1 and out["t_back"] is None


def test_the_old_primary_rejoins_after_the_new_one_took_over() -> None:
    """pg1 killed at +0.1, pg2 primary at +9.3; pg1 seen as a replica at +5.0 (before the failover:
    not a rejoin), down again at +9.5, a replica from +25.0: rejoined at +25.0."""
    out = fault_outcome(probe((0.1, "pg1", "down"), (5.0, "pg1", "replica"), (9.3, "pg2", "primary"),
                              (9.5, "pg1", "down"), (25.0, "pg1", "replica")), T, T + 60, outage=True)
    assert out["outcome"] == "failover" and out["t_rejoined"] == T + 25.0
    out = fault_outcome(probe((0.1, "pg1", "down"), (9.3, "pg2", "primary")), T, T + 60, outage=True)
    assert out["t_rejoined"] is None  # never seen following pg2 within the window


def test_restart_in_place_is_not_a_failover() -> None:
    out = fault_outcome(probe((0.2, "pg1", "down"), (3.0, "pg1", "primary")), T, T + 60, outage=True)
    assert out["outcome"] == "restarted_in_place"
    assert out["outcome_text"] == "pg1 came back as the primary in place (no failover)"
    assert out["t_back"] == T + 3.0 and out["t_new_primary"] is None


def test_a_primary_demoted_by_its_manager_and_promoted_again_in_place() -> None:
    """etcd stopped (the fault on dcs1): pg1 stopped by Patroni at +4.6, running read-only from
    +6.6, the primary again at +28.9; nobody else promoted. Said as a demotion (the fault was not
    on pg1), with the three instants."""
    timeline = probe((4.6, "pg1", "down"), (6.6, "pg1", "replica"), (28.9, "pg1", "primary"))
    out = fault_outcome(timeline, T, T + 60, outage=True, target_host="dcs1")
    assert out["outcome"] == "restarted_in_place"
    assert (out["t_left"], out["t_read_only"], out["t_back"]) == (T + 4.6, T + 6.6, T + 28.9)
    assert out["outcome_text"] == ("pg1 demoted by its manager at +4.6 s (read-only from +6.6 s) and was the primary "
                                   "again at +28.9 s; no other member was promoted (no failover)")
    # the same timeline with the fault on pg1 itself (its manager restarts it read-only, then
    # promotes it): what was seen, not a demotion
    out = fault_outcome(timeline, T, T + 60, outage=True, target_host="pg1")
    assert out["outcome_text"] == ("pg1 left the primary role at +4.6 s (read-only from +6.6 s) and was the primary "
                                   "again at +28.9 s; no other member was promoted (no failover)")


def test_a_demoted_primary_nobody_replaced() -> None:
    out = fault_outcome(probe((4.6, "pg1", "down"), (6.6, "pg1", "replica")), T, T + 20, outage=True,
                        target_host="dcs1")
    assert out["outcome"] == "no_writer" and out["t_read_only"] == T + 6.6
    assert out["outcome_text"] == ("pg1 demoted by its manager at +4.6 s (read-only from +6.6 s) and no member took "
                                   "over before the window ended")


def test_read_only_before_the_failover_is_not_the_outcome() -> None:
    # read-only at +5.0, then pg2 promoted at +9.3: a failover (the demotion is part of it)
    out = fault_outcome(probe((0.1, "pg1", "down"), (5.0, "pg1", "replica"), (9.3, "pg2", "primary")),
                        T, T + 60, outage=True, target_host="dcs1")
    assert out["outcome_text"] == "failover from pg1 to pg2" and out["t_read_only"] == T + 5.0


def test_leader_held_through_a_pause_is_no_reaction() -> None:
    # a 20 s freeze: the probe cannot reach pg1 but never sees it leave the role (no sample at all)
    out = fault_outcome(probe((21.0, "pg2", "replica")), T, T + 60, outage=True)
    assert out["outcome"] == "no_reaction"
    assert out["outcome_text"] == "no failover: pg1 stayed the primary through the fault (writes stopped meanwhile)"


def test_nobody_took_over_within_the_window() -> None:
    out = fault_outcome(probe((0.1, "pg1", "down"), (30.0, "pg2", "primary")), T, T + 20, outage=True)
    assert out["outcome"] == "no_writer"
    assert out["t_new_primary"] is None  # pg2 at +30 s is after the window's end at +20 s


def test_old_primary_back_for_a_moment_before_the_failover() -> None:
    # pg_auto_failover: the orphaned keeper restarts PostgreSQL at +0.87 s, the monitor drains it,
    # a secondary is promoted at +8.47 s
    out = fault_outcome(probe((0.07, "pg1", "down"), (0.87, "pg1", "primary"), (1.17, "pg1", "down"),
                              (8.47, "pg2", "primary")), T, T + 60, outage=True)
    assert out["outcome"] == "failover" and out["new_primary"] == "pg2"
    assert out["t_back"] == T + 0.87 and out["t_new_primary"] == T + 8.47


def test_split_brain_overrides_the_outcome_only_inside_the_window() -> None:
    fault = fault_outcome(probe((5.0, "pg2", "primary")), T, T + 30, outage=True)
    fault["t_fault"] = T
    assert fault["outcome"] == "failover"  # pg1 still answers as primary: the probe saw both
    mark_split_brain(fault, {"overlaps": [{"members": ["pg1", "pg2"], "from": T + 5.0, "to": T + 5.2}]})
    assert fault["outcome"] == "split_brain"
    assert fault["outcome_text"] == ("split-brain: pg1 and pg2 both answered as writable primaries for 0.2s from "
                                     "+5.000s after the fault")
    later = fault_outcome(probe((5.0, "pg2", "primary")), T, T + 30, outage=True) | {"t_fault": T}
    mark_split_brain(later, {"overlaps": [{"members": ["pg1", "pg2"], "from": T + 31, "to": T + 32}]})
    assert later["outcome"] == "failover"  # the overlap began after this fault's window


def test_expectations_fail_a_drill_that_did_not_fail_over_or_whose_action_failed() -> None:
    pb = SimpleNamespace(steps=[SimpleNamespace(expect="failover"), SimpleNamespace(expect="any"),
                                SimpleNamespace(expect="any")])
    faults = [{"id": "f0", "step": 0, "kind": "pause", "outcome": "no_reaction", "outcome_text": "no failover: ..."},
              {"id": "f1", "step": 1, "kind": "kill", "outcome": "restarted_in_place"}]
    actions = [{"kind": "switchover", "step": 2, "ok": False, "answer": "ERROR: unable to connect via SSH"}]
    res = expectations(pb, faults, actions)
    assert res["valid"] is False
    assert [(r["step"], r["expected"], r["outcome"], r["ok"]) for r in res["steps"]] == [
        (0, "failover", "no_reaction", False), (2, "succeeded", "failed", False)]
    good = expectations(pb, [dict(faults[0], outcome="failover")], [dict(actions[0], ok=True)])
    assert good["valid"] is True


def test_standby_catchup_read_off_the_primarys_view() -> None:
    from chaoskit.analysis.catchup import standby_catchup

    log = ProbeLog()
    # baseline: pg2 streams with 8-16 kB of replay lag; the fault (T) kills it, it is restarted at T+10
    log.replication = [(T - 9, {"pg2": ("streaming", 8_000, 0.002)}), (T - 8, {"pg2": ("streaming", 16_000, 0.004)}),
                       (T + 1, {}),  # gone from pg_stat_replication
                       (T + 12.0, {"pg2": ("catchup", 40_000_000, None)}),
                       (T + 12.5, {"pg2": ("streaming", 9_000_000, 1.5)}),
                       (T + 13.0, {"pg2": ("streaming", 20_000, 0.2)}),  # above the 16 kB level still
                       (T + 13.5, {"pg2": ("streaming", 12_000, 0.01)}),  # caught up
                       (T + 14.0, {"pg2": ("streaming", 50_000_000, 9.0)})]  # after: not a peak of this return
    c = standby_catchup(log, "pg2", T, T + 10, T + 60, baseline=(T - 10, T - 5), actions=[])
    assert c["baseline_lag_bytes"] == 16_000
    assert c["streaming_s"] == pytest.approx(2.5) and c["caught_up_s"] == pytest.approx(3.5)
    assert c["peak_lag_bytes"] == 40_000_000 and c["peak_replay_delay_s"] == 1.5
    assert c["rewound"] is None and c["rebuilt"] is None  # no rejoin action, no manager states
    rejoined = standby_catchup(log, "pg2", T, T + 10, T + 60, baseline=(T - 10, T - 5),
                               actions=[{"kind": "rejoin", "member": "pg2", "rewound": True, "rebuilt": False}])
    assert rejoined["rewound"] is True and rejoined["rebuilt"] is False
    never = standby_catchup(log, "pg2", T, T + 10, T + 12.4, baseline=(T - 10, T - 5), actions=[])
    assert never["streaming_s"] is None and never["notes"][0] == "pg2 was not streaming again before the window ended"
