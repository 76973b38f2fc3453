"""Recorder aggregation with a driven clock: intervals, outage edges, ledger, merge across processes."""

from __future__ import annotations

import math

import pytest

from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, Recorder

BASE = 1_000_000.0


def test_intervals_count_by_outcome_and_class() -> None:
    r = Recorder(BASE, interval=0.1)
    r.record(1, "write", BASE + 0.00, BASE + 0.010, OK)
    r.record(2, "read", BASE + 0.02, BASE + 0.050, OK)
    r.record(1, "write", BASE + 0.12, BASE + 0.150, FAIL, "connection_lost", "boom")
    r.record(2, "write", BASE + 0.13, BASE + 0.180, INFO, "timeout")
    r.missed(BASE + 0.19, 3)
    r.finish()
    df = r.to_frame()
    assert list(df["ok"]) == [2, 0] and list(df["write_ok"]) == [1, 0] and list(df["read_ok"]) == [1, 0]
    assert list(df["fail"]) == [0, 1] and list(df["info"]) == [0, 1] and list(df["missed"]) == [0, 3]
    assert list(df["err_connection_lost"]) == [0, 1] and list(df["err_timeout"]) == [0, 1]
    assert df["tps"].iloc[0] == pytest.approx(20.0)
    # latencies 10 ms and 30 ms: p50 10, p99 30 (HdrHistogram, 2 significant digits)
    assert df["p50_ms"].iloc[0] == pytest.approx(10, rel=0.01)
    assert df["p99_ms"].iloc[0] == pytest.approx(30, rel=0.01)
    assert math.isnan(df["p99_ms"].iloc[1])


def test_empty_intervals_are_zero_rows() -> None:
    r = Recorder(BASE, interval=0.1)
    r.record(1, "write", BASE, BASE + 0.01, OK)
    r.record(1, "write", BASE + 0.5, BASE + 0.51, OK)
    r.finish()
    assert list(r.to_frame()["ok"]) == [1, 0, 0, 0, 0, 1]


def test_outage_edges_are_exact_per_worker() -> None:
    r = Recorder(BASE)
    r.record(1, "write", BASE + 1.0, BASE + 1.001, OK)
    r.record(1, "write", BASE + 1.1, BASE + 1.2, FAIL, "connect_refused")
    r.record(1, "write", BASE + 1.3, BASE + 1.4, FAIL, "connect_refused")
    r.record(2, "write", BASE + 1.0, BASE + 1.05, INFO, "connection_lost")
    r.record(1, "write", BASE + 2.0, BASE + 2.5, OK)
    r.finish()
    by_worker = {g.worker: g for g in r.gaps}
    g1 = by_worker[1]
    assert (g1.last_ok_before, g1.first_err, g1.first_ok_after, g1.errors) == (BASE + 1.001, BASE + 1.2, BASE + 2.5, 2)
    assert g1.first_err_class == "connect_refused"
    g2 = by_worker[2]  # never recovered: the gap stays open
    assert g2.last_ok_before is None and g2.first_ok_after is None


def test_ledger_ranges_and_ack_times() -> None:
    r = Recorder(BASE)
    outcomes = {1: OK, 2: OK, 3: INFO, 4: FAIL, 5: OK}
    for seq, outcome in outcomes.items():
        r.record(7, "write", BASE + seq, BASE + seq + 0.0123, outcome, None if outcome == OK else "timeout",
                 key=seq, keyed=SEQUENCE)
    r.finish()
    assert r.ledger_acknowledged() == {7: [(1, 2), (5, 5)]}
    state, t = r.ledger_outcome(7, 2)
    assert state == OK and t == pytest.approx(BASE + 2.0123, abs=0.001)  # ms resolution
    assert r.ledger_outcome(7, 3) == (INFO, None)
    assert r.ledger_outcome(7, 4) == (FAIL, None)
    assert r.ledger_outcome(7, 9) == ("unknown", None)
    assert list(r.ledger_keys(INFO)) == [(7, 3)]


