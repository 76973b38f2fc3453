"""One fault's record in every shape a drill can take, on tiny histories written out by hand.

One worker writes every 0.5 s: op k ends at 100.25 + 0.5 k (in interval k of 0.5 s, i.e. the
recorder's interval 200 + k), k = 0..59; the outcome of each op is given per scenario. The baseline
is 2 writes/s (one per 0.5 s). Roles come from a probe written sample by sample. Every expected
value is derived in the comments from those definitions, not from the code under test.
"""

from __future__ import annotations

import pytest

from chaoskit.analysis.catchup import standby_catchup
from chaoskit.analysis.failover import NO_MANAGER, analyse_fault, fault_outcome, nearest_rank
from chaoskit.ha.base import ManagerEvent
from chaoskit.recorder import FAIL, OK, SEQUENCE, Recorder
from chaoskit.topology.probe import ProbeLog

NULL_PHASES = {"detection_s": None, "promotion_s": None, "reconnect_s": None, "stabilisation_s": None}


def t(k: int) -> float:
    return 100.25 + 0.5 * k


def history(failing: set[int], last: int = 59, error_class: str = "connect_refused") -> Recorder:
    rec = Recorder(100.0, interval=0.5)
    for k in range(last + 1):
        rec.record(1, "write", t(k) - 0.01, t(k), FAIL if k in failing else OK,
                   None if k not in failing else error_class, key=k + 1, keyed=SEQUENCE)
    rec.finish()
    return rec


def roles(**timeline: list[tuple[float, float, str]]) -> ProbeLog:
    """Per member: (from, to, role) stretches, sampled every 0.5 s from 100.0 to 129.5."""
    log = ProbeLog()
    for i in range(60):
        ts = 100.0 + 0.5 * i
        for member, spans in timeline.items():
            role = next((r for lo, hi, r in spans if lo <= ts < hi), None)
            if role:
                log.samples.append((ts, member, role))
    return log


def fault(t_effect: float = 110.0, **extra: object) -> dict:
    return {"id": "f", "kind": "kill", "host": "pg1", "t_effect": t_effect, **extra}


def analyse(rec: Recorder, log: ProbeLog, f: dict | None = None, *, window_end: float = 130.0,
            baseline: float | None = 2.0, observable: bool = True) -> dict:
    return analyse_fault(f or fault(), rec, log, baseline=baseline, window_end=window_end, tps_fraction=0.9,
                         hold=3.0, no_detection=None if observable else NO_MANAGER)


# Restart in place: ops ok up to k = 21 (110.75), fail 22..29, ok from 30 (115.25); pg1 primary
# until 110.0, down 110.5..113.5, primary again from 114.0; pg2 a replica throughout.
RESTART_FAILING = set(range(22, 30))


def restart_roles() -> ProbeLog:
    return roles(pg1=[(0, 110.5, "primary"), (110.5, 114.0, "down"), (114.0, 999, "primary")],
                 pg2=[(0, 999, "replica")])


