"""A client group whose load pgbench makes: how its output is judged (on pgbench's own words,
tests/fixtures/tools), how its command line is built, what a playbook may ask of it, and the group
runner's restart of an aborted client, driven here by a stand-in `pgbench` on PATH whose log the
test reads back by itself."""

from __future__ import annotations

import os
import stat
import textwrap
import time
from pathlib import Path

import pytest

from chaoskit.db.mysql import class_of_words as MYSQL_WORDS
from chaoskit.db.postgres import class_of_words
from chaoskit.errors import InputError
from chaoskit.inventory.loader import load_inventory
from chaoskit.playbook.loader import load_playbook
from chaoskit.recorder import FAIL, INFO, Recorder
from chaoskit.workload.engines import pgbench
from chaoskit.workload.engines.pgbench import PgbenchGroup
from chaoskit.workload.spec import ClientGroup, LoadSpec

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
ROOT = Path(__file__).resolve().parents[2]


# -- pgbench's words --------------------------------------------------------------------------
def test_a_client_aborted_by_a_lost_connection_before_its_commit_did_not_commit() -> None:
    """The server stopped under a rate-limited tpcb-like run: client 0 aborted in command 4 (its
    BEGIN; the script's END is command 10), so that transaction never committed."""
    end = pgbench.ending((FIX / "pgbench-15-rate-server-stopped" / "stderr").read_text())
    assert end is not None and end.started and end.command == 4 and not end.refused_by_server
    assert pgbench.ending_outcome(end, "tpcb-like", True, class_of_words) == (FAIL, "connection_lost")


@pytest.mark.parametrize(("script", "writes", "command", "outcome"), [
    ("tpcb-like", True, 10, INFO),  # broken at END: the commit may have happened
    ("tpcb-like", True, 9, FAIL),  # at the INSERT before it: it did not
    ("simple-update", True, 8, INFO),
    ("simple-update", True, 7, FAIL),
    (None, True, 3, INFO),  # the user's script: where it commits is not known here
    (None, False, 3, FAIL),  # ... unless it only reads
    ("select-only", False, 1, FAIL),
])
def test_where_the_connection_broke_says_whether_the_transaction_may_have_committed(
        script: str | None, writes: bool, command: int, outcome: str) -> None:
    end = pgbench.Ending(True, command, "perhaps the backend died while processing", False)
    assert pgbench.ending_outcome(end, script, writes, class_of_words) == (outcome, "connection_lost")


def test_failed_starts_during_a_lab_failover_are_read_as_pgbench_said_them() -> None:
    """client.out from a lab drill (pg-kill-primary-pgbench): run 1 aborted in command 8 of
    tpcb-like, runs 2 and 3 found no writer (the first host answered read-only)."""
    runs = (FIX / "pgbench-15-lab-failover" / "client.out").read_text().split("== run ")[1:]
    first, *failed = [pgbench.ending(r) for r in runs]
    assert first is not None and first.started and first.command == 8
    assert pgbench.ending_outcome(first, "tpcb-like", True, class_of_words) == (FAIL, "connection_lost")
    assert len(failed) == 2
    for end in failed:
        assert end is not None and not end.started and "session is read-only" in end.message
        assert pgbench.ending_outcome(end, "tpcb-like", True, class_of_words) == (FAIL, "read_only")


@pytest.mark.parametrize(("said", "cls"), [
    ('connection to server at "127.0.0.1", port 55499 failed: Connection refused', "connect_refused"),
    ('connection to server at "10.0.0.1", port 5432 failed: timeout expired', "timeout"),
    ('connection to server at "127.0.0.1", port 55432 failed: server is not in hot standby mode', "read_only"),
])
def test_a_start_that_never_connected_failed_with_the_class_of_why(said: str, cls: str) -> None:
    end = pgbench.ending(f"pgbench: error: {said}\npgbench: error: could not create connection for setup\n")
    assert end is not None and not end.started
    assert pgbench.ending_outcome(end, "tpcb-like", True, class_of_words) == (FAIL, cls)


def test_a_statement_the_server_refused_did_not_commit() -> None:
    """pgbench against a server that sets default_transaction_read_only: the UPDATE is refused."""
    end = pgbench.ending((FIX / "pgbench-15-read-only.out").read_text())
    assert end is not None and end.refused_by_server and end.command == 5
    assert "read-only transaction" in end.message
    assert pgbench.ending_outcome(end, "tpcb-like", True, class_of_words) == (FAIL, "read_only")


def test_a_run_ended_by_its_time_is_no_failure() -> None:
    assert pgbench.ending("transaction type: <builtin: TPC-B (sort of)>\ntps = 51.060082\n") is None


# -- the command line -------------------------------------------------------------------------
def test_the_connection_string_comes_after_the_end_of_options() -> None:
    argv = pgbench.client_argv("-h evil host=x", "/run/tools/g/client-1", script="tpcb-like", rate=12.5)
    assert argv[-2:] == ["--", "-h evil host=x"]
    assert "--builtin=tpcb-like" in argv and "--rate=12.500000" in argv and "--client=1" in argv
    assert all(a.startswith("--") or a == "pgbench" for a in argv[:-1])  # every value inside its own --name=
    user = pgbench.client_argv("host=a", "/p", script_file="/x/-my script.sql")
    assert "--file=/x/-my script.sql" in user and "--builtin=tpcb-like" not in user
    with pytest.raises(ValueError):
        pgbench.client_argv("host=a", "/p", script="drop-everything")
    with pytest.raises(ValueError):
        pgbench.client_argv("host=a", "/p")


