"""A recorder that spills (closed intervals, ledger blocks, the kept op history) gives exactly the
figures of one that keeps everything in memory, on the same recorded history; the RPO check read
worker by worker equals the set arithmetic it replaced; the ledger truth as ranges."""

from __future__ import annotations

import io
import math
import random
from pathlib import Path

import pytest

from chaoskit import history as history_mod
from chaoskit import spill as spill_mod
from chaoskit.keyranges import KeyRanges
from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, LedgerColumn, Recorder
from chaoskit.workload.durability import rpo_check

BASE = 1_000.0


def recorded_batches() -> list:
    """Three worker processes' batches over 60 s with two outages, and a late batch of old ops."""
    rng = random.Random(7)
    children = [Recorder(BASE, keep_ops=True) for _ in range(3)]
    seqs: dict[int, int] = {}
    batches = []
    t = BASE
    while t < BASE + 60:
        for c, child in enumerate(children):
            for _ in range(rng.randrange(3, 9)):
                w = c * 4 + rng.randrange(1, 5)
                seqs[w] = seqs.get(w, 0) + 1
                t_done = t + rng.random() * 0.2
                outage = 20 <= t - BASE < 22 or 41 <= t - BASE < 44.5
                outcome = (INFO if rng.random() < 0.3 else FAIL) if outage else OK
                child.record(w, "write", t_done - rng.random() * 0.05, t_done, outcome,
                             None if outcome == OK else "connection_lost", "lost", key=seqs[w], keyed=SEQUENCE,
                             node=f"pg{w % 3 + 1}")
        t += 0.2
        for child in children:
            batches.append(child.drain(t))
    late = Recorder(BASE, keep_ops=True)  # a source that delivers ops of long-closed intervals
    for i in range(5):
        late.record(99, "write", BASE + 3 + i, BASE + 3.01 + i, OK, key=i + 1, keyed=SEQUENCE)
    late.record(99, "write", BASE + 9.5, BASE + 9.52, FAIL, "timeout", "late", key=6, keyed=SEQUENCE)
    batches.append(late.drain(BASE + 1000, final=True))
    for child in children:
        batches.append(child.drain(t + 10, final=True))
    return batches


def fed(batches: list, spill_dir: Path | None) -> Recorder:
    rec = Recorder(BASE, keep_ops=False, spill_dir=spill_dir, keep_closed_s=2.0)
    rec.keep_around(BASE + 21)
    rec.keep_around(BASE + 42)
    for batch in batches:
        rec.merge(batch)
        if batch.watermark < (1 << 62):
            rec.close_before(batch.watermark)
    rec.finish()
    return rec


