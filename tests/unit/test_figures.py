"""Every figure a drill reports, on one small history written out by hand, with each expected value
worked out here from the history's definition (not produced by the code under test).

The history (recorder interval 0.125 s, base T0 = 1000 s, fault at F = 1010 s):
- worker 1 writes every 0.125 s, op k done at 1000.0625 + 0.125 k (in interval k): ok for k <= 79
  (last 1009.9375), the commit of k = 80 is sent and its outcome unknown (info), k = 81..111 fail,
  ok again from k = 112 (1014.0625); k = 140 and 141 fail (a dip during recovery);
- worker 2 writes at 1000.09375 + 0.125 k: ok for k <= 81 (last 1010.21875: it kept writing for
  0.219 s after the fault), k = 82 info, k = 83..123 fail, ok from k = 124 (1015.59375); k = 160
  fails alone (a second, later gap);
- both stop after k = 239. Ledger seq = k + 1.
Role probe: pg1 primary in samples every 0.5 s up to 1010.0, down from 1010.5; pg2 replica until
1013.5, primary from 1014.0. Manager events: member_state at 1011.0 (not a reaction), demoted
(the leader left its healthy state) at 1011.5, leader_changed at 1013.0.
"""

from __future__ import annotations

import pytest

from chaoskit.analysis.failover import analyse_fault, baseline_tps
from chaoskit.ha.base import ManagerEvent
from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, LedgerColumn, Recorder
from chaoskit.topology.probe import ProbeLog
from chaoskit.workload.durability import rpo_check

T0, F, IV = 1000.0, 1010.0, 0.125


def t1(k: int) -> float:
    return T0 + 0.0625 + IV * k


def t2(k: int) -> float:
    return T0 + 0.09375 + IV * k


def outcome1(k: int) -> str:
    return INFO if k == 80 else FAIL if 81 <= k <= 111 or k in (140, 141) else OK


def outcome2(k: int) -> str:
    return INFO if k == 82 else FAIL if 83 <= k <= 123 or k == 160 else OK


def recorder() -> Recorder:
    rec = Recorder(T0, interval=IV)
    for k in range(240):
        for w, t, outcome in ((1, t1(k), outcome1(k)), (2, t2(k), outcome2(k))):
            cls = None if outcome == OK else "connection_lost" if outcome == INFO else "connect_refused"
            rec.record(w, "write", t - 0.01, t, outcome, cls, key=k + 1, keyed=SEQUENCE)
    rec.finish()
    return rec


def probe() -> ProbeLog:
    log = ProbeLog()
    for i in range(61):
        t = T0 + 0.5 * i
        log.samples.append((t, "pg1", "primary" if t <= F else "down"))
        log.samples.append((t + 0.01, "pg2", "primary" if t >= 1014.0 else "replica"))
    log.samples.sort()
    log.manager_events += [ManagerEvent(1011.0, "member_state", "x-poll", "pg1", "", 0.1),
                           ManagerEvent(1011.5, "demoted", "x-poll", "pg1", "leader pg1 state stopped", 0.1),
                           ManagerEvent(1013.0, "leader_changed", "x-poll", "pg2", "pg1 -> pg2", 0.1)]
    return log


@pytest.fixture  # per test: mutation testing maps each test to the code it runs
def result() -> dict:
    rec = recorder()
    # baseline: both workers write once per interval: 2 writes per 0.125 s = 16 writes/s exactly
    base = baseline_tps(rec, T0 + 2, T0 + 8)
    assert base == 16.0
    fault = {"id": "f", "kind": "kill", "host": "pg1", "t_effect": F, "t_reverted": None}
    return analyse_fault(fault, rec, probe(), baseline=base, window_end=1030.0, tps_fraction=0.9, hold=3.0,
                         )


def test_outage_edges(result: dict) -> None:
    assert result["outage"] is True
    assert result["t_first_err"] == t1(80) == 1010.0625  # worker 1's info commit is its first error
    assert result["t_last_ok"] == t2(81) == 1010.21875  # the later of the two workers' last ok
    assert result["t_first_ok"] == t1(112) == 1014.0625
    assert result["first_err_after_fault_s"] == 0.0625


def test_both_rtos_and_per_client_rto_are_measured_from_the_fault(result: dict) -> None:
    assert result["rto_first_client_s"] == 4.0625  # 1014.0625 - 1010 (worker 1)
    assert result["rto_all_clients_s"] == 5.59375  # 1015.59375 - 1010 (worker 2, the last one back)
    assert "write_gap_s" not in result  # a client group's figure (test_client_groups: 3.84375 for both)
    # each worker's first gap after the fault, from T_fault (not from its first error: 4.0 / 5.25),
    # and not worker 2's later single failure at k = 160 (which would give 10.21875)
    assert result["per_client_rto_s"] == {"1": 4.0625, "2": 5.59375}
    # nearest rank on [4.0625, 5.59375]: p50 = the 1st value, p90 / p99 = the 2nd (p100 is all clients back)
    assert result["per_client_rto_percentiles_s"] == {"p50": 4.0625, "p90": 5.59375, "p99": 5.59375}
    assert result["workers_in_outage"] == 2 and result["workers_not_recovered"] == 0