# -- what a playbook may ask ------------------------------------------------------------------
BASE = """\
name: t
cluster: pg
load:
  groups:
{groups}
steps: [{{at: 12s, fault: {{kind: kill, target: "role:primary", processes: [postgres], duration: 5s}}}}]
duration: 30s
{extra}"""


def write(tmp_path: Path, groups: str, extra: str = "") -> Path:
    p = tmp_path / "pb.yaml"
    p.write_text(BASE.format(groups=textwrap.indent(groups, "    "), extra=extra))
    return p


def test_a_pgbench_group_defaults_to_tpcb_like_with_its_tables_made() -> None:
    pb = load_playbook(ROOT / "playbooks" / "pg-kill-primary-pgbench.yaml").playbook
    spec = pb.load.to_spec()
    tool = next(g for g in spec.client_groups() if g.tool == "pgbench")
    assert tool.settings == pgbench.Settings(script="tpcb-like", scale=1, init=True, writes=True)
    assert list(tool.worker_ids) == [5, 6, 7, 8]  # after the builtin group's 1-4


def test_a_users_script_is_found_beside_the_playbook_and_not_initialised(tmp_path: Path) -> None:
    (tmp_path / "mine.sql").write_text("SELECT 1;\n")
    pb = load_playbook(write(tmp_path, "- {tool: pgbench, workers: 2, pgbench: {file: mine.sql, writes: false}}",
                             "checks: [split_brain]\n")).playbook
    (g,) = pb.load.to_spec().client_groups()
    assert g.name == "pgbench" and g.settings == pgbench.Settings(file=str(tmp_path / "mine.sql"), init=False,
                                                                 writes=False)