def test_restart_in_place_whole_record() -> None:
    r = analyse(history(RESTART_FAILING), restart_roles(), fault(t_scheduled=109.99, t_reverted=None, step=0))
    # Rolling 1 s tps (2 intervals) at interval ends: 115.5 -> k 29 fail + k 30 ok = 1/s; 116.0 -> 2/s
    # (>= 0.9 x 2 = 1.8): held from 116.0 until 119.0 (3 s): t_recovered = 116.0.
    # Effect over [110.0, 116.0): ok writes k = 20, 21, 30, 31 = 4 in 6 s: mean 0.667/s (0.7),
    # change 0.667 / 2 - 1 = -0.6667; lowest rolling value 0 (115.0: k 28, 29 both failed): dip 1.0;
    # lost to the dip 2 x 6 - 4 = 8.
    assert r == {
        "id": "f", "kind": "kill", "target_host": "pg1", "t_scheduled": 109.99, "t_fault": 110.0, "t_open": 110.0,
        "t_reverted": None, "step": 0,
        "notes": ["the HA manager showed no reaction (leader change or leader state change)"],
        "first_err_after_fault_s": 1.25,  # k = 22 at 111.25
        "outage": True, "t_last_ok": 110.75, "t_first_err": 111.25,
        "t_detect": None, "t_confirmed": None, "detect_signal": None, "detect_uncertainty_s": None,
        "t_promoted": 114.0, "promoted_evidence": "probe",  # pg1 primary again at 114.0, before the client's 115.25
        "old_primary": "pg1", "new_primary": None, "t_first_ok": 115.25, "t_recovered": 116.0,
        "phases": {"detection_s": None, "promotion_s": None, "reconnect_s": 1.25, "stabilisation_s": 0.75},
        "rto_first_client_s": 5.25, "rto_all_clients_s": 5.25, "per_client_rto_s": {"1": 5.25},
        "per_client_rto_percentiles_s": {"p50": 5.25, "p90": 5.25, "p99": 5.25},
        "workers_in_outage": 1, "workers_not_recovered": 0,
        "outcome": "restarted_in_place", "outcome_text": "pg1 came back as the primary in place (no failover)",
        "primary_at_fault": "pg1", "window_end": 130.0, "t_new_primary": None,
        "t_back": 114.0, "t_left": 110.5, "t_rejoined": None, "t_read_only": None,
        "effect": {"window_s": 6.0, "writes_ok": 4, "baseline_tps": 2.0, "min_tps": 0.0, "dip_depth": 1.0,
                   "mean_tps": 0.7, "tps_change": -0.6667, "transactions_lost_to_dip": 8},
    }


def test_no_outage_whole_record() -> None:
    """A fault on the replica pg2 from 110.0, reverted at 113.0; every write succeeds."""
    log = roles(pg1=[(0, 999, "primary")], pg2=[(0, 999, "replica")])
    r = analyse(history(set()), log, {"id": "g", "kind": "pause", "host": "pg2", "t_effect": 110.0,
                                      "t_reverted": 113.0, "t_scheduled": 110.0, "step": 1})
    # effect over [110.0, 113.0]: ok writes k = 20..25 = 6 in 3 s = 2/s; every rolling value 2.0
    assert r == {
        "id": "g", "kind": "pause", "target_host": "pg2", "t_scheduled": 110.0, "t_fault": 110.0, "t_open": 110.0,
        "t_reverted": 113.0, "step": 1,
        "notes": ["no write outage observed: no phases; effect is the throughput change below"],
        "outage": False, "t_last_ok": None, "t_first_err": None, "t_detect": None,
        "t_confirmed": None, "t_promoted": None,
        "t_first_ok": None, "t_recovered": None, "phases": NULL_PHASES, "rto_first_client_s": None,
        "rto_all_clients_s": None, "per_client_rto_s": {},
        "outcome": "no_reaction", "outcome_text": "no failover: pg1 stayed the primary through the fault",
        "primary_at_fault": "pg1", "window_end": 130.0, "t_new_primary": None, "new_primary": None,
        "t_back": None, "t_left": None, "t_rejoined": None, "t_read_only": None,
        "effect": {"window_s": 3.0, "writes_ok": 6, "baseline_tps": 2.0, "min_tps": 2.0, "dip_depth": 0.0,
                   "mean_tps": 2.0, "tps_change": 0.0, "transactions_lost_to_dip": 0},
    }
    # with no baseline the effect has no throughput comparison
    assert analyse(history(set()), log, fault(), baseline=None)["effect"] == {
        "window_s": 20.0, "writes_ok": 40, "baseline_tps": None}  # [110, 130): k = 20..59


def test_an_effect_stops_at_the_next_disturbance() -> None:
    """A fault on pg2 from 110.0, reverted only at 125.0, but the next fault starts at 113.0
    (window_end): the effect is measured over [110.0, 113.0] only, so the writes that fail from
    k = 26 (113.25) on, the next fault's doing, are not counted against this one: k = 20..25 =
    6 ok writes in 3 s = 2/s against a baseline of 2/s, no change."""
    log = roles(pg1=[(0, 999, "primary")], pg2=[(0, 999, "replica")])
    failing_later = set(range(26, 40))
    r = analyse(history(failing_later), log, {"id": "g", "kind": "pause", "host": "pg2", "t_effect": 110.0,
                                               "t_reverted": 125.0}, window_end=113.0)
    assert r["effect"] == {"window_s": 3.0, "writes_ok": 6, "baseline_tps": 2.0, "min_tps": 2.0, "dip_depth": 0.0,
                           "mean_tps": 2.0, "tps_change": 0.0, "transactions_lost_to_dip": 0}