def test_phase_marks(result: dict) -> None:
    assert result["t_detect"] == 1011.5  # the leader leaving its healthy state; member_state is not a reaction
    assert result["detect_signal"] == "x-poll: leader pg1 state stopped"
    assert result["t_promoted"] == 1014.01 and result["promoted_evidence"] == "probe"  # pg2's first primary sample
    assert result["old_primary"] == "pg1" and result["new_primary"] == "pg2" and result["outcome"] == "failover"
    assert result["phases"]["detection_s"] == 1.5
    assert result["phases"]["promotion_s"] == pytest.approx(2.51, abs=1e-9)  # 1014.01 - 1011.5
    assert result["phases"]["reconnect_s"] == pytest.approx(0.0525, abs=1e-9)  # 1014.0625 - 1014.01


def test_recovery_waits_for_the_hold_and_restarts_it_after_a_dip(result: dict) -> None:
    # Rolling 1 s throughput = ok writes in the last 8 intervals / 1 s; threshold 0.9 x 16 = 14.4.
    # Interval 130 (ending 1016.375): worker 1's 8 + worker 2's 7 (from 124) = 15 >= 14.4: a start.
    # Intervals 141..147 hold worker 1's two failures (140, 141): 6 + 8 = 14 < 14.4: the hold restarts.
    # Interval 148 (ending 1018.625): 7 + 8 = 15, and nothing falls below 14.4 for 3 s after
    # (worker 2's lone failure at 160 leaves 15): recovered at 1018.625.
    assert result["t_recovered"] == 1018.625
    assert result["phases"]["stabilisation_s"] == 4.5625  # 1018.625 - 1014.0625


def test_throughput_effect(result: dict) -> None:
    eff = result["effect"]
    # window [1010, 1018.625): intervals 80..148. Ok writes: worker 1 112..148 minus 140, 141 = 35;
    # worker 2 80, 81 and 124..148 = 27; 62 in 8.625 s. The deepest point is 0 writes/s.
    assert eff["window_s"] == 8.625 and eff["writes_ok"] == 62
    assert eff["min_tps"] == 0.0 and eff["dip_depth"] == 1.0
    assert eff["mean_tps"] == 7.2  # 62 / 8.625 = 7.188
    assert eff["tps_change"] == -0.5507  # 7.188 / 16 - 1
    assert eff["transactions_lost_to_dip"] == 76  # 16 x 8.625 - 62


def test_rpo_counts_window_and_phantoms() -> None:
    rec = recorder()
    acked = {(1, k + 1) for k in range(240) if outcome1(k) == OK} | {(2, k + 1) for k in range(240)
                                                                   if outcome2(k) == OK}
    assert len(acked) == 206 + 197  # worker 1: 80 + 128 - 2; worker 2: 82 + 116 - 1
    lost = {(1, 79), (1, 80), (2, 82)}  # worker 1's k = 78, 79 and worker 2's k = 81
    present = (acked - lost) | {(2, 83)} | {(1, 100), (3, 1)}  # worker 2's info k = 82 found; two phantoms
    r = rpo_check(rec, present, F, max_lost=5)
    assert (r["acknowledged"], r["lost_acknowledged"]) == (403, 3)
    assert (r["indeterminate"], r["indeterminate_found"], r["indeterminate_not_found"]) == (2, 1, 1)
    # (1, 100) is worker 1's failed k = 99; (3, 1) was never attempted: both phantoms, one of them failed
    assert (r["phantoms"], r["phantoms_that_failed"]) == (2, 1)
    assert r["valid"] is False  # phantoms fail the check whatever the loss bound says
    # ack times are kept in whole ms since the base: k = 78 at 9.8125 s -> 9812 ms; rpo = 10.000 - 9.812
    assert r["rpo_s"] == 0.188
    assert r["lost_ack_window"] == [pytest.approx(1009.812), pytest.approx(1010.218)]
    assert r["lost_sample"] == [[1, 79], [1, 80], [2, 82]]
    clean = rpo_check(rec, acked | {(1, 81)}, F, max_lost=0)  # worker 1's info k = 80 (seq 81) found
    assert clean["valid"] is True and clean["lost_acknowledged"] == 0 and clean["rpo_s"] is None
    assert rpo_check(rec, acked - {(1, 1)}, F, max_lost=0)["valid"] is False  # one lost over a bound of 0
    assert rpo_check(rec, acked - {(1, 1)}, F, max_lost=1)["valid"] is True