@pytest.fixture
def small_spills(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments and ledger blocks small enough that a minute of ops spills many of each."""
    monkeypatch.setattr(spill_mod, "SEGMENT_INTERVALS", 25)
    monkeypatch.setattr("chaoskit.recorder.SEGMENT_INTERVALS", 25)
    monkeypatch.setattr(history_mod, "SEGMENT_OPS", 40)
    monkeypatch.setattr(LedgerColumn, "BLOCK", 16)


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_a_spilling_recorder_gives_the_same_figures(tmp_path: Path, small_spills: None) -> None:
    batches = recorded_batches()
    memory = fed(batches, None)
    spilled = fed(batches, tmp_path / "recorder")
    # it did spill: interval segments, ledger files with blocks, history segments, late ops folded
    assert spilled._ispill is not None and len(spilled._ispill.segments) >= 5
    assert all(col.spilled >= 1 for w, col in spilled.ledger.items() if w != 99)
    assert spilled.history.spill is not None and len(spilled.history.spill.segments) >= 3
    assert spilled._late and memory.totals()["ok"] > 0
    assert len(spilled.hists) < len(memory.hists)

    assert spilled.totals() == memory.totals()
    assert spilled.rows == memory.rows
    assert spilled.closed_until() == memory.closed_until()
    for idx in (min(memory.rows), 30 + int(BASE * 10), 95 + int(BASE * 10), max(memory.rows)):
        assert same(spilled.row(idx), memory.row(idx))
    for lo, hi in ((BASE, BASE + 1), (BASE + 2.95, BASE + 10.05), (BASE + 19, BASE + 23),
                   (BASE, BASE + 61), (BASE + 59, BASE + 75)):
        assert same(spilled.window(lo, hi), memory.window(lo, hi)), (lo, hi)
    for lo2, hi2 in ((None, None), (BASE + 3.005, BASE + 9.55), (BASE + 40, None)):
        a, b = spilled.latency_hist(lo2, hi2), memory.latency_hist(lo2, hi2)
        assert a.get_total_count() == b.get_total_count() and a.encode() == b.encode()
    assert spilled.to_frame().equals(memory.to_frame())
    assert spilled.ledger_acknowledged() == memory.ledger_acknowledged()
    for outcome in (OK, FAIL, INFO):
        assert list(spilled.ledger_keys(outcome)) == list(memory.ledger_keys(outcome))
    for worker in memory.ledger:
        for seq in (1, 2, 17, 33, 64, len(memory.ledger[worker]), len(memory.ledger[worker]) + 1):
            assert spilled.ledger_outcome(worker, seq) == memory.ledger_outcome(worker, seq)

    out_a, out_b = io.StringIO(), io.StringIO()
    acked = set(memory.ledger_keys(OK))
    present = KeyRanges.of({k for k in acked if k[1] % 11} | {(5, 10_000), (2, 0)})
    assert spilled.history.write(out_a, run_id="r", groups={"g": [1, 2]}, faults=[], present=present) == \
        memory.history.write(out_b, run_id="r", groups={"g": [1, 2]}, faults=[], present=present)
    assert out_a.getvalue() == out_b.getvalue() and out_a.getvalue().count("\n") > 100
    nodes = {(o.worker, o.seq): o.node for o in memory.history.kept_ops() if o.seq is not None and o.node}
    assert rpo_check(spilled, present, BASE + 21, 3, nodes=nodes) == rpo_check(memory, present, BASE + 21, 3,
                                                                                   nodes=nodes)


def reference_rpo(rec: Recorder, present: set[tuple[int, int]], t_fault: float, workers: set[int] | None
                  ) -> dict[str, object]:
    """The check as set arithmetic over every key (how it was computed before the ledger could spill)."""
    def mine(keys: object) -> set[tuple[int, int]]:
        return {k for k in keys if workers is None or k[0] in workers}  # type: ignore[attr-defined]

    acked, info, failed = mine(rec.ledger_keys(OK)), mine(rec.ledger_keys(INFO)), mine(rec.ledger_keys(FAIL))
    present = mine(present)
    lost = sorted(acked - present)
    phantoms = sorted(present - acked - info)
    times = [t for k in lost if (t := rec.ledger_outcome(*k)[1]) is not None]
    return {"acknowledged": len(acked), "lost_acknowledged": len(lost), "indeterminate": len(info),
            "indeterminate_found": len(info & present), "indeterminate_not_found": len(info - present),
            "phantoms": len(phantoms), "phantoms_that_failed": len([k for k in phantoms if k in failed]),
            "rpo_s": round(max(0.0, t_fault - min(times)), 3) if times else None,
            "lost_sample": [list(k) for k in lost[:20]], "phantom_sample": [list(k) for k in phantoms[:20]],
            "lost_ack_window": [min(times), max(times)] if times else None}


@pytest.mark.parametrize("workers", [None, {1, 2, 3}, {5, 99}])
def test_the_rpo_check_per_worker_equals_the_set_arithmetic(tmp_path: Path, small_spills: None,
                                                            workers: set[int] | None) -> None:
    rec = fed(recorded_batches(), tmp_path / "recorder")
    acked = set(rec.ledger_keys(OK))
    info = sorted(rec.ledger_keys(INFO))
    failed = sorted(rec.ledger_keys(FAIL))
    # lost: every 7th acknowledged write; found: half the indeterminate ones; phantoms: two failed
    # writes, a key beyond every worker's history, one below 1, one of a worker that never wrote
    present = {k for k in acked if k[1] % 7} | set(info[::2]) | set(failed[:2])
    present |= {(1, 100_000), (2, 0), (42, 3)}
    got = rpo_check(rec, KeyRanges.of(present), BASE + 21, None, workers=workers)
    want = reference_rpo(rec, present, BASE + 21, workers)
    assert {k: got[k] for k in want} == want
    assert got["lost_acknowledged"] > 0 and got["phantoms"] >= (4 if workers is None else 0)


def test_key_ranges_hold_what_their_runs_say() -> None:
    held = KeyRanges.from_runs([(1, 5, 9), (1, 1, 3), (1, 4, 4), (2, 7, 7), (1, 20, 21)])
    assert held.ranges(1) == [(1, 9), (20, 21)] and held.ranges(2) == [(7, 7)]
    assert len(held) == 12 and (1, 9) in held and (1, 10) not in held and (3, 1) not in held
    assert held == {(1, s) for s in [*range(1, 10), 20, 21]} | {(2, 7)}
    assert held.mask(1, 12).tolist() == [True] * 9 + [False] * 3
    assert held.outside(1, 8) == [(9, 9), (20, 21)]
    assert KeyRanges.from_runs([(1, -2, 2)]).outside(1, 5) == [(-2, 0)]


def test_the_error_log_reads_as_the_list_of_tuples_it_replaced() -> None:
    from chaoskit.recorder import ErrorLog

    rows = [(5.0, 1, "write", "fail", "timeout", "a"), (2.0, 2, "read", "info", "connection_lost", "b"),
            (5.0, 3, "write", "fail", "timeout", "a"), (1.0, 1, "write", "fail", "other", "")]
    log = ErrorLog()
    log.extend(rows[:2])
    log.append(rows[2])
    log.append(rows[3])
    assert len(log) == 4 and list(log) == rows and log[1:] == rows[1:] and log[-1] == rows[3] and log[:50] == rows
    log.sort_by_time()
    assert list(log) == sorted(rows, key=lambda e: e[0])  # stable: the two at 5.0 keep their order


class ReferenceHistory:
    """The history as it was kept before its columns: one tuple per op in a deque."""

    def __init__(self, window_s: float, recent_s: float, max_kept: int) -> None:
        from collections import deque

        self.window_s, self.recent_s, self.max_kept = window_s, recent_s, max_kept
        self.windows: list[tuple[float, float]] = []
        self.recent: deque = deque()
        self.kept: list = []
        self.dropped = 0
        self.latest = 0.0

    def keep_around(self, t: float) -> None:
        self.windows.append((t - self.window_s, t + self.window_s))

    def _judge(self, op: history_mod.Op) -> None:
        if any(lo <= op.t_done and op.t_invoke <= hi for lo, hi in self.windows):
            if len(self.kept) < self.max_kept:
                self.kept.append(op)
            else:
                self.dropped += 1

    def add(self, ops: list) -> None:
        for op in ops:
            op = history_mod.Op(*op)
            self.recent.append(op)
            self.latest = max(self.latest, op.t_done)
        while self.recent and self.recent[0].t_done < self.latest - self.recent_s:
            self._judge(self.recent.popleft())

    def flush(self) -> None:
        while self.recent:
            self._judge(self.recent.popleft())
        self.kept.sort(key=lambda o: (o.t_done, o.worker))


@pytest.mark.parametrize("seed", range(6))
def test_the_history_in_columns_keeps_what_the_tuples_kept(tmp_path: Path, seed: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Deliveries out of order (a slow source), windows opened while ops age, a cap reached, ops
    without a key, row or node: the same ops kept and dropped, in the same order."""
    monkeypatch.setattr(history_mod, "SEGMENT_OPS", 7)
    rng = random.Random(seed)
    new = history_mod.OpHistory(window_s=2.0, recent_s=3.0, max_kept=150,
                                spill=spill_mod.OpSpill(tmp_path / "h") if seed % 2 else None)
    old = ReferenceHistory(2.0, 3.0, 150)
    t = 100.0
    for step in range(400):
        t += rng.random() * 0.1
        ops = []
        for _ in range(rng.randrange(0, 6)):
            done = t - (rng.random() * 4 if rng.random() < 0.2 else 0.0)  # some arrive seconds late
            ops.append((done - rng.random() * 0.3, done, rng.randrange(1, 5), rng.choice(["write", "read"]),
                        rng.choice([OK, FAIL, INFO]), rng.choice([None, step]), rng.choice([None, "pg1", "pg2"]),
                        rng.choice([None, "timeout"]), *([rng.choice([None, 3])] if rng.random() < 0.5 else [])))
        if rng.random() < 0.03:
            at = t - rng.random() * 2.5
            new.keep_around(at)
            old.keep_around(at)
        new.add(ops)
        old.add(ops)
    new.flush()
    old.flush()
    assert list(new.kept_ops()) == old.kept and new.dropped == old.dropped and new.count() == len(old.kept)
    assert len(old.kept) > 20 and (old.dropped > 0 or seed % 3)  # the cap is reached in some runs


def test_key_ranges_cut_a_span_by_what_they_hold() -> None:
    held = KeyRanges({1: [(5, 10), (20, 30)]})
    assert held.within(1, 1, 25) == [(5, 10), (20, 25)] and held.within(2, 1, 25) == []
    assert held.without(1, [(1, 40)]) == [(1, 4), (11, 19), (31, 40)]
    assert held.without(1, [(6, 9), (21, 21)]) == [] and held.without(3, [(1, 3)]) == [(1, 3)]
