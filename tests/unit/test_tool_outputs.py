"""The load tools' own output read as they wrote it (fixtures made on this machine by running the
real tools: tests/fixtures/tools/SOURCE.md). Expected values are read off the files by hand or
taken from the tool's own summary, never from the readers under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaoskit.workload.engines import jmeter, pgbench, sysbench

FIX = Path(__file__).parent.parent / "fixtures" / "tools"


def test_pgbench_log_of_a_run_whose_server_stopped() -> None:
    """pgbench's summary says 1072 transactions were processed; its two thread files hold them all
    (556 + 516 lines), thread 0's file first. The first line, `0 1 2051 0 1796275457 898033 80`,
    ended at 1796275457.898033 after 2051 µs."""
    d = FIX / "pgbench-15-rate-server-stopped"
    files = pgbench.log_files(d, 12416)
    assert [p.name for p in files] == ["pgbench_log.12416", "pgbench_log.12416.1"]
    txs = pgbench.read_logs(files)
    assert len(txs) == 1072 and all(t.ok for t in txs)
    first = next(t for t in txs if (t.client, t.number) == (0, 1))
    assert first.t_end == pytest.approx(1796275457.898033, abs=1e-6)
    assert first.t_start == pytest.approx(1796275457.895982, abs=1e-6)
    assert [t.t_end for t in txs] == sorted(t.t_end for t in txs)
    # every client was aborted at the stop, in command 4 of script 0, in the order stderr says
    assert pgbench.aborts((d / "stderr").read_text()) == [pgbench.Abort(c, 4, 0) for c in (0, 1, 3, 2)]


def test_pgbench_failed_transactions_are_kept_with_their_reason() -> None:
    """pgbench's summary: 388 processed, 10 failed, all serialization failures. A failed one has no
    latency, so only its end is known (`2 16 serialization 0 1796275473 869731 0`)."""
    txs = pgbench.read_logs(pgbench.log_files(FIX / "pgbench-15-serialization", 12614))
    failed = [t for t in txs if not t.ok]
    assert sum(t.ok for t in txs) == 388 and len(failed) == 10
    assert {t.failure for t in failed} == {"serialization"} and all(t.t_start is None for t in failed)
    one = next(t for t in failed if (t.client, t.number) == (2, 16))
    assert one.t_end == pytest.approx(1796275473.869731, abs=1e-6)
    assert pgbench.aborts((FIX / "pgbench-15-serialization" / "stderr").read_text()) == []


@pytest.mark.parametrize(("line", "field"), [
    ("0 1 2051 0 1796275457", "expected 6 to 8 fields"),
    ("0 1 12x 0 1796275457 898033", "field time is '12x'"),
    ("0 1 100 0 1796275457 1000000", "time_us 1000000"),
    ("0 1 -5 0 1796275457 5", "field time is negative"),
    ("0 1 100 0 1796275457 5 0 x\x1b", "field retries is 'x\\x1b'"),
])
def test_a_pgbench_line_it_did_not_write_names_file_line_and_field(line: str, field: str) -> None:
    with pytest.raises(pgbench.LogError) as err:
        pgbench.parse_line(line, "log.1:7")
    assert str(err.value).startswith("log.1:7: ") and field in str(err.value)
    assert "\x1b" not in str(err.value)


def test_pgbench_skipped_transactions_were_never_sent() -> None:
    assert pgbench.parse_line("3 9 skipped 0 1796275457 5 120", "x") is None


def test_sysbench_report_until_the_server_was_lost() -> None:
    """MariaDB killed 3.5 s in: three reports, then one FATAL pair per thread (4 threads: 8 lines).
    The second report as printed: `[ 2s ] thds: 4 tps: 1747.25 qps: 34958.04 (r/w/o:
    24469.53/6994.01/3494.50) lat (ms,95%): 3.62 err/s: 0.00 reconn/s: 0.00`."""
    rep = sysbench.parse((FIX / "sysbench-1.0.20-mysql-server-killed" / "stdout").read_text())
    assert [r.t_s for r in rep.intervals] == [1.0, 2.0, 3.0]
    assert rep.intervals[1] == sysbench.IntervalReport(2.0, 4, 1747.25, 34958.04, 24469.53, 6994.01, 3494.50,
                                                       95.0, 3.62, 0.0, 0.0)
    assert len(rep.fatal) == 8 and sum("error 2013" in f for f in rep.fatal) == 4


@pytest.mark.parametrize("run", ["sysbench-1.0.20-pgsql-server-stopped", "sysbench-1.0.20-mysql-ignore-errors"])
def test_sysbench_that_crashed_leaves_its_reports_and_no_fatal_line(run: str) -> None:
    """Both crashed (SIGSEGV, exit 139) after three reports, saying nothing: the exit status is the
    only sign, so the runner must read it."""
    rep = sysbench.parse((FIX / run / "stdout").read_text())
    assert [r.t_s for r in rep.intervals] == [1.0, 2.0, 3.0] and rep.fatal == []


def test_jmeter_jtl_of_a_run_whose_server_stopped() -> None:
    """JMeter's own summary for the run: 1196 samples, 346 errors. The first line,
    `1796276009419,372,insert,200,OK,step 1 1-1,...,true,...`, started at 1796276009.419 and ended
    372 ms later; the first failure is thread 1-3's at 1796276013466 (+29 ms), SQLSTATE 08006
    (the connection broke); then the port refused (08001, 338 samples), and the server said it was
    starting up (57P03, 4 samples), as counted with awk on the file's code column."""
    samples = jmeter.read_jtl(FIX / "jmeter-2.13-server-stopped" / "results.jtl")
    assert len(samples) == 1196 and sum(not s.ok for s in samples) == 346
    assert {s.thread for s in samples} == {f"step 1 1-{i}" for i in range(1, 5)}
    first = next(s for s in samples if s.thread == "step 1 1-1")
    assert (first.t_start, first.t_end, first.code) == (1796276009.419, 1796276009.791, "200")
    failed = [s for s in samples if not s.ok]
    assert (failed[0].t_start, failed[0].thread, failed[0].code) == (1796276013.466, "step 1 1-3", "08006")
    codes = [s.code for s in failed]
    assert (codes.count("08006"), codes.count("08001"), codes.count("57P03")) == (4, 338, 4)
    assert [s.t_start for s in samples] == sorted(s.t_start for s in samples)