def test_which_gaps_belong_to_the_fault() -> None:
    """The first failure is k = 22 at 111.25. A gap belongs to a fault when it opened at or after
    min(t_effect, t_apply_start) - clock uncertainty, and before the window's end."""
    rec, log = history(RESTART_FAILING), restart_roles()
    # 111.26 - 0.01 = 111.25: exactly the first error: admitted
    assert analyse(rec, log, fault(111.3, t_apply_start=111.26, offset_uncertainty_s=0.01))["outage"] is True
    # without the uncertainty, or with it added instead of subtracted, it would not be
    assert analyse(rec, log, fault(111.3, t_apply_start=111.26))["outage"] is False
    assert analyse(rec, log, fault(111.3, t_apply_start=111.27, offset_uncertainty_s=0.01))["outage"] is False
    # the later of the two timestamps never widens the window
    assert analyse(rec, log, fault(111.25, t_apply_start=111.4))["outage"] is True
    # a gap that opened before the fault is not its outage
    assert analyse(rec, log, fault(111.75, offset_uncertainty_s=0.0))["outage"] is False
    # a gap opening exactly at the window's end belongs to the next disturbance
    assert analyse(rec, log, fault(110.0), window_end=111.25)["outage"] is False
    assert analyse(rec, log, fault(110.0), window_end=111.26)["outage"] is True


def failover_roles(back_at: float | None = None) -> ProbeLog:
    pg1 = [(0, 110.5, "primary"), (110.5, 999, "down")]
    if back_at is not None:  # writable again for one sample before the failover
        pg1 = [(0, 110.5, "primary"), (110.5, back_at, "down"), (back_at, back_at + 0.5, "primary"),
               (back_at + 0.5, 999, "down")]
    return roles(pg1=pg1, pg2=[(0, 113.0, "replica"), (113.0, 999, "primary")])


FAILOVER_FAILING = set(range(20, 26))  # ok up to k = 19 (109.75), fail 20..25, ok from 26 (113.25)


def test_failover_with_the_old_primary_back_first_and_a_late_manager_signal() -> None:
    log = failover_roles(back_at=111.0)
    log.manager_events.append(ManagerEvent(113.4, "leader_changed", "rest-poll", "pg2", "pg1 -> pg2", 0.1))
    r = analyse(history(FAILOVER_FAILING), log)
    assert (r["outcome"], r["t_back"], r["t_new_primary"], r["new_primary"]) == ("failover", 111.0, 113.0, "pg2")
    assert r["notes"] == [
        "pg1 was writable again in place at +1.000s, before pg2 took over: writes it acknowledged then are lost "
        "if it is rewound",
        "manager signal seen 0.400s after the node was writable (poll granularity); t_detect clamped to "
        "t_promoted (the manager acted before)"]
    # the promotion is the new primary's (113.0), not the old one's brief return (111.0)
    assert (r["t_promoted"], r["promoted_evidence"], r["t_detect"]) == (113.0, "probe", 113.0)
    assert r["phases"] == {"detection_s": 3.0, "promotion_s": 0.0, "reconnect_s": 0.25, "stabilisation_s": 0.75}
    assert r["detect_signal"] == "rest-poll: pg1 -> pg2" and r["detect_uncertainty_s"] == 0.1


def test_detection_window_and_reaction_kinds() -> None:
    rec = history(FAILOVER_FAILING)
    log = failover_roles()
    log.manager_events += [
        ManagerEvent(109.0, "leader_lost", "etcd-watch", "pg1", "before the fault", 0.0),
        ManagerEvent(109.995, "leader_lost", "etcd-watch", "pg1", "within the clock uncertainty", 0.001),
        ManagerEvent(110.2, "member_state", "rest-poll", "pg1", "not a reaction", 0.1),
        ManagerEvent(112.0, "leader_changed", "rest-poll", "pg2", "later", 0.1)]
    # 109.995 >= 110.0 - 0.01 (the fault's clock uncertainty): the first reaction
    r = analyse(rec, log, fault(offset_uncertainty_s=0.01))
    assert (r["t_detect"], r["detect_signal"], r["detect_uncertainty_s"]) == (
        109.995, "etcd-watch: within the clock uncertainty", 0.001)
    # without that uncertainty it is before the fault; member_state is no reaction: 112.0
    r = analyse(rec, log)
    assert (r["t_detect"], r["phases"]["detection_s"], r["phases"]["promotion_s"]) == (112.0, 2.0, 1.0)
    # an event at the window's end is outside it
    r = analyse(rec, log, window_end=112.0)
    assert r["t_detect"] is None and "the HA manager showed no reaction" in r["notes"][-1]