@pytest.mark.parametrize(("groups", "extra", "field", "words"), [
    ("- {tool: pgbench, pgbench: {file: nowhere.sql}}", "", "file", "no file 'nowhere.sql'"),
    ("- {tool: builtin, pgbench: {scale: 2}}", "", "groups", "pgbench: {...} is for a group with tool: pgbench"),
    ("- {tool: pgbench, profile: pool, validation: true}", "", "groups", "pgbench has no check on checkout"),
    ("- {tool: pgbench}", "checks: [rpo]\n", "checks", "every group here is a tool (pgbench)"),
    ("- {name: app}\n- {tool: pgbench}", "slo: {group: pgbench, rpo_max_writes: 0}\n", "slo",
     "group 'pgbench' runs pgbench"),
    ("- {tool: pgbench, pgbench: {script: tpcb-like, file: x.sql}}", "", "pgbench", "not both"),
    ("- {tool: jmeter}", "", "groups", "a jmeter group needs jmeter: {plan: my-plan.jmx}"),
    ("- {tool: joe}", "", "tool", "builtin"),
    ("- {tool: jmeter, jmeter: {plan: x.sql}}", "", "groups", "not a JMeter plan JMeter could load"),
    ("- {tool: jmeter, jmeter: {plan: steps.jmx, bin: ./x.sql}}", "", "bin", "'./x.sql' is not executable"),
    ("- {tool: jmeter, jmeter: {plan: steps.jmx, bin: no-such-jmeter}}", "", "bin", "no command 'no-such-jmeter'"),
    ("- {tool: jmeter, workers: 5, jmeter: {plan: steps.jmx}}", "", "groups",
     "workers (5) is not the plan's 6 threads"),
    ("- {tool: jmeter, jmeter: {plan: expr.jmx}}", "", "groups", "say it with workers"),
    ("- {tool: sysbench, profile: pool}", "", "groups", "sysbench keeps its connections its own way"),
    ("- {tool: pgbench, sysbench: {tables: 2}}", "", "groups", "sysbench: {...} is for a group with tool: sysbench"),
    ("- {tool: sysbench, sysbench: {test: oltp_drop}}", "", "test", "oltp_read_write"),
    ("- {tool: sysbench}", "slo: {rpo_max_writes: 0}\n", "slo", "runs sysbench"),
])
def test_what_a_tool_group_cannot_do_is_refused_with_its_field(tmp_path: Path, groups: str, extra: str, field: str,
                                                               words: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.sql").write_text("SELECT 1;\n")
    (tmp_path / "steps.jmx").write_text((ROOT / "playbooks" / "jmeter" / "jdbc-steps.jmx").read_text())
    (tmp_path / "expr.jmx").write_text((ROOT / "playbooks" / "jmeter" / "jdbc-steps.jmx").read_text().replace(
        ">2</stringProp>", ">${__P(threads)}</stringProp>", 1))
    stand_in(tmp_path, monkeypatch, "jmeter", "#!/bin/sh\n")
    with pytest.raises(InputError) as err:
        load_playbook(write(tmp_path, groups, extra))
    assert field in str(err.value) and words in str(err.value), str(err.value)
    assert str(err.value).startswith(str(tmp_path / "pb.yaml")) and ":" in str(err.value)


def test_pgbench_on_a_mysql_cluster_is_refused(tmp_path: Path) -> None:
    inv = load_inventory(ROOT / "inventories" / "lab.yaml")
    p = write(tmp_path, "- {tool: pgbench}", "checks: [split_brain]\n")
    p.write_text(p.read_text().replace("cluster: pg", "cluster: mariadb"))
    with pytest.raises(InputError) as err:
        load_playbook(tmp_path / "pb.yaml", inv)
    assert "pgbench drives postgres only; cluster mariadb is mysql" in str(err.value)
    assert ":5: load.groups[0].tool:" in str(err.value), str(err.value)  # the line of the group


def test_with_tools_only_the_default_checks_are_the_clusters() -> None:
    """No builtin group writes the workload's keys: the checks that read them are not run by default."""
    from chaoskit.playbook.models import Playbook

    pb = Playbook.model_validate({"name": "t", "cluster": "pg", "duration": "30s", "load": {"groups": [
        {"tool": "pgbench"}]}, "steps": [{"at": "12s", "fault": {"kind": "kill", "target": "role:primary",
                                                                  "processes": ["postgres"], "duration": "5s"}}]})
    assert pb.checks == ("split_brain",)


# -- the group runner, with a stand-in pgbench --------------------------------------------------
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str, script: str) -> None:
    """`script` as the tool's executable, first on PATH (the group runner finds its tool there)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / tool
    fake.write_text(script)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


FAKE = r'''#!/usr/bin/env python3
"""Stands in for pgbench: run N of each worker does what plan/<worker> line N says."""
import os, signal, sys, time
prefix = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--log-prefix="))
worker = prefix.rsplit("-", 1)[1]
runs = prefix + ".runs"
n = (int(open(runs).read()) if os.path.exists(runs) else 0) + 1
open(runs, "w").write(str(n))
plan = open(os.path.join(os.path.dirname(prefix), "plan", worker)).read().split()
what = plan[min(n, len(plan)) - 1]
if what == "refused":
    print('pgbench: error: connection to server at "127.0.0.1", port 9 failed: Connection refused', file=sys.stderr)
    print("pgbench: error: could not create connection for setup", file=sys.stderr)
    sys.exit(1)
stop = []
signal.signal(signal.SIGALRM, lambda *a: stop.append(1))
log = open(f"{prefix}.{os.getpid()}", "w")
def tx(i):
    time.sleep(0.01)
    t = time.time()
    log.write(f"0 {i} 5000 0 {int(t)} {int(round((t - int(t)) * 1e6)) % 1000000}\n")
if what.startswith("abort"):
    for i in range(int(what[5:])):
        tx(i)
    log.close()
    print("pgbench: error: client 0 aborted in command 10 (SQL) of script 0; perhaps the backend died", file=sys.stderr)
    sys.exit(2)
i = 0
while not stop:
    tx(i)
    i += 1
log.close()
'''


def test_an_aborted_client_is_started_again_and_its_outage_is_one_gap(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, monkeypatch, "pgbench", FAKE)
    raw = tmp_path / "raw"
    (raw / "plan").mkdir(parents=True)
    (raw / "plan" / "1").write_text("abort3 refused refused run")  # worker 1: aborted, 2 failed starts, back
    (raw / "plan" / "2").write_text("run")  # worker 2: runs throughout
    group = ClientGroup("pgbench", workers=2, tool="pgbench", settings=pgbench.Settings())
    spec = LoadSpec(workload="ledger", workers=2, groups=(group,))
    rec = Recorder(time.time())
    runner = PgbenchGroup(group, spec, raw, rec, conninfo="host=127.0.0.1", env={})
    deadline = time.time() + 30
    while time.time() < deadline:
        runner.tick(time.time())
        if any(e["kind"] == "tool_client_back" for e in runner.events):
            break
        time.sleep(0.02)
    time.sleep(0.3)
    runner.tick(time.time())
    runner.stop()
    rec.finish()

    def logged(worker: int) -> list[list[float]]:
        """Every transaction end the stand-in logged for a worker, per run, in order of runs."""
        files = sorted(raw.glob(f"client-{worker}.[0-9]*"), key=lambda p: p.stat().st_mtime)
        return [[int(f[4]) + int(f[5]) / 1e6 for f in (line.split() for line in p.read_text().splitlines())]
                for p in files]

    first, *later = logged(1)
    assert len(first) == 3 and later and later[-1]  # runs 2 and 3 logged nothing: no file left
    assert len(later) == 1 and (raw / "client-1.runs").read_text() == "4"
    gaps = [g for g in rec.gaps if g.worker == 1]
    assert len(gaps) == 1
    (gap,) = gaps
    assert gap.last_ok_before == pytest.approx(first[-1], abs=1e-6)
    assert gap.first_err_class == "connection_lost" and gap.errors == 3  # the abort and 2 failed starts
    assert gap.first_ok_after == pytest.approx(later[-1][0], abs=1e-6)
    assert not [g for g in rec.gaps if g.worker == 2]
    kinds = [(e["kind"], e["worker"]) for e in runner.events]
    assert kinds == [("tool_client_aborted", 1), ("tool_client_back", 1)]
    back = runner.events[1]
    assert back["failed_starts"] == 2 and back["runs"] == 4
    assert back["down_s"] == pytest.approx(later[-1][0] - runner.events[0]["t"], abs=1e-6)
    errors = [(e[1], e[3], e[4]) for e in rec.errors]
    assert errors == [(1, INFO, "connection_lost"), (1, FAIL, "connect_refused"), (1, FAIL, "connect_refused")]
    totals = rec.totals()
    assert totals["ok"] == sum(len(r) for w in (1, 2) for r in logged(w))  # every logged line is one op
    assert totals["fail"] == 2 and totals["info"] == 1


def test_the_abort_is_never_booked_before_the_last_transaction_logged(tmp_path: Path) -> None:
    """The kernel stamps a file's mtime from its coarse clock, up to a tick early: a client whose
    last transaction ended 4 ms after its output file's mtime had its abort booked before that
    transaction on the lab. And the runner's tick takes its `now` before it reaches each client:
    a second lab run booked an abort 1.7 ms before the last transaction that way. The abort is
    booked at the later of mtime and the last transaction, whatever `now` the tick passes."""
    import subprocess

    from chaoskit.workload.engines.pgbench import _Client

    group = ClientGroup("pgbench", workers=1, tool="pgbench", settings=pgbench.Settings())
    rec = Recorder(time.time())
    runner = PgbenchGroup(group, LoadSpec(workload="ledger", workers=1, groups=(group,)), tmp_path, rec,
                          conninfo="host=a", env={})
    sec, us = int(time.time()) - 10, 123456
    t_last = sec + us / 1e6
    proc = subprocess.Popen(["true"])
    proc.wait()
    (tmp_path / f"client-1.{proc.pid}").write_text(f"0 7 5000 0 {sec} {us}\n")
    out = tmp_path / "client-1.out"
    out.write_text("pgbench: error: client 0 aborted in command 4 (SQL) of script 0; perhaps the backend died\n")
    os.utime(out, (t_last - 0.004, t_last - 0.004))
    client = _Client(1, proc=proc, started=t_last - 5, log=tmp_path / f"client-1.{proc.pid}")
    runner._ended(client, t_last - 0.002)  # a tick that began before the last transaction ended
    rec.finish()
    (gap,) = rec.gaps
    assert gap.last_ok_before == pytest.approx(t_last, abs=1e-6)
    assert gap.first_err == pytest.approx(t_last, abs=1e-6) and gap.first_err_class == "connection_lost"


def test_a_tick_books_a_bounded_piece_of_a_log_and_the_end_reads_the_rest(tmp_path: Path) -> None:
    """A reader behind a fast pgbench (select-only on the lab: ~50k transactions a second, 8 clients)
    once parsed whole backlogs in one tick, so the load's stop was seen 25 s late while pgbench ran
    on, and the load runner gave up on the group before it shipped: a ladder cell read 0 TPS. A tick
    now books at most READ_PER_TICK bytes of a log (a line cut at the boundary waits for its rest),
    and the client's end reads the rest in pieces, beating between them (tool_main ships then, so
    the load runner hears from a busy group): every transaction is booked once, in its interval."""
    import subprocess

    from chaoskit.workload.engines.pgbench import READ_PER_TICK, _Client

    group = ClientGroup("pgbench", workers=1, tool="pgbench", settings=pgbench.Settings(script="select-only"))
    base = float(int(time.time()) - 100)
    rec = Recorder(base)
    runner = PgbenchGroup(group, LoadSpec(workload="ledger", workers=1, groups=(group,)), tmp_path, rec,
                          conninfo="host=a", env={})
    proc = subprocess.Popen(["true"])
    proc.wait()
    log = tmp_path / f"client-1.{proc.pid}"
    n = 3 * READ_PER_TICK // 20 + 7  # lines of 25-27 bytes: more than three pieces' worth
    log.write_text("".join(f"0 {i} 90 0 {int(base) + 1 + i // 10000} {i % 10000 * 100:06d}\n" for i in range(n)))
    (tmp_path / "client-1.out").write_text("")
    client = _Client(1, proc=proc, started=base, log=log)
    assert runner._read_log(client) is True and 0 < client.logged < n and client.read_to == READ_PER_TICK
    assert runner._read_log(client) is True and client.read_to == 2 * READ_PER_TICK
    beats: list[float] = []
    runner.heartbeat = lambda: beats.append(time.time())  # tool_main ships a batch on each
    runner._ended(client, time.time())  # its process ended: the rest of the log, piece by piece
    rec.finish()
    assert client.logged == n and client.read_to == log.stat().st_size and rec.totals()["ok"] == n
    # a beat after each full piece (more may follow), none after the short last one
    assert len(beats) == (log.stat().st_size - 2 * READ_PER_TICK) // READ_PER_TICK >= 1


def test_the_load_runner_waits_for_a_group_still_shipping_and_says_when_one_went_silent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the stop, a process that keeps sending batches is waited for however long it takes; one
    silent for op_timeout + 15 s is given up, and `undelivered` and an event say that what it had
    not sent is missing."""
    from chaoskit.workload import runner as runner_mod
    from chaoskit.workload.source import Watermarks

    events: list[dict] = []
    lr = runner_mod.LoadRunner.__new__(runner_mod.LoadRunner)
    lr.spec = LoadSpec(workload="ledger", workers=1, op_timeout=1.0)
    from types import SimpleNamespace

    from chaoskit.recorder import Recorder

    lr.sources, lr._marks, lr.undelivered, lr.on_event = ([SimpleNamespace(name="s", workers=(1,))],  # type: ignore[list-item]
                                                          Watermarks(["s"], 1000.0), None, events.append)
    lr.recorder, lr._told_unheard = Recorder(1000.0), set()
    clock = [1000.0]
    monkeypatch.setattr(runner_mod.time, "time", lambda: clock[0])
    sends = iter(range(30))  # 30 s of a batch a second, then the final one

    class Collector:
        def is_alive(self) -> bool:
            return lr._marks.finals() == 0

        def join(self, timeout: float) -> None:
            clock[0] += timeout
            if next(sends, None) is None:
                lr._marks.delivered("s", 1 << 62, clock[0], final=True)
            else:
                lr._last_batch = clock[0]

    lr._collector, lr._last_batch = Collector(), 0.0  # type: ignore[assignment]
    lr._await_finals()
    assert lr._marks.finals() == 1 and lr.undelivered is None and not events and clock[0] == 1031.0

    class Silent(Collector):
        def join(self, timeout: float) -> None:
            clock[0] += timeout

    lr._collector, lr._marks = Silent(), Watermarks(["s"], clock[0])  # type: ignore[assignment]
    start = clock[0]
    lr._await_finals()
    assert clock[0] - start == 17.0 and lr.undelivered is not None and "sent no results for 16 s" in lr.undelivered
    assert lr.undelivered.startswith("1 load source(s)")
    assert [e["kind"] for e in events] == ["load_undelivered"]
    # what its worker had not sent is unknown to the RPO check, from its first key on
    assert lr.recorder.undelivered_why == ["s: given up 16 s after the load's stop"]
    assert lr.recorder.ledger_undelivered().ranges(1) == [(1, (1 << 62) - 1)]