def test_drain_and_merge_equal_direct_recording() -> None:
    ops = [(w, i + 1, BASE + i * 0.037, OK if i % 5 else FAIL) for i in range(200) for w in (1, 2)]
    direct = Recorder(BASE)
    child_a, child_b, parent = Recorder(BASE), Recorder(BASE), Recorder(BASE)
    for w, seq, t, outcome in ops:
        cls = None if outcome == OK else "timeout"
        direct.record(w, "write", t - 0.002, t, outcome, cls, key=seq, keyed=SEQUENCE)
        child = child_a if w == 1 else child_b
        child.record(w, "write", t - 0.002, t, outcome, cls, key=seq, keyed=SEQUENCE)
        if int((t - BASE) * 1000) % 1000 < 40:  # drain now and then, as the runner does
            parent.merge(child.drain(t))
    parent.merge(child_a.drain(BASE + 100, final=True))
    parent.merge(child_b.drain(BASE + 100, final=True))
    direct.finish()
    parent.finish()
    assert direct.to_frame().equals(parent.to_frame())
    assert direct.ledger_acknowledged() == parent.ledger_acknowledged()
    assert len(direct.errors) == len(parent.errors)
    assert [(g.worker, g.first_err, g.first_ok_after) for g in direct.gaps] == \
        [(g.worker, g.first_err, g.first_ok_after) for g in parent.gaps]


def test_error_list_is_capped_but_counted() -> None:
    r = Recorder(BASE, max_errors=3)
    for i in range(10):
        r.record(1, "write", BASE + i, BASE + i + 0.001, FAIL, "other")
    r.finish()
    assert len(r.errors) == 3 and r.errors_dropped == 7
    assert r.totals()["fail"] == 10


def test_window_stats() -> None:
    r = Recorder(BASE, interval=0.1)
    for i in range(100):
        r.record(1, "write", BASE + i * 0.01, BASE + i * 0.01 + 0.002, OK)
    r.finish()
    w = r.window(BASE, BASE + 1.0)
    assert w["ok"] == 100 and w["tps"] == pytest.approx(100)
    assert w["p50_ms"] == pytest.approx(2, rel=0.02)


def test_ledger_column_compact_and_promoted() -> None:
    from chaoskit.recorder import LEDGER_FAIL, LEDGER_INFO, LEDGER_UNSET, LedgerColumn

    col = LedgerColumn()
    values = {0: 1000, 1: 1001, 2: LEDGER_FAIL, 3: 1500, 4: LEDGER_INFO, 6: 2000}
    for i, v in values.items():
        col.set(i, v)
    assert col.blocks[0].typecode == "H"  # 2 bytes per entry while the block spans < 65 s
    assert [col.get(i) for i in range(8)] == [1000, 1001, LEDGER_FAIL, 1500, LEDGER_INFO, LEDGER_UNSET, 2000,
                                              LEDGER_UNSET]
    col.set(7, 1000 + 70_000)  # 70 s later in the same block: promoted, nothing lost
    assert col.blocks[0].typecode == "I"
    assert [col.get(i) for i in (0, 2, 6, 7)] == [1000, LEDGER_FAIL, 2000, 71_000]
    col.set(LedgerColumn.BLOCK + 3, 5)  # a new block has its own base
    assert col.get(LedgerColumn.BLOCK + 3) == 5 and col.get(LedgerColumn.BLOCK) == LEDGER_UNSET
    assert len(col) == LedgerColumn.BLOCK + 4
    assert list(col.values(6))[:2] == [2000, 71_000]


def test_bucketed_latencies_give_the_same_histogram_as_recording_each_value() -> None:
    import random

    from hdrh.histogram import HdrHistogram

    rng = random.Random(3)
    rec = Recorder(base=0.0)
    direct = HdrHistogram(1, 120_000_000, 2)
    for _ in range(20_000):
        t_done = 10.0 + rng.lognormvariate(7, 2) / 1e6
        direct.record_value(min(120_000_000, max(1, int((t_done - 10.0) * 1e6))))
        rec.record(1, "write", 10.0, t_done, "ok")
    rec.finish()
    merged = rec.latency_hist()
    assert merged.get_total_count() == direct.get_total_count() == 20_000
    for p in (1, 25, 50, 90, 99, 99.9, 100):
        assert merged.get_value_at_percentile(p) == direct.get_value_at_percentile(p), p