def test_dm_detection_ends_at_the_monitors_confirmation() -> None:
    """DM: the watcher noticed at 111.0 (leader_lost), the confirmation monitor agreed at 112.2
    (confirmed), pg2 writable at 113.0 (probe), first client write at 113.25 (k = 26). Detection
    runs to the confirmation: 112.2 - 110.0 = 2.2 s, of which watcher 1.0 s and confirmation
    1.2 s; promotion 113.0 - 112.2 = 0.8 s; reconnect 113.25 - 113.0 = 0.25 s; the three add up
    to the RTO 3.25 s."""
    log = failover_roles()
    log.manager_events += [ManagerEvent(111.0, "leader_lost", "dmmonitor-show", "pg1", "INST_OK ERROR", 0.5),
                           ManagerEvent(112.2, "confirmed", "dmmonitor-show", "pg2", "OPEN -> FAILOVER", 0.5)]
    r = analyse(history(FAILOVER_FAILING), log)
    assert (r["t_detect"], r["t_confirmed"]) == (111.0, 112.2)
    ph = r["phases"]
    assert (ph["detection_s"], ph["promotion_s"], ph["reconnect_s"]) == (2.2, 0.8, 0.25)
    assert ph["detection_parts"] == {"watcher_s": 1.0, "confirmation_s": 1.2}
    assert r["rto_first_client_s"] == 3.25
    # only the confirmation seen: it is the first reaction too, and the split is unknown
    log.manager_events = [ManagerEvent(112.2, "confirmed", "dmmonitor-log", "pg2", "OPEN -> FAILOVER", 0.0)]
    r = analyse(history(FAILOVER_FAILING), log)
    assert (r["t_detect"], r["t_confirmed"], r["phases"]["detection_s"]) == (112.2, 112.2, 2.2)
    assert r["phases"]["detection_parts"] == {"watcher_s": None, "confirmation_s": None}
    # every other manager: no confirmation, no sub-phases
    log.manager_events = [ManagerEvent(112.0, "leader_changed", "rest-poll", "pg2", "pg1 -> pg2", 0.1)]
    r = analyse(history(FAILOVER_FAILING), log)
    assert r["t_confirmed"] is None and "detection_parts" not in r["phases"]


def test_no_manager_and_no_reaction_notes() -> None:
    rec = history({20, 21, 22, 23})  # ok again from k = 24 at 112.25
    log = roles(pg1=[(0, 999, "primary")], pg2=[(0, 999, "replica")])
    log.manager_events.append(ManagerEvent(110.5, "demoted", "rest-poll", "pg1", "leader state x", 0.1))
    r = analyse(rec, log, observable=False)
    assert r["t_detect"] is None and r["detect_signal"] is None
    assert r["notes"] == ["no HA manager in this cluster (ha: none): no detection signal exists, t_detect is null"]
    r = analyse(rec, log)
    assert r["outcome"] == "no_reaction"
    assert r["outcome_text"] == "no failover: pg1 stayed the primary through the fault (writes stopped meanwhile)"
    assert r["notes"] == ["the manager's first event after the fault (rest-poll: leader state x, at +0.500s) moved "
                          "no leader: no failover, so no detection is reported"]
    assert (r["t_detect"], r["detect_signal"], r["detect_uncertainty_s"]) == (None, None, None)
    assert (r["t_promoted"], r["promoted_evidence"]) == (112.25, "client")  # no probe evidence of a new writer


@pytest.mark.parametrize(("error_class", "said"), [
    ("resources", "it refused writes meanwhile: out of disk space, memory or connections"),
    ("read_only", "it refused writes as read-only meanwhile"),
    ("timeout", "writes stopped meanwhile")])