# -- sysbench ---------------------------------------------------------------------------------
def sysbench_output(name: str) -> str:
    d = FIX / name
    return (d / "stdout").read_text() + (d / "stderr").read_text()


def test_sysbench_ending_at_a_lost_connection_names_where_each_thread_was() -> None:
    from chaoskit.workload.engines import sysbench

    end = sysbench.ending(sysbench_output("sysbench-1.0.20-mysql-server-killed"), 1, MYSQL_WORDS)
    assert end is not None and end.started and end.error_class == "connection_lost"
    # its four threads, in the order they said so (stdout of the fixture)
    assert end.failed_in == ("UPDATE sbtest1 SET k=k+1 WHERE id=?", "BEGIN",
                             "SELECT DISTINCT c FROM sbtest2 WHERE id BETWEEN ? AND ? ORDER BY c",
                             "SELECT c FROM sbtest1 WHERE id=?")
    assert not any(sysbench.may_have_committed(q) for q in end.failed_in)
    assert sysbench.may_have_committed("COMMIT") and not sysbench.may_have_committed("BEGIN")


@pytest.mark.parametrize("name", ["sysbench-1.0.20-pgsql-server-stopped", "sysbench-1.0.20-mysql-ignore-errors"])
def test_sysbench_crashing_after_the_lost_connection_ended_a_started_run(name: str) -> None:
    from chaoskit.workload.engines import sysbench

    end = sysbench.ending(sysbench_output(name), -11, MYSQL_WORDS)
    assert end is not None and end.started and end.error_class == "connection_lost" and "SIGSEGV" in end.message


