"""A restore's RPO against its target (`pitr_check`), on hand-written ledgers.

Two workers write in turn (each op starts when the worker's previous one ended); the target is
1001.000 s with a 50 ms margin (base 1000.0):

worker 1: seq1 acked 1000.100, seq2 1000.500, seq3 1000.900 (all acknowledged 50 ms or more
before the target: "before"), seq4 started 1000.900 acked 1001.300 (in flight at the target:
"around"), seq5 started 1001.300 acked 1001.700 ("after": it started 300 ms past the target),
seq6 started 1001.700 failed;
worker 2: seq1 acked 1000.200 (before), seq2 started 1000.200 acked 1001.200 (around), seq3
started 1001.200 acked 1001.400 (after).
"""

from __future__ import annotations

import pytest

from chaoskit.recorder import FAIL, OK, SEQUENCE, Recorder
from chaoskit.workload.durability import pitr_check

BASE = 1000.0
OPS = {1: [(0.0, 0.1, OK), (0.1, 0.5, OK), (0.5, 0.9, OK), (0.9, 1.3, OK), (1.3, 1.7, OK), (1.7, 1.8, FAIL)],
       2: [(0.0, 0.2, OK), (0.2, 1.2, OK), (1.2, 1.4, OK)]}
TARGET, MARGIN, DISASTER = BASE + 1.0, 0.05, BASE + 2.0


def recorder() -> Recorder:
    rec = Recorder(base=BASE)
    for worker, ops in OPS.items():
        for seq, (start, end, outcome) in enumerate(ops, 1):
            rec.record(worker, "write", BASE + start, BASE + end, outcome, None if outcome == OK else "other",
                       key=seq, keyed=SEQUENCE)
    return rec


def test_a_write_missing_before_the_target_and_one_present_after_it_fail_the_restore() -> None:
    present = {(1, 1), (1, 2), (1, 4), (2, 1), (2, 3)}  # w1 seq3 missing; w2 seq3 (after) present
    out = pitr_check(recorder(), present, TARGET, MARGIN, DISASTER, None)
    p = out["pitr"]
    assert (p["acknowledged_before_target"], p["missing_before_target"], p["missing_before_sample"]) == (4, 1, [[1, 3]])
    assert (p["acknowledged_after_target"], p["lost_after_target"]) == (2, 1)  # w1 seq5 gone, w2 seq3 there
    assert (p["present_after_target"], p["present_after_sample"]) == (1, [[2, 3]])
    assert (p["around_target"], p["around_target_acknowledged"], p["around_target_present"]) == (2, 2, 1)
    assert out["acknowledged"] == 8 and out["lost_acknowledged"] == 3  # w1 seq3, w1 seq5, w2 seq2
    assert out["phantoms"] == 0
    # ack times are kept in whole ms, rounded down (the figures then to 3 decimals)
    assert p["last_present_t"] == pytest.approx(BASE + 1.4, abs=0.0015)
    assert p["data_reaches_s_before_disaster"] == pytest.approx(0.6, abs=0.0015)
    assert out["valid"] is False


def test_a_clean_restore_loses_only_what_came_after_the_target() -> None:
    present = {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1)}
    out = pitr_check(recorder(), present, TARGET, MARGIN, DISASTER, None)
    p = out["pitr"]
    assert (p["missing_before_target"], p["present_after_target"]) == (0, 0)
    assert (p["lost_after_target"], p["around_target_present"]) == (2, 1)  # w1 seq5, w2 seq3; w1 seq4 kept
    assert out["lost_acknowledged"] == 3  # and w2 seq2, in flight at the target and not kept: legal
    assert out["valid"] is True
    assert p["last_present_t"] == pytest.approx(BASE + 1.3, abs=0.0015)
    assert p["data_reaches_s_before_disaster"] == pytest.approx(0.7, abs=0.0015)


def test_the_margin_moves_a_write_from_before_to_around() -> None:
    # w1 seq3 was acknowledged 100 ms before the target: with a 150 ms margin it may have
    # committed after the target (clocks), so its absence is no longer a defect
    present = {(1, 1), (1, 2), (2, 1)}
    out = pitr_check(recorder(), present, TARGET, 0.15, DISASTER, None)
    assert out["pitr"]["missing_before_target"] == 0
    assert out["pitr"]["acknowledged_before_target"] == 3


def test_a_bound_on_lost_writes_still_applies() -> None:
    present = {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1)}
    assert pitr_check(recorder(), present, TARGET, MARGIN, DISASTER, 2)["valid"] is False
    assert pitr_check(recorder(), present, TARGET, MARGIN, DISASTER, 3)["valid"] is True


def test_a_restore_to_the_latest_is_judged_as_a_plain_rpo() -> None:
    out = pitr_check(recorder(), {(1, 1)}, None, MARGIN, DISASTER, None)
    assert out["pitr"]["target"] is None and out["lost_acknowledged"] == 7


class _NoLedgerTable:
    """A workload whose server has no ledger table (restored to before it was made)."""

    def present(self, conn: object) -> None:
        return None


def test_a_server_without_the_ledger_table_holds_none_of_the_runs_writes() -> None:
    from chaoskit.workload.checks import Judging, LostWrites

    truth = LostWrites.read(_NoLedgerTable(), None, None)
    j = Judging(recorder(), DISASTER, None, 1, None, restored=True, restore_target=TARGET, restore_margin_s=MARGIN)
    out = LostWrites.judge(truth, j)
    # every acknowledged write is lost (8: w1 seq1-5, w2 seq1-3), the 4 before the target among them
    assert (out["acknowledged"], out["lost_acknowledged"], out["phantoms"]) == (8, 8, 0)
    assert out["pitr"]["missing_before_target"] == 4 and out["valid"] is False
    assert out["table_absent"] is True and out["text"].startswith("the ledger table is not on the server")