def test_merge_counts_the_errors_it_drops() -> None:
    """200 kept of 250 shipped: 50 dropped (the parent used to compare the batch with the cap and
    report 0); the next 10 find the list full and are all dropped, on top of the 3 the worker
    process had already dropped itself."""
    from chaoskit.recorder import Batch

    parent = Recorder(base=0.0, max_errors=200)
    parent.merge(Batch(errors=[(float(i), 0, "write", "fail", "timeout", "x") for i in range(250)]))
    assert len(parent.errors) == 200 and parent.errors_dropped == 50
    parent.merge(Batch(errors=[(300.0 + i, 1, "write", "fail", "timeout", "x") for i in range(10)], errors_dropped=3))
    assert len(parent.errors) == 200 and parent.errors_dropped == 63
    # 100 already kept, a batch of 150 arrives: 100 more fit, 50 are dropped (not 0)
    two = Recorder(base=0.0, max_errors=200)
    two.merge(Batch(errors=[(float(i), 0, "write", "fail", "timeout", "x") for i in range(100)]))
    two.merge(Batch(errors=[(100.0 + i, 1, "write", "fail", "timeout", "x") for i in range(150)]))
    assert len(two.errors) == 200 and two.errors_dropped == 50


def test_window_counts_intervals_tps_and_exact_small_latencies() -> None:
    """100 ok ops in intervals 8 and 9 (t in [1.0, 1.25), interval 0.125): 98 at 100 µs, one at 200,
    one at 250 µs (below 256 µs the histogram is exact). p50 = 0.1 ms, p99 = the 99th value = 0.2 ms,
    p99.9 = the 100th = 0.25 ms; 100 ops over 0.25 s: 400 ops/s; 2 intervals."""
    import math

    from chaoskit.recorder import OK, Recorder

    rec = Recorder(0.0, interval=0.125)
    lat = [100e-6] * 98 + [200e-6, 250e-6]
    for i, d in enumerate(lat):
        t = 1.01 + (i % 2) * 0.125 + i * 1e-4
        rec.record(1, "write", t - d - 5e-7, t, OK)  # + 0.5 µs: the whole µs survive the float subtraction
    rec.finish()
    w = rec.window(1.0, 1.25)
    assert (w["ok"], w["intervals"], w["tps"]) == (100, 2, 400.0)
    assert (w["p50_ms"], w["p99_ms"], w["p99.9_ms"]) == (0.1, 0.2, 0.25)
    empty = rec.window(5.0, 6.0)
    assert empty["intervals"] == 0 and empty["tps"] == 0.0 and math.isnan(empty["p50_ms"])
    # latency_hist over [1.125, 1.25): interval 9 only (50 ops), boundaries as the window's
    assert rec.latency_hist(1.125, 1.25).get_total_count() == 50
    assert rec.latency_hist(1.0, 1.125).get_total_count() == 50
    assert rec.latency_hist().get_total_count() == 100


def test_drain_ships_closed_intervals_below_its_watermark_and_new_ledger_only() -> None:
    from chaoskit.recorder import OK, Recorder

    rec = Recorder(0.0, interval=0.1)
    for t in (1.05, 1.15, 1.25):  # intervals 10, 11, 12
        rec.record(1, "write", t - 0.001, t, OK, key=round(t * 100) - 104, keyed=SEQUENCE)  # seqs 1, 11, 21
    b = rec.drain(1.25)  # index(1.25) = 12: intervals below 11 are complete
    assert b.watermark == 11 and [i for i, _, _ in b.intervals] == [10]
    assert [(w, first) for w, first, _ in b.ledger] == [(1, 1)]
    again = rec.drain(1.26)
    assert again.intervals == [] and again.ledger == []  # nothing new: nothing shipped
    last = rec.drain(1.3, final=True)
    assert last.watermark == 1 << 62 and [i for i, _, _ in last.intervals] == [11, 12]
    # seq 1..21 was shipped as one column in the first batch; a gap (2..10) reads as unacknowledged
    assert rec.ledger_acknowledged() == {1: [(1, 1), (11, 11), (21, 21)]}