def test_ledger_block_keeps_the_largest_two_byte_offset_and_promotes_the_next() -> None:
    col = LedgerColumn()
    col.set(0, 1_000)
    col.set(1, 1_000 + 0xFFFC)  # the largest offset a 2-byte entry can hold (0xFFFD..F are markers)
    assert col.blocks[0].typecode == "H" and col.get(1) == 1_000 + 0xFFFC
    col.set(2, 1_000 + 0xFFFD)  # one more would read back as "unset": the block goes to 4 bytes
    assert col.blocks[0].typecode == "I"
    assert [col.get(i) for i in range(3)] == [1_000, 1_000 + 0xFFFC, 1_000 + 0xFFFD]
    assert col.get(3) == 0xFFFFFFFD  # beyond the end: unset


def test_split_process_recording_keeps_an_outage_open_at_the_end() -> None:
    """The same ops recorded by one recorder and by two worker recorders merged into a parent
    (drained now and then, as the runner does), with worker 2 still failing at the end and more
    errors than the cap: the same rows, ledger, errors kept and dropped, and gaps."""
    direct = Recorder(T0, interval=IV, max_errors=50)
    kids = {1: Recorder(T0, interval=IV, max_errors=50), 2: Recorder(T0, interval=IV, max_errors=50)}
    parent = Recorder(T0, interval=IV, max_errors=50)
    for k in range(120):
        for w, t, outcome in ((1, t1(k), outcome1(k)), (2, t2(k), FAIL if k >= 100 else OK)):
            cls = None if outcome == OK else "timeout"
            direct.record(w, "write", t - 0.01, t, outcome, cls, key=k + 1, keyed=SEQUENCE)
            kids[w].record(w, "write", t - 0.01, t, outcome, cls, key=k + 1, keyed=SEQUENCE)
        if k % 16 == 15:
            for kid in kids.values():
                parent.merge(kid.drain(t1(k)))
    for kid in kids.values():
        parent.merge(kid.drain(T0 + 60, final=True))
    direct.finish()
    parent.finish()
    assert direct.to_frame().equals(parent.to_frame())
    assert direct.ledger_acknowledged() == parent.ledger_acknowledged()
    # errors: worker 1 k = 80..111 (32), worker 2 k = 100..119 (20): 52, 50 kept, 2 dropped
    assert (len(direct.errors), direct.errors_dropped) == (50, 2)
    assert (len(parent.errors), parent.errors_dropped) == (50, 2)
    gaps = [(g.worker, g.first_err, g.first_ok_after) for g in parent.gaps]
    assert gaps == [(g.worker, g.first_err, g.first_ok_after) for g in direct.gaps]
    assert gaps == [(1, t1(80), t1(112)), (2, t2(100), None)]  # worker 2's outage is still open


def test_rpo_text_rounding_and_samples() -> None:
    rec = recorder()
    acked = {(1, k + 1) for k in range(240) if outcome1(k) == OK} | {(2, k + 1) for k in range(240)
                                                                   if outcome2(k) == OK}
    lost = {(1, 79), (1, 80), (2, 82)}
    # worker 1's failed k = 99 and 100 (seq 100, 101) and a never-attempted (3, 1): 2 of 3 phantoms failed
    r = rpo_check(rec, (acked - lost) | {(1, 100), (1, 101), (3, 1)}, 1010.0004, max_lost=None)
    assert (r["phantoms"], r["phantoms_that_failed"]) == (3, 2)
    # earliest lost ack 1009.812 (whole ms): 1010.0004 - 1009.812 = 0.1884 -> 0.188 (3 decimals, ms precision)
    assert r["rpo_s"] == 0.188
    # relative window: 1009.812 - 1010.0004 = -0.1884 -> -0.188; 1010.218 - 1010.0004 = 0.2176 -> 0.218
    assert r["lost_ack_window_rel_s"] == [-0.188, 0.218]
    assert r["text"] == "3 lost, acknowledged between -0.188 s and +0.218 s of the fault"
    nodes = {(1, 79): "pg1", (1, 80): "pg1", (2, 82): "pg2"}
    r = rpo_check(rec, acked - lost, F, max_lost=None, nodes=nodes)
    assert r["lost_by_node"] == {"pg1": 2, "pg2": 1}
    assert r["text"] == "3 lost, acknowledged between -0.188 s and +0.218 s of the fault, on pg1 (2), pg2 (1)"
    assert rpo_check(rec, acked, F, max_lost=None)["text"] == "0 lost"
    # samples are capped at 20
    many_lost = set(list(sorted(acked))[:25])
    many_phantoms = {(9, s) for s in range(1, 26)}
    r = rpo_check(rec, (acked - many_lost) | many_phantoms, F, max_lost=None)
    assert len(r["lost_sample"]) == 20 and r["lost_sample"][0] == [1, 1]
    assert len(r["phantom_sample"]) == 20 and r["phantom_sample"][0] == [9, 1]