def test_sysbench_that_never_connected_is_a_failed_start() -> None:
    from chaoskit.workload.engines import sysbench

    said = ("Initializing worker threads...\n\nFATAL: unable to connect to MySQL server on host '127.0.0.1', port "
            "53306, aborting...\nFATAL: error 2002: Can't connect to server on '127.0.0.1' (115)\n"
            "FATAL: `thread_init' function failed: /usr/share/sysbench/oltp_common.lua:349: connection creation "
            "failed\nFATAL: Thread initialization failed!\n")
    end = sysbench.ending(said, 1, MYSQL_WORDS)
    assert end is not None and not end.started and end.error_class == "connect_refused"
    assert sysbench.ending("Threads started!\n[ 1s ] thds: 1 tps: 1.00 qps: 1.00 (r/w/o: 1.00/0.00/0.00) lat "
                           "(ms,95%): 1.00 err/s: 0.00 reconn/s: 0.00\n", 0, MYSQL_WORDS) is None


@pytest.mark.parametrize(("said", "classify", "started", "cls"), [
    ("Threads started!\nFATAL: mysql_stmt_execute() returned error 1290 (The MariaDB server is running with the "
     "--read-only option so it cannot execute this statement) for query 'COMMIT'\n", MYSQL_WORDS, True, "read_only"),
    ("FATAL: Connection to database failed: connection to server at \"10.77.0.12\", port 5432 failed: session is "
     "read-only\nFATAL: Thread initialization failed!\n", class_of_words, False, "read_only"),
    ("FATAL: unable to connect to MySQL server on host '10.0.0.1', port 3306, aborting...\nFATAL: error 2003: "
     "Can't connect to MySQL server on '10.0.0.1' (110 \"Connection timed out\")\n", MYSQL_WORDS, False, "timeout"),
])
def test_sysbench_failures_are_named_by_the_drivers_rule(said: str, classify: object, started: bool,
                                                         cls: str) -> None:
    """The same words chaoskit's own clients would meet as an exception get the same class."""
    from chaoskit.workload.engines import sysbench

    end = sysbench.ending(said, 1, classify)  # type: ignore[arg-type]
    assert end is not None and end.started is started and end.error_class == cls


def test_sysbench_command_lines_carry_no_password_and_no_list() -> None:
    from chaoskit.workload.engines import sysbench

    s = sysbench.Settings(test="oltp_read_write", tables=2, table_size=1000, prepare=True)
    argv = sysbench.run_argv(s, "mysql", "10.0.0.1", 3306, "app", "shop", 4, rate=10.4)
    assert argv[:3] == ["sysbench", "oltp_read_write", "--db-driver=mysql"] and argv[-1] == "run"
    assert "--mysql-host=10.0.0.1" in argv and "--threads=4" in argv and "--rate=10" in argv
    assert not any("password" in a for a in argv)
    assert [a[-1] for a in sysbench.prepare_argvs(s, "pgsql", "h", 5432, None, "db")] == ["cleanup", "prepare"]
    with pytest.raises(ValueError, match="a comma makes a list"):
        sysbench.run_argv(s, "mysql", "10.0.0.1,10.0.0.2", 3306, "app", "shop", 4)
    with pytest.raises(ValueError):  # the model refuses it, and the command line's builder again
        sysbench.Settings(test="drop_all")
    with pytest.raises(ValueError):
        sysbench.run_argv(sysbench.Settings.model_construct(test="drop_all"), "mysql", "h", 1, None, "d", 1)