def test_timeline_csv_without_a_start_counts_from_its_first_row(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import csv

    from chaoskit.recorder import FAIL, OK, Recorder

    rec = Recorder(0.0, interval=0.5)
    rec.record(1, "write", 10.1, 10.2, OK)
    rec.record(1, "write", 10.6, 10.7, FAIL, "timeout")
    rec.finish()
    path = tmp_path / "t.csv"
    rec.write_timeline_csv(str(path))
    with open(path) as fh:
        header = next(csv.reader(fh))
    assert header[:2] == ["t", "t_rel_s"]  # no index column
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    assert [r["t_rel_s"] for r in rows] == ["0.000", "0.500"]
    assert [r["errors_per_s"] for r in rows] == ["0.000", "2.000"]  # 1 error in 0.5 s


def test_a_late_op_for_a_closed_interval_is_folded_in() -> None:
    """Interval 8 (t in [1.0, 1.125)) is closed with 2 ok ops (100 and 200 µs); a third (250 µs) and a
    failure arrive afterwards for it: the row holds 3 ok, 1 fail, and its max is the late op's."""
    from chaoskit.recorder import FAIL, OK, Recorder

    rec = Recorder(0.0, interval=0.125)
    rec.record(1, "write", 1.01 - 100.5e-6, 1.01, OK)
    rec.record(2, "write", 1.02 - 200.5e-6, 1.02, OK)
    rec.close_before(9)
    assert rec.row(8)[0][:2] == [2, 0]
    rec.record(3, "write", 1.03 - 250.5e-6, 1.03, OK)
    rec.record(4, "write", 1.04 - 0.001, 1.04, FAIL, "timeout")
    # totals count the closed row and the still-open late slot alike
    assert (rec.totals()["ok"], rec.totals()["fail"], rec.totals()["err_timeout"]) == (3, 1, 1)
    rec.close_before(9)
    counts, p50, p99, _, mx = rec.row(8)
    # the 2nd of 3 is the median, the 3rd the p99 and max (rows keep float32)
    assert counts[:2] == [3, 1] and (p50, p99, mx) == (pytest.approx(0.2, rel=1e-6), 0.25, 0.25)
    assert rec.totals()["ok"] == 3


def test_an_empty_recorder_has_an_empty_timeline_with_its_columns() -> None:
    from chaoskit.recorder import COLUMNS, Recorder

    df = Recorder(0.0).to_frame()
    assert df.empty and list(df.columns) == ["t", *COLUMNS, "tps", "p50_ms", "p99_ms", "p999_ms", "max_ms"]


def test_ledger_outcome_at_its_bounds() -> None:
    from chaoskit.recorder import FAIL, INFO, OK, Recorder

    rec = Recorder(1000.0, interval=0.125)
    rec.record(1, "write", 1000.9, 1001.0, OK, key=1, keyed=SEQUENCE)
    rec.record(1, "write", 1001.0, 1001.1, FAIL, "timeout", key=2, keyed=SEQUENCE)
    rec.record(1, "write", 1001.1, 1001.2, INFO, "connection_lost", key=3, keyed=SEQUENCE)
    rec.record(1, "write", 1001.4, 1001.5, OK, key=5, keyed=SEQUENCE)  # seq 4 never recorded
    assert rec.ledger_outcome(1, 1) == ("ok", 1001.0)  # 1000 ms after the base
    assert rec.ledger_outcome(1, 2) == ("fail", None) and rec.ledger_outcome(1, 3) == ("info", None)
    assert rec.ledger_outcome(1, 4) == ("unknown", None) and rec.ledger_outcome(1, 5) == ("ok", 1001.5)
    for worker, seq in ((1, 0), (1, 6), (2, 1)):
        assert rec.ledger_outcome(worker, seq) == ("unknown", None), (worker, seq)


def test_row_keeps_its_four_latency_figures_apart() -> None:
    """10 ok ops of 10..100 µs in one interval: p50 = 50 µs, p99 = p99.9 = max = 100 µs; with a
    255 µs op added p99.9 and max move while p50 stays."""
    from chaoskit.recorder import OK, Recorder

    rec = Recorder(0.0, interval=0.125)
    for i in range(1, 11):
        rec.record(1, "write", 1.0 - i * 10e-6 - 5e-7, 1.0, OK)
    rec.finish()
    _, p50, p99, p999, mx = rec.row(8)
    assert (p50, p99, p999, mx) == (pytest.approx(0.05, rel=1e-6), pytest.approx(0.1, rel=1e-6),
                                    pytest.approx(0.1, rel=1e-6), pytest.approx(0.1, rel=1e-6))
    rec2 = Recorder(0.0, interval=0.125)
    for _ in range(99):
        rec2.record(1, "write", 1.0 - 10e-6 - 5e-7, 1.0, OK)
    rec2.record(1, "write", 1.0 - 255e-6 - 5e-7, 1.0, OK)
    rec2.finish()
    _, p50, p99, p999, mx = rec2.row(8)
    assert (p50, p99, p999, mx) == (pytest.approx(0.01, rel=1e-6), pytest.approx(0.01, rel=1e-6),
                                    pytest.approx(0.255, rel=1e-6), pytest.approx(0.255, rel=1e-6))


def test_history_ops_carry_the_error_class_of_failures_only() -> None:
    from chaoskit.recorder import FAIL, OK, Recorder

    rec = Recorder(0.0, keep_ops=True)
    rec.record(1, "write", 0.9, 1.0, OK, key=1, keyed=SEQUENCE, node="pg1")
    rec.record(1, "write", 1.0, 1.1, FAIL, None, key=2, keyed=SEQUENCE, node="pg1")
    rec.record(1, "write", 1.1, 1.2, FAIL, "timeout", key=3, keyed=SEQUENCE)
    assert [(op[4], op[7]) for op in rec.ops] == [("ok", None), ("fail", "other"), ("fail", "timeout")]
    assert rec.errors[0][5] == ""  # no message given: empty, not a placeholder


def test_window_mean_and_p90_as_a_ramp_step_reports_them() -> None:
    """Ten ok ops of 1, 2, ..., 10 ms in one second: mean (1 + ... + 10) / 10 = 5.5 ms; p90 by
    nearest rank is the 9th smallest, 9 ms; p50 the 5th, 5 ms (HdrHistogram keeps 2 significant
    digits: within 1 %)."""
    r = Recorder(BASE, interval=1.0)
    for k in range(1, 11):
        r.record(1, "write", BASE + 0.05 * k, BASE + 0.05 * k + k / 1000, OK)
    r.finish()
    w = r.window(BASE, BASE + 1.0)
    assert w["mean_ms"] == pytest.approx(5.5, rel=0.01)
    assert w["p90_ms"] == pytest.approx(9, rel=0.01)
    assert w["p50_ms"] == pytest.approx(5, rel=0.01)
    assert math.isnan(r.window(BASE + 5, BASE + 6)["mean_ms"])


def test_hist_mean_is_hdrhistograms_own_mean() -> None:
    """The mean by one dot product equals the library's walk over every recorded value, exactly
    (the same integer sum, divided once), over values from 1 µs to the histogram's top."""
    import random

    from chaoskit.recorder import HIST_MAX_US, _new_hist, hist_mean

    rng = random.Random(7)
    h = _new_hist()
    for _ in range(5000):
        h.record_value(rng.choice([rng.randint(1, 300), rng.randint(300, 50_000), rng.randint(1, HIST_MAX_US)]))
    assert hist_mean(h) == h.get_mean_value()
    assert hist_mean(_new_hist()) == 0.0 == _new_hist().get_mean_value()


def test_window_without_latency_counts_the_same_and_reads_no_histogram() -> None:
    """The abort rule's window: the same counts and rate as the full one, and no latency keys."""
    r = Recorder(BASE, interval=1.0)
    for k in range(1, 11):
        r.record(1, "write", BASE + 0.05 * k, BASE + 0.05 * k + k / 1000, OK)
    r.record(1, "write", BASE + 0.7, BASE + 0.8, FAIL, "timeout")
    r.finish()
    full, counts = r.window(BASE, BASE + 1.0), r.window(BASE, BASE + 1.0, latency=False)
    assert counts == {k: v for k, v in full.items() if not k.endswith("_ms")}
    assert (counts["ok"], counts["fail"], counts["tps"]) == (10, 1, 10.0)