def test_no_reaction_says_what_the_server_answered(error_class: str, said: str) -> None:
    """A full disk: the primary stays, the server refuses each write itself (SQLSTATE 53100), and
    the outcome says so rather than "writes stopped"; a timeout is not the server's refusal."""
    rec = history({20, 21, 22, 23}, error_class=error_class)
    log = roles(pg1=[(0, 999, "primary")], pg2=[(0, 999, "replica")])
    r = analyse(rec, log)
    assert r["outcome"] == "no_reaction"
    assert r["outcome_text"] == f"no failover: pg1 stayed the primary through the fault ({said})"


def test_no_writer_and_no_baseline() -> None:
    rec = history(set(range(20, 60)))  # never ok again
    log = roles(pg1=[(0, 110.5, "primary"), (110.5, 999, "down")], pg2=[(0, 999, "replica")])
    r = analyse(rec, log, baseline=None)
    assert (r["outcome"], r["outcome_text"]) == (
        "no_writer", "pg1 left the primary role and no member took over before the window ended")
    assert r["notes"] == ["no writable node observed after the fault within the window",
                          "the HA manager showed no reaction (leader change or leader state change)",
                          "no baseline throughput: t_recovered is null"]
    assert (r["t_first_ok"], r["t_promoted"], r["promoted_evidence"], r["rto_first_client_s"]) == (
        None, None, None, None)
    assert r["rto_all_clients_s"] is None  # the one client never wrote again
    assert r["per_client_rto_s"] == {"1": None} and r["per_client_rto_percentiles_s"] == {}
    assert (r["workers_in_outage"], r["workers_not_recovered"]) == (1, 1)
    assert r["effect"] == {"window_s": 20.0, "writes_ok": 0, "baseline_tps": None}  # to the window's end


def test_writes_that_kept_succeeding_after_the_fault_are_noted() -> None:
    rec = history(set(range(23, 30)))  # last ok k = 22 at 111.25: 1.25 s after the fault
    r = analyse(rec, restart_roles())
    assert r["notes"][-1] == ("writes kept succeeding for 1.250s after the fault before the outage: check rpo and "
                              "split_brain for where they went")
    r = analyse(history(set(range(22, 30))), restart_roles())  # last ok 110.75: 0.75 s, no note
    assert not any("kept succeeding" in n for n in r["notes"])


def test_outcome_without_a_primary_before_the_fault() -> None:
    log = roles(pg1=[(0, 110.0, "down"), (110.0, 999, "primary")])
    out = fault_outcome(log, 109.9, 130.0, outage=False)
    assert out == {"outcome": "no_writer", "outcome_text": "no primary before the fault", "primary_at_fault": None,
                   "window_end": 130.0, "t_new_primary": 110.0, "new_primary": "pg1", "t_back": None,
                   "t_left": None, "t_rejoined": None, "t_read_only": None}


def test_recovery_hold_boundary() -> None:
    """Recovered at the first value >= the threshold that is followed by `hold` seconds at or above
    it: with ops ok from k = 30, rolling 2/s from 116.0; a failure at k = 36 (118.25) makes the
    value at 118.5 and 119.0 1/s: the hold restarts at 119.5 and holds to 122.5."""
    r = analyse(history(RESTART_FAILING | {36}), restart_roles())
    assert r["t_recovered"] == 119.5
    r = analyse(history(RESTART_FAILING | {37}), restart_roles())  # k 37 ends 118.75: 119.0, 119.5 dip
    assert r["t_recovered"] == 120.0
    # a failure once the hold is complete (k = 38: values at 119.5, 120.0) does not move it: 116.0 + 3 = 119.0
    r = analyse(history(RESTART_FAILING | {38}), restart_roles())
    assert r["t_recovered"] == 116.0


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 11)]
    # rank = ceil(p/100 x n), 1-based: p50 -> 5th, p90 -> 9th, p99 -> 10th, p15 -> 2nd, p1 and p0 -> 1st
    assert [nearest_rank(values, p) for p in (0, 1, 15, 50, 90, 99, 100)] == [1.0, 1.0, 2.0, 5.0, 9.0, 10.0, 10.0]
    assert nearest_rank([0.1234567], 50) == 0.123457