def test_a_rate_report_closes_a_gap_at_the_instant_it_was_read() -> None:
    rec = Recorder(0.0)
    rec.record(7, "write", 10.0, 10.5, INFO, "connection_lost", "lost")
    rec.record_rate(7, "write", 12.25, 300)
    rec.record_rate(7, "write", 13.25, 0)  # nothing done: no acknowledgement
    rec.finish()
    (gap,) = rec.gaps
    assert (gap.first_err, gap.first_ok_after, gap.errors) == (10.5, 12.25, 1)
    totals = rec.totals()
    assert (totals["ok"], totals["write_ok"], totals["info"]) == (300, 300, 1)
    assert rec.latency_hist().get_total_count() == 0  # no latency is known for rate-only ops


FAKE_SYSBENCH = r'''#!/usr/bin/env python3
"""Stands in for sysbench 1.0.20: run 1 reports three seconds and loses its connection, the next
reports until SIGTERM."""
import os, signal, sys, time
runs = os.path.join(os.getcwd(), "runs")
n = (int(open(runs).read()) if os.path.exists(runs) else 0) + 1
open(runs, "w").write(str(n))
def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
say("Threads started!")
def report(i):
    time.sleep(0.1)
    say(f"[ {i}s ] thds: 3 tps: 100.00 qps: 1.00 (r/w/o: 1.00/1.00/1.00) lat (ms,95%): 1.00 err/s: 0.00 "
        "reconn/s: 0.00")
if n == 1:
    for i in (1, 2, 3):
        report(i)
    say("FATAL: mysql_stmt_execute() returned error 2013 (Lost connection to server during query) for query 'COMMIT'")
    say("FATAL: `thread_run' function failed: x.lua:1: SQL error")
    say("FATAL: mysql_stmt_execute() returned error 2013 (Lost connection to server during query) for query 'BEGIN'")
    sys.exit(1)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
i = 1
while True:
    report(i)
    i += 1
'''


class _Writers:
    """The writer search a sysbench group asks before each start: answers in turn."""

    family = "mysql"

    def __init__(self, answers: list) -> None:
        from types import SimpleNamespace

        self.answers = answers
        self.cluster = SimpleNamespace(user="app", database="shop")

    def password(self) -> str:
        return "s3cret"

    def writer_endpoint(self) -> tuple[str, int]:
        got = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(got, BaseException):
            raise got
        return got

    def classify(self, exc: BaseException) -> str:
        from chaoskit.db.base import ErrorClass

        return ErrorClass.read_only

    def classify_words(self, text: str) -> str | None:
        return MYSQL_WORDS(text)


def test_sysbench_is_started_again_at_the_writer_found_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.workload.engines import sysbench
    from chaoskit.workload.engines.sysbench import SysbenchGroup

    stand_in(tmp_path, monkeypatch, "sysbench", FAKE_SYSBENCH)
    group = ClientGroup("sb", workers=3, first_worker=5, tool="sysbench", settings=sysbench.Settings())
    spec = LoadSpec(workload="ledger", workers=3, groups=(group,))
    rec = Recorder(time.time())
    writers = _Writers([("10.0.0.1", 3306), OSError("10.0.0.2:3306 is read-only"), ("10.0.0.2", 3306)])
    runner = SysbenchGroup(group, spec, tmp_path, rec, driver=writers)  # type: ignore[arg-type]
    deadline = time.time() + 30
    while time.time() < deadline and not any(e["kind"] == "tool_client_back" for e in runner.events):
        runner.tick(time.time())
        time.sleep(0.02)
    runner.stop()
    rec.finish()
    reads = [(float(t), int(n), line) for t, n, line in
             (row.split("\t", 2) for row in (tmp_path / "reports.tsv").read_text().splitlines())]
    first_run = [t for t, n, _ in reads if n == 1]
    later = [t for t, n, _ in reads if n > 1]
    assert len(first_run) == 3 and later
    (gap,) = rec.gaps
    assert gap.worker == 5 and gap.last_ok_before == pytest.approx(first_run[-1], abs=1e-6)
    assert gap.first_ok_after == pytest.approx(later[0], abs=1e-6)
    outcomes = [(e[1], e[3], e[4]) for e in rec.errors]
    # the thread in its COMMIT may have committed, the one in BEGIN did not, the silent one is unknown;
    # then the start that found only a read-only member
    assert outcomes == [(5, INFO, "connection_lost"), (5, FAIL, "connection_lost"), (5, INFO, "connection_lost"),
                        (5, FAIL, "read_only")]
    assert rec.totals()["ok"] == 100 + 100 + 100 + sum(100 for _ in later)  # 100 x each report's one second
    said = (tmp_path / "sysbench.out").read_text()
    assert "== run 1 started" in said and "against 10.0.0.1:3306" in said
    assert "== run 2 not started" in said and "== run 3 started" in said and "against 10.0.0.2:3306" in said
    assert [e["kind"] for e in runner.events] == ["tool_client_aborted", "tool_client_back"]
    assert runner.events[1]["failed_starts"] == 1