def test_a_jtl_whose_timestamp_is_the_end(tmp_path: Path) -> None:
    """With `sampleresult.timestamp.start=false` the stamp is the end: 1000 ms stamp, 250 ms
    elapsed -> the sample ran from 0.75 s to 1.0 s."""
    p = tmp_path / "end.jtl"
    p.write_text("timeStamp,elapsed,label,success,threadName\n1000,250,x,true,t1\n")
    [s] = jmeter.read_jtl(p, timestamp="end")
    assert (s.t_start, s.t_end, s.ok) == (0.75, 1.0, True)


@pytest.mark.parametrize(("text", "said"), [
    ("1796276009419,372,insert,200,OK,step 1 1-1,text,true,0,4,4,0\n", ":1: no header line naming timeStamp"),
    ("timeStamp,elapsed,success,threadName\n2026/12/03 05:33,3,true,t\n", ":2: field timeStamp is '2026/12/03 05:33'"),
    ("timeStamp,elapsed,success,threadName\n1000,3,yes\x1b,t\n", ":2: field success is 'yes\\x1b'"),
    ("timeStamp,elapsed,success,threadName\n1000,3,true\n", ":2: 3 fields where the header names 4"),
])
def test_a_jtl_it_cannot_read_names_file_line_and_field(tmp_path: Path, text: str, said: str) -> None:
    p = tmp_path / "bad.jtl"
    p.write_text(text)
    with pytest.raises(jmeter.JtlError) as err:
        jmeter.read_jtl(p)
    assert str(err.value).startswith(f"{p}{said}") and "\x1b" not in str(err.value)