# -- a standby's return ----------------------------------------------------------------------
def replication(*samples: tuple[float, str, int | None, float | None]) -> ProbeLog:
    log = ProbeLog()
    for ts, state, lag, delay in samples:
        log.replication.append((ts, {"pg3": (state, lag, delay)} if state else {}))
    return log


def test_standby_catchup_whole_record() -> None:
    """Baseline [100, 108]: pg3's lag was at most 300 bytes. Back at 120.0: not listed at 120.0,
    catching up at 120.5 (lag 9000), streaming at 121.0 (lag 5000, 0.8 s), streaming 400 at
    121.5, streaming 250 at 122.0 (<= 300: caught up), 10000 at 123.0 (after: not a peak)."""
    log = replication((101.0, "streaming", 100, 0.0), (107.0, "streaming", 300, 0.01),
                      (109.0, "streaming", 5000, 0.2),  # after the baseline: not its level
                      (120.0, "", None, None), (120.5, "catchup", 9000, None), (121.0, "streaming", 5000, 0.8),
                      (121.5, "streaming", 400, 0.3), (122.0, "streaming", 250, 0.05),
                      (123.0, "streaming", 10000, 2.0))
    log.manager.append((115.0, "pg1", {"pg3": "replica/creating replica"}))
    log.manager.append((116.0, "pg1", {"pg3": "replica/streaming", "pg2": "replica/creating replica"}))
    r = standby_catchup(log, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    assert r == {"member": "pg3", "t_back": 120.0, "streaming_s": 1.0, "caught_up_s": 2.0, "peak_lag_bytes": 9000,
                 "peak_replay_delay_s": 0.8, "rewound": None, "rebuilt": True, "baseline_lag_bytes": 300,
                 "missed_bytes": None, "notes": [], "t_streaming": 121.0, "t_caught_up": 122.0,
                 "manager_states": ["creating replica", "streaming"]}
    # a rejoin action on the member says whether it was rewound or rebuilt
    r = standby_catchup(log, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0),
                        actions=[{"kind": "rejoin", "member": "pg2", "rewound": False},
                                 {"kind": "rejoin", "member": "pg3", "rewound": True, "rebuilt": False}])
    assert (r["rewound"], r["rebuilt"]) == (True, False) and "manager_states" not in r