def test_validate_shows_what_each_tool_group_will_run_here() -> None:
    """`chaoskit validate` lists a tool group's command lines, as it lists the inventory's shell commands."""
    import subprocess
    import sys

    def validate(name: str) -> str:
        res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", f"playbooks/{name}.yaml", "-i",
                              "inventories/lab.yaml"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert res.returncode == 0, res.stderr
        return res.stdout

    said = validate("pg-kill-primary-pgbench")
    assert "load group pgbench runs pgbench on this machine:" in said
    assert "pgbench --initialize --scale=1 --quiet -- <writer of cluster pg" in said
    assert "--builtin=tpcb-like -- <writer of cluster pg" in said and "(x4, one per client" in said
    said = validate("mha-kill-primary-sysbench")
    assert "sysbench oltp_read_write --db-driver=mysql --mysql-host=<writer>" in said
    assert said.count("cleanup") == 1 and "--threads=4 --time=86400 --report-interval=1 --percentile=99 run" in said
    assert "password in MYSQL_PWD" in said and "--mysql-password" not in said
    said = validate("pg-kill-primary-jmeter")
    assert "load group jmeter runs jmeter on this machine:" in said
    assert "playbooks/jmeter/jmeter-2.13-debian -n -t " in said and "-q /dev/fd/<pipe>" in said
    assert "the plan's 6 threads, run once for the whole load" in said


# -- experiments whose load sysbench makes (seed 002's ladder) ---------------------------------
def test_a_sysbench_ladder_names_sysbench_tests_and_each_cell_is_one_sysbench_group() -> None:
    import yaml

    from chaoskit.drill.experiment import cell_load
    from chaoskit.playbook.experiment import Experiment
    from chaoskit.workload.engines import sysbench

    exp = Experiment.model_validate(yaml.safe_load((ROOT / "playbooks" / "mariadb-sysbench-ladder.yaml").read_text()))
    assert exp.load is not None and exp.grid.workload == ("oltp_read_write", "oltp_read_only", "oltp_write_only")
    spec = cell_load("oltp_read_only", 64, 5.0, 1000, exp.load, prepare=False)
    (group,) = spec.client_groups()
    assert group.tool == "sysbench" and group.workers == 64
    assert group.settings == sysbench.Settings(test="oltp_read_only", tables=4, table_size=100_000, prepare=False)
    assert cell_load("oltp_read_only", 8, 5.0, 1000, exp.load, prepare=True).groups[0].settings.prepare
    builtin = cell_load("oltp", 8, 5.0, 1000, None, prepare=True)
    assert builtin.workload == "oltp" and builtin.groups == ()
    # with a tool, the grid may also name chaoskit's own workloads: those cells run chaoskit's clients
    mixed = Experiment.model_validate({**exp.model_dump(), "grid": {"workers": [8], "workload": ["oltp"]}})
    assert cell_load("oltp", 8, 5.0, 1000, mixed.load, prepare=True).groups == ()
    with pytest.raises(ValueError, match="not one of the workloads or sysbench tests"):
        Experiment.model_validate({**exp.model_dump(), "grid": {"workers": [8], "workload": ["oltp_all"]}})
    with pytest.raises(ValueError, match="not one of the workloads"):
        Experiment.model_validate({**exp.model_dump(), "load": None,
                                   "grid": {"workers": [8], "workload": ["oltp_read_only"]}})


def test_a_pgbench_ladder_names_pgbench_scripts_and_its_tables_are_made_once() -> None:
    """pgbench-thread-ladder: each cell is one pgbench group of `workers` clients running the cell's
    builtin script; select-only does not write; the two scripts share pgbench's tables, so they
    are made once per target; a sysbench test is not one of pgbench's."""
    import yaml

    from chaoskit.drill.experiment import cell_load, tables_of
    from chaoskit.playbook.experiment import Experiment

    exp = Experiment.model_validate(yaml.safe_load((ROOT / "playbooks" / "pgbench-thread-ladder.yaml").read_text()))
    assert exp.load is not None and exp.load.tool == "pgbench" and exp.grid.workload == ("tpcb-like", "select-only")
    (group,) = cell_load("select-only", 16, 5.0, 1000, exp.load, prepare=False).client_groups()
    assert group.tool == "pgbench" and group.workers == 16
    assert group.settings == pgbench.Settings(script="select-only", scale=10, init=False, writes=False)
    assert cell_load("tpcb-like", 4, 5.0, 1000, exp.load, prepare=True).groups[0].settings == pgbench.Settings(
        script="tpcb-like", scale=10, init=True, writes=True)
    assert tables_of("tpcb-like", exp.load) == tables_of("select-only", exp.load) != tables_of("update", exp.load)
    with pytest.raises(ValueError, match="not one of the workloads or pgbench tests"):
        Experiment.model_validate({**exp.model_dump(), "grid": {"workers": [8], "workload": ["oltp_read_only"]}})


def test_the_tools_latency_is_its_per_second_p99_over_the_measured_window(tmp_path: Path) -> None:
    """reports.tsv lines read at 100.5 .. 104.5; the window [101, 104] holds the three read at
    101.5, 102.5, 103.5 (p99 3.0, 9.0, 4.0 ms): median 4.0, worst 9.0; a second with no
    transaction (tps 0) says nothing of latency."""
    from chaoskit.workload.engines import sysbench

    tool_latency = sysbench.Sysbench.window_latency

    line = ("[ {s}s ] thds: 8 tps: {tps} qps: 1.00 (r/w/o: 1.00/0.00/0.00) lat (ms,99%): {lat} err/s: 0.00 "
            "reconn/s: 0.00")
    rows = [(100.5, 1, "500.00", "50.00"), (101.5, 2, "500.00", "3.00"), (102.5, 3, "0.00", "0.00"),
            (102.6, 3, "500.00", "9.00"), (103.5, 4, "500.00", "4.00"), (104.5, 5, "500.00", "70.00")]
    (tmp_path / "reports.tsv").write_text("".join(f"{t}\t1\t{line.format(s=s, tps=tps, lat=lat)}\n"
                                                  for t, s, tps, lat in rows))
    assert tool_latency(tmp_path, 101.0, 104.0) == {"tool_p99_ms_median_of_seconds": 4.0,
                                                    "tool_p99_ms_worst_second": 9.0}
    assert tool_latency(tmp_path / "none", 0, 1) == {"tool_p99_ms_median_of_seconds": None,
                                                     "tool_p99_ms_worst_second": None}