def test_standby_catchup_notes() -> None:
    log = replication((101.0, "streaming", 100, 0.0), (120.5, "catchup", 9000, 1.0), (121.0, "streaming", 5000, 2.0))
    r = standby_catchup(log, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    assert (r["streaming_s"], r["caught_up_s"], r["peak_lag_bytes"], r["peak_replay_delay_s"]) == (1.0, None, 9000, 2.0)
    assert r["notes"] == ["pg3 streamed again but its lag never came back to 100 bytes in the window",
                          "rewind/rebuild not observable: no rejoin action and no manager states"]
    r = standby_catchup(log, "pg3", 110.0, 120.0, 121.0, baseline=(100.0, 108.0), actions=[])  # window ends first
    assert r["streaming_s"] is None and r["notes"][0] == "pg3 was not streaming again before the window ended"
    assert r["peak_lag_bytes"] == 9000
    r = standby_catchup(log, "pg3", 110.0, None, 130.0, baseline=(100.0, 108.0), actions=[])
    assert r["notes"] == ["the fault has no end within the drill: no catch-up"] and r["baseline_lag_bytes"] == 100
    r = standby_catchup(log, "pg3", 110.0, 120.0, 130.0, baseline=(102.0, 108.0), actions=[])
    assert r["baseline_lag_bytes"] == 0  # no baseline sample: a healthy standby's level is 0
    r = standby_catchup(ProbeLog(), "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    assert r["notes"] == ["the engine reports no replication status: no catch-up figures"]
    assert r["streaming_s"] is None and r["baseline_lag_bytes"] is None


@pytest.mark.parametrize("k_fail,expected", [(set(), 2.0)])
def test_baseline_is_the_median_of_full_rolling_windows(k_fail: set, expected: float) -> None:
    from chaoskit.analysis.failover import baseline_tps

    rec = history({3})  # k = 3 (interval 203, 101.5..102.0): rolling values at 102.0 and 102.5 are 1.0
    # windows whose end lies in [start + 1 s, end]: start 101.0 -> ends 102.0..105.0 = 7 values,
    # two of them 1.0, five 2.0: median 2.0; start 101.5 -> ends 102.5..105.0: one 1.0, five 2.0
    assert baseline_tps(rec, 101.0, 105.0) == expected
    assert baseline_tps(rec, 100.5, 102.5) == 1.0  # ends 101.5, 102.0, 102.5: 2.0, 1.0, 1.0
    assert baseline_tps(rec, 200.0, 210.0) is None


def test_standby_catchup_boundaries() -> None:
    """Every edge on a sample: the baseline includes both ends, t_back counts, a first streaming
    sample already at the standby's level is its catch-up, a lag equal to the level is caught up,
    the caught-up sample's own delay counts in the peak; manager states from t_fault inclusive to
    the window's end exclusive, of this member only."""
    base = [(100.0, "streaming", 700, None), (104.0, "streaming", 100, 0.0), (108.0, "streaming", 500, 0.0)]
    log = replication(*base, (120.0, "streaming", 500, 5.0000004), (121.0000004, "streaming", 90, 0.1))
    log.manager += [(110.0, "pg1", {"pg3": "replica/creating replica"}), (130.0, "pg1", {"pg3": "replica/x"}),
                    (115.0, "pg1", {"pg2": "replica/creating replica", "pg3": "streaming"})]
    r = standby_catchup(log, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    # level 700 (at the baseline's first instant, no delay reported); back, streaming and caught up
    # (500 <= 700) at 120.0 exactly; its delay 5.0000004 s is the peak
    assert (r["baseline_lag_bytes"], r["streaming_s"], r["caught_up_s"]) == (700, 0.0, 0.0)
    assert (r["peak_lag_bytes"], r["peak_replay_delay_s"]) == (500, 5.0000004)
    assert (r["rebuilt"], r["manager_states"]) == (True, ["creating replica"])
    log2 = replication((100.0, "streaming", 100, 0.0), (108.0, "streaming", 600, 0.0),
                       (120.5, "streaming", 800, 1.0), (121.0000004, "streaming", 600, 0.1))
    log2.manager += [(111.0, "pg1", {"pg3": "replica/streaming"})]
    r2 = standby_catchup(log2, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    # level 600 (the baseline's last instant); lag back to exactly 600 at 121.0000004: caught up
    assert (r2["baseline_lag_bytes"], r2["streaming_s"], r2["caught_up_s"]) == (600, 0.5, 1.0)
    assert r2["rebuilt"] is False and r2["peak_lag_bytes"] == 800
    log3 = replication((100.0, "streaming", 100, 0.0), (120.5, "startup", None, None))
    r3 = standby_catchup(log3, "pg3", 110.0, 120.0, 130.0, baseline=(100.0, 108.0), actions=[])
    assert (r3["peak_lag_bytes"], r3["peak_replay_delay_s"], r3["streaming_s"]) == (None, None, None)


def test_more_edges_of_one_fault() -> None:
    from chaoskit.analysis.failover import _detect, client_figures
    from chaoskit.recorder import Gap

    # a detection event exactly at t_fault - uncertainty counts (0.25 is exact in binary)
    log = ProbeLog()
    log.manager_events.append(ManagerEvent(109.75, "leader_lost", "etcd-watch", "pg1", "x", 0.0))
    assert _detect(log, 110.0, 130.0, 0.25)[0] == 109.75
    # a worker whose very first op failed has no last ok; 7-digit differences round to 6
    figures = client_figures([Gap(1, None, 111.2345678, "timeout", 112.0)], 110.0)
    assert figures["t_last_ok"] is None and figures["first_err_after_fault_s"] == 1.234568
    # nearest rank on 202 values: p50 is the 101st
    assert nearest_rank([float(v) for v in range(1, 203)], 50) == 101.0
    # writes that kept succeeding exactly 1.0 s after the fault: not yet worth a note (more than 1 s is)
    r = analyse(history(set(range(22, 30)) - {21}), restart_roles(), fault(109.75))
    assert not any("kept succeeding" in n for n in r["notes"])  # last ok 110.75 = 109.75 + 1.0


def test_outages_that_never_overlap_leave_no_write_gap() -> None:
    """Split-brain shape: worker 1 (failed over early) last wrote at 110.5 and wrote again at
    114.0; worker 2 (on the isolated primary) went on writing until 116.0 and wrote again at
    121.0. T_last_ok = max(110.5, 116.0) = 116.0, T_first_ok = min(114.0, 121.0) = 114.0: at every
    instant one of them was writing, so the write gap is 0, never 114.0 - 116.0 = -2.0. RTO (from
    the fault at 110.0) is still 4.0, per client 4.0 and 11.0. Overlapping outages (worker 2
    wrote again at 113.0 after its last write at 112.0) keep T_first_ok - T_last_ok = 1.0."""
    from chaoskit.analysis.failover import client_figures
    from chaoskit.recorder import Gap

    apart = client_figures([Gap(1, 110.5, 110.6, "connection_lost", 114.0),
                            Gap(2, 116.0, 116.1, "read_only", 121.0)], 110.0)
    assert (apart["write_gap_s"], apart["outages_overlap"], apart["rto_first_client_s"]) == (0.0, False, 4.0)
    assert apart["rto_all_clients_s"] == 11.0
    assert apart["per_client_rto_s"] == {"1": 4.0, "2": 11.0}
    overlapping = client_figures([Gap(1, 110.5, 110.6, "connection_lost", 114.0),
                                  Gap(2, 112.0, 112.1, "read_only", 113.0)], 110.0)
    assert (overlapping["write_gap_s"], overlapping["outages_overlap"]) == (1.0, True)


def test_a_value_exactly_at_the_recovery_threshold_counts() -> None:
    """Threshold 0.5 x 2 = 1.0/s: the rolling value 1.0 at 115.5 (k 29 failed, k 30 ok) starts the
    hold, which lasts (values 1.0 then 2.0): recovered at 115.5."""
    r = analyse_fault(fault(), history(RESTART_FAILING), restart_roles(), baseline=2.0, window_end=130.0,
                      tps_fraction=0.5, hold=3.0, )
    assert r["t_recovered"] == 115.5


def test_equal_instants_of_a_return_and_a_late_signal() -> None:
    # pg1 back at 113.0, the same instant pg2 is promoted: not "back before"; a signal at exactly the
    # promotion instant is not late
    log = roles(pg1=[(0, 110.5, "primary"), (110.5, 113.0, "down"), (113.0, 113.5, "primary"), (113.5, 999, "down")],
                pg2=[(0, 113.0, "replica"), (113.0, 999, "primary")])
    log.manager_events.append(ManagerEvent(113.0, "leader_changed", "rest-poll", "pg2", "pg1 -> pg2", 0.1))
    r = analyse(history(FAILOVER_FAILING), log)
    assert r["notes"] == [] and r["t_detect"] == 113.0 and r["outcome"] == "failover"


def test_the_faults_of_one_step_are_one_disturbance_named_by_the_primarys() -> None:
    """A step that killed the sync standby pg2 (first, at 110.000) and the primary pg1 (110.004)
    is one disturbance, named by pg1's fault, pg2's listed with it; a later switchover and another
    step's fault stay disturbances of their own."""
    from chaoskit.analysis.drill import together_by_step

    log = roles(pg1=[(0, 999, "primary")], pg2=[(0, 999, "replica")], pg3=[(0, 999, "replica")])
    got = together_by_step([
        {"id": "a", "kind": "kill", "host": "pg2", "t_effect": 110.000, "step": 0, "t_reverted": 120.0},
        {"id": "b", "kind": "kill", "host": "pg1", "t_effect": 110.004, "step": 0},
        {"id": "c", "kind": "pause", "host": "pg3", "t_effect": 115.0, "step": 1},
        {"id": "action0", "kind": "switchover", "host": None, "t_effect": 118.0, "step": 2}], log)
    assert [d["id"] for d in got] == ["b", "c", "action0"]
    assert got[0]["together_with"] == [{"id": "a", "kind": "kill", "host": "pg2", "t_effect": 110.0,
                                        "t_reverted": 120.0}]
    assert "together_with" not in got[1]
    from chaoskit.report.vocabulary import fault_name

    r = analyse(history({20, 21, 22, 23}), log, got[0])
    assert fault_name(r) == "kill on pg1 with kill on pg2" and r["together_with"][0]["id"] == "a"