def test_the_knee_reads_the_tools_latency_where_no_op_latency_is_known() -> None:
    """TPS 1000 -> 1050 (+5 %, flat) while the tool's p99 grows 2 -> 8 ms: saturated at 8 workers;
    the same TPS with the tool's p99 falling is no knee."""
    from chaoskit.analysis.knee import find_knee

    def steps(lat: tuple[float, float]) -> list[dict]:
        return [{"workers": 8, "tps": 1000.0, "p99_ms": None, "tool_p99_ms_median_of_seconds": lat[0]},
                {"workers": 16, "tps": 1050.0, "p99_ms": None, "tool_p99_ms_median_of_seconds": lat[1]}]

    assert find_knee(steps((2.0, 8.0)))["recommended_workers"] == 8
    assert find_knee(steps((8.0, 2.0)))["recommended_workers"] is None


# -- is the client the bottleneck? --------------------------------------------------------------
def test_a_load_process_busy_on_one_core_is_saturated_and_an_idle_one_is_not() -> None:
    """Two real processes in one window: one spinning until its own CPU clock has moved 0.3 s, one
    asleep. The window counts at least the spinner's own 0.3 s (the kernel's accounts are in ticks of
    10 ms: 0.02 s of slack), never more than one core over the window, and about nothing for the
    sleeper, however busy the machine is (a shared machine stretches the window, not the counts).
    Then the rule on given figures."""
    import subprocess
    import sys

    from chaoskit.workload.client_cpu import CpuWindow

    spin = ("import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n"
            "p0 = time.process_time()\nwhile time.process_time() - p0 < 0.3: pass\n"
            "print('done', flush=True)\ntime.sleep(30)\n")
    sleep = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
    busy = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", sleep], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and idle.stdout is not None and busy.stdin is not None
        assert busy.stdout.readline() == "ready\n" and idle.stdout.readline() == "ready\n"
        window = CpuWindow([busy.pid, idle.pid], one_core={busy.pid, idle.pid})
        window.begin()
        busy.stdin.write("go\n")
        busy.stdin.flush()
        assert busy.stdout.readline() == "done\n"
        used = window.end()
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    spun = used.per_process[busy.pid] * used.seconds
    assert 0.3 - 0.02 <= spun <= used.seconds + 0.02, used
    assert used.per_process[idle.pid] * used.seconds <= 0.02, used
    # the rule on the measured figures: a one-core process at >= 0.9 is the limit
    from chaoskit.workload.client_cpu import ClientCpu

    assert ClientCpu(1.5, {1: 0.95, 2: 0.1}, 8, frozenset({1, 2})).saturated_why.startswith("a load process used 95%")
    assert ClientCpu(1.5, {1: 0.85, 2: 0.1}, 8, frozenset({1, 2})).saturated_why is None
    # a tool's process (sysbench: threads over cores) counts in the total only
    assert ClientCpu(1.5, {1: 1.6}, 8, frozenset()).saturated_why is None
    assert "control node's 2 cores" in ClientCpu(1.5, {1: 1.2, 2: 0.7}, 2, frozenset()).saturated_why


def test_a_client_bound_cell_is_marked_and_the_knee_ignores_it() -> None:
    """Repeats of 64 workers: one client-bound, so the cell is; the ladder 8 -> 16 -> 64 with TPS
    1000 -> 1500 -> 1520 would saturate at 16 (1520 is +0.7 % per doubling) with 64 counted; without
    it, 8 -> 16 (+50 %) is no knee within the ramp."""
    from chaoskit.drill.experiment import ladder_knees, summarise

    def row(workers: int, tps: float, p99: float, why: str | None = None) -> dict:
        return {"workload": "w", "workers": workers, "delay_ms": 0.0, "tps": tps, "p50_ms": 1.0, "p99_ms": p99,
                "p999_ms": p99, "error_rate": 0.0, "proxy_added_p50_ms": None, "proxy_added_p99_ms": None,
                "client_cpu_cores": 0.95 if why else 0.4, "client_saturated": why is not None,
                "client_saturated_why": why}

    rows = [row(8, 1000, 2.0), row(16, 1500, 3.0), row(64, 1510, 9.0), row(64, 1530, 9.0, "a load process used 97%")]
    cells = summarise(rows, ("workload", "workers", "delay_ms"))
    by = {c["workers"]: c for c in cells}
    assert by[64]["client_saturated"] and by[64]["client_saturated_why"] == "a load process used 97%"
    assert not by[8]["client_saturated"] and by[64]["client_cpu_cores"] == pytest.approx(0.675)
    knee = ladder_knees(cells, ("w",), 0.0)["w"]
    assert knee["recommended_workers"] is None and knee["shape"].startswith("monotone")
    assert knee["ignored_client_saturated"] == [{"workers": 64, "why": "a load process used 97%"}]
    for c in cells:
        c["client_saturated"] = False
    assert ladder_knees(cells, ("w",), 0.0)["w"]["recommended_workers"] == 16
