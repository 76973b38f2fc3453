"""The sysbench engine (`tool: sysbench`): sysbench 1.0.20, one sysbench for a group's threads.

## Its output

sysbench 1.0.20's per-interval report (`--report-interval=N`) and its fatal errors.

sysbench reports rates per interval, never single transactions: a figure built from it carries the
interval as its resolution, and what needs each write's fate (RPO) is not available from it.
Each report line (one line in the output):

    [ 3s ] thds: 4 tps: 1019.92 qps: 20445.35 (r/w/o: 14315.84/4071.67/2057.83)
    lat (ms,95%): 2.26 err/s: 5.00 reconn/s: 0.00

sysbench 1.0.20 does not ride through a lost connection: with MySQL it stops at the first one
("FATAL: ... error 2013"), and with `--mysql-ignore-errors` or with PostgreSQL it crashed
(SIGSEGV) on this machine. The fixtures (tests/fixtures/tools/sysbench-1.0.20-*) show each.

A drill runs one sysbench for a group's threads against the writer found at each start
(`run_argv`): sysbench takes a host list but spreads its threads over it, so it is given the
one host the load's own writer search found, and started again (at the writer found then) when
it ends. Passwords go in the environment (MYSQL_PWD, PGPASSWORD), never on a command line: its
config file cannot hold a space or a comma (a comma makes a list).

## Its group runner

A sysbench client group (`load.groups[].tool: sysbench`): one sysbench for the group's threads.

sysbench 1.0.20 reports rates, never single transactions: one line per second (`--report-interval=1`),
read here from its output as it is written (sysbench flushes each line) and stamped with the
instant it was read. Each report's transactions are counted in the interval that ends then, with
no latency (none is known per transaction), and the group's one client (the sysbench process, on
the group's first worker id) is acknowledged at that instant. So the group's outage edges and RTO
have a resolution of one report interval: the real first transaction after the outage happened
within the second before the report that counted it, never after it. RPO is not available:
sysbench does not say which writes it had acknowledged.

sysbench 1.0.20 does not survive a lost connection: with MySQL it ends at the first one (FATAL),
with `--mysql-ignore-errors` or with PostgreSQL it crashes (tests/fixtures/tools/SOURCE.md). This
runner starts it again (backoff 50 ms doubling to 250 ms while it cannot connect), each time against
the writer the load's own writer search finds then (sysbench spreads its threads over a host
list, so it is given one host). The end of a run is booked when its first FATAL line was read, or
when its exit was seen; a run that never started its threads is a failed start.

Kept under `tools/<group>/`: `sysbench.out` (everything sysbench wrote, with `== run N` lines for
each start), `reports.tsv` (each report line with the instant it was read and its run number: the
instants the group's figures rest on) and `prepare.out`.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field

from chaoskit.db.base import Driver, ErrorClass, connect_class
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.models import Frozen
from chaoskit.recorder import FAIL, INFO, Recorder
from chaoskit.workload import stamp
from chaoskit.workload.engine import LoadEngine, Measures, ToolGroupBase, group_driver
from chaoskit.workload.outcomes import connect_error_class
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import STOP_GRACE_S, run_setup, with_parent_death

_REPORT = re.compile(
    r"^\[ *(?P<t>\d+(?:\.\d+)?)s \] thds: (?P<thds>\d+) tps: (?P<tps>[\d.]+) qps: (?P<qps>[\d.]+) "
    r"\(r/w/o: (?P<r>[\d.]+)/(?P<w>[\d.]+)/(?P<o>[\d.]+)\) lat \(ms,(?P<pct>[\d.]+)%\): (?P<lat>[\d.]+) "
    r"err/s: (?P<err>[\d.]+) reconn/s: (?P<reconn>[\d.]+)\s*$")


class IntervalReport(NamedTuple):
    """One interval, ending `t_s` seconds after the threads started."""

    t_s: float
    threads: int
    tps: float
    qps: float
    reads_per_s: float
    writes_per_s: float
    other_per_s: float
    latency_pct: float  # which percentile `latency_ms` is (--percentile, 95 by default)
    latency_ms: float
    errors_per_s: float
    reconnects_per_s: float


class Report(NamedTuple):
    intervals: list[IntervalReport]
    fatal: list[str]  # sysbench's FATAL lines, as it wrote them


def parse(stdout: str) -> Report:
    intervals, fatal = [], []
    for line in stdout.splitlines():
        m = _REPORT.match(line)
        if m:
            g = m.groupdict()
            intervals.append(IntervalReport(float(g["t"]), int(g["thds"]), float(g["tps"]), float(g["qps"]),
                                             float(g["r"]), float(g["w"]), float(g["o"]), float(g["pct"]),
                                             float(g["lat"]), float(g["err"]), float(g["reconn"])))
        elif line.startswith("FATAL: "):
            fatal.append(line[len("FATAL: "):])
    return Report(intervals, fatal)


# the oltp_* tests Debian's sysbench ships (/usr/share/sysbench), and those that only read
TESTS = ("oltp_read_write", "oltp_read_only", "oltp_write_only", "oltp_point_select", "oltp_insert",
         "oltp_update_index", "oltp_update_non_index", "oltp_delete")
READ_ONLY = ("oltp_read_only", "oltp_point_select")
DRIVERS = {"mysql": "mysql", "postgres": "pgsql"}  # chaoskit's engine -> sysbench's --db-driver
PASSWORD_ENV = {"mysql": "MYSQL_PWD", "pgsql": "PGPASSWORD"}
FOREVER_S = 86_400  # --time for a drill's sysbench: it is ended at the load's stop
PERCENTILE = 99  # the latency percentile each report line gives (sysbench's default is 95)


class Settings(Frozen):
    """What a sysbench group runs (`sysbench: {...}`, a playbook's group and an experiment's load
    alike): one of sysbench's oltp_* tests on `tables` tables of `table_size` rows, made first
    (`cleanup`, then `prepare`: sysbench's old tables are dropped) unless `prepare: false`. In an
    experiment the grid's `workload` names each cell's test."""

    test: Literal[TESTS] = "oltp_read_write"  # type: ignore[valid-type]
    tables: int = Field(4, ge=1, le=1000)
    table_size: int = Field(10_000, ge=1, le=100_000_000)
    prepare: bool = True

    @property
    def writes(self) -> bool:
        return self.test not in READ_ONLY


def _common(settings: Settings, driver: str, host: str, port: int, user: str | None, db: str) -> list[str]:
    if settings.test not in TESTS:
        raise ValueError(f"unknown sysbench test {settings.test!r}")
    if driver not in PASSWORD_ENV:
        raise ValueError(f"unknown sysbench driver {driver!r}")
    for name, value in (("host", host), ("user", user or ""), ("db", db)):
        if any(c in value for c in ", \t\n\r") or value.startswith("-"):
            raise ValueError(f"sysbench cannot take {name} {value[:60]!r} (a comma makes a list)")
    argv = [settings.test, f"--db-driver={driver}", f"--{driver}-host={host}", f"--{driver}-port={int(port)}",
            f"--{driver}-db={db}", f"--tables={int(settings.tables)}", f"--table-size={int(settings.table_size)}"]
    if user:
        argv.append(f"--{driver}-user={user}")
    return argv


def run_argv(settings: Settings, driver: str, host: str, port: int, user: str | None, db: str, threads: int,
             rate: float | None = None, duration_s: int = FOREVER_S) -> list[str]:
    """One run of the group's threads, reporting every second with the 99th percentile of that
    second's latency; `--rate` for an open loop."""
    argv = ["sysbench", *_common(settings, driver, host, port, user, db), f"--threads={int(threads)}",
            f"--time={int(duration_s)}", "--report-interval=1", f"--percentile={PERCENTILE}"]
    if rate is not None:
        argv.append(f"--rate={max(1, round(rate))}")
    return [*argv, "run"]


def prepare_argvs(settings: Settings, driver: str, host: str, port: int, user: str | None, db: str
                  ) -> list[list[str]]:
    """sysbench's old tables dropped, then made and filled again."""
    common = _common(settings, driver, host, port, user, db)
    return [["sysbench", *common, "cleanup"], ["sysbench", *common, "prepare"]]


class Ending(NamedTuple):
    """How a sysbench run ended: `started` when its threads had started (a lost connection, or a
    crash), else it never connected; its FATAL words, the class of what happened, and the
    statement each thread that said so failed in (`BEGIN`, a query, `COMMIT`), in order."""

    started: bool
    message: str
    error_class: ErrorClass
    failed_in: tuple[str, ...] = ()


_FAILED_IN = re.compile(r"returned error \d+ \(.*\) for query '(.*)'$")


def may_have_committed(statement: str) -> bool:
    """A thread that lost its connection in its COMMIT may have committed; in any earlier
    statement of the transaction it did not."""
    return statement.strip().upper().startswith("COMMIT")


def ending(output: str, returncode: int, classify: Callable[[str], ErrorClass | None]) -> Ending | None:
    """None when it ended on its own (its time elapsed, or the load's stop ended it). `classify`
    reads its FATAL words by the database driver's rule (`Driver.classify_words`: MySQL's error
    numbers, libpq's words), so a failure has the name chaoskit's own clients give it."""
    report = parse(output)
    failed_in = tuple(m.group(1) for f in report.fatal if (m := _FAILED_IN.search(f)))
    started = "Threads started!" in output and not any("thread initialization failed" in f.lower()
                                                       for f in report.fatal)
    said = "; ".join(report.fatal)[:300]
    if returncode in (-11, 139):
        return Ending(started, said or "sysbench crashed (SIGSEGV) after its connection was lost",
                      ErrorClass.connection_lost, failed_in)
    if not report.fatal and returncode == 0:
        return None
    cls = classify(said) if said else None
    if not started:
        return Ending(False, said or f"sysbench exited {returncode} before its threads started", connect_class(cls))
    if cls == ErrorClass.read_only:
        return Ending(True, said, ErrorClass.read_only, failed_in)
    return Ending(True, said or f"sysbench exited {returncode}", ErrorClass.connection_lost, failed_in)


RTO_RESOLUTION_S = 1.0  # its --report-interval


def _connection(driver: Driver) -> tuple[str, str | None, str, dict[str, str]]:
    """sysbench's driver name, user, database, and the environment holding the password."""
    name = DRIVERS[driver.family]
    password = driver.password()
    env = {PASSWORD_ENV[name]: password} if password is not None else {}
    return name, driver.cluster.user, driver.cluster.database, env


@dataclass(kw_only=True)
class SysbenchGroup(ToolGroupBase):
    """The group's one sysbench, started against the writer found then, read and restarted."""

    driver: Driver

    def __post_init__(self) -> None:
        self.settings: Settings = self.group.settings or Settings()
        self.kind = "write" if self.settings.writes else "read"
        self.worker = self.group.first_worker
        self.name, self.user, self.db, self.env = _connection(self.driver)
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = open(self.raw / "sysbench.out", "ab")  # noqa: SIM115 - held for the group's life
        # each report line with the instant it was read: the instants the group's figures rest on
        self.reports = open(self.raw / "reports.tsv", "a", encoding="utf-8")  # noqa: SIM115
        self.buffer = b""
        self.runs = 0
        self.started = 0.0
        self.threads_started = False
        self.said: list[str] = []  # this run's words other than its reports (how it ends is read from them)
        self.first_fatal: float | None = None
        self.last_report_s = 0.0
        self.last_ok: float | None = None
        self.back_at: float | None = None
        self.down_since: float | None = None
        self.failed_starts = 0
        self.backoff = self.spec.backoff_min
        self.next_start = 0.0

    def _start(self, now: float) -> None:
        self.runs += 1
        self.started = now
        try:
            host, port = self.driver.writer_endpoint()
        except Exception as exc:  # no writer answered: a failed start, as a builtin client's failed connect
            cls = connect_error_class(self.driver, exc)
            said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            self.out.write(f"== run {self.runs} not started {now:.6f}: no writer found ({said})\n".encode())
            self._failed_start(now, cls.value, f"no writer found: {said}")
            return
        argv = run_argv(self.settings, self.name, host, port, self.user, self.db, self.group.workers,
                                 rate=self.rate_share)
        self.out.write(f"== run {self.runs} started {now:.6f} against {host}:{port}\n".encode())
        self.out.flush()
        self.proc = subprocess.Popen(with_parent_death(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env={**os.environ, **self.env}, cwd=self.raw)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.threads_started, self.said, self.first_fatal = False, [], None
        self.last_report_s, self.buffer, self.back_at = 0.0, b"", None

    def _failed_start(self, now: float, cls: str, message: str) -> None:
        self.recorder.record(self.worker, self.kind, self.started or now, now, FAIL, cls, message)
        self.failed_starts += 1
        self.down_since = self.down_since or now
        self.backoff = min(self.spec.backoff_max, self.backoff * 2)
        self.next_start = now + self.backoff

    def _read(self, now: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            data = self.proc.stdout.read()
        except BlockingIOError:
            data = None
        if not data:
            return
        self.out.write(data)
        self.out.flush()
        lines = (self.buffer + data).split(b"\n")
        self.buffer = lines.pop()
        for raw in lines:
            self._line(raw.decode("utf-8", "replace"), now)

    def _line(self, line: str, now: float) -> None:
        report = parse(line).intervals
        if not report:
            self.said.append(line)
            if line.startswith("Threads started!"):
                self.threads_started = True
            elif line.startswith("FATAL: ") and self.first_fatal is None:
                self.first_fatal = now
            return
        (iv,) = report
        self.reports.write(f"{now:.6f}\t{self.runs}\t{line}\n")
        self.reports.flush()
        span = iv.t_s - self.last_report_s
        self.last_report_s = iv.t_s
        done = round(iv.tps * span)
        if done <= 0:
            return
        self.recorder.record_rate(self.worker, self.kind, now, done)
        self.last_ok = now
        if self.back_at is None:
            self.back_at = now
            if self.down_since is not None:
                self.event("tool_client_back", now, self.worker, runs=self.runs, failed_starts=self.failed_starts,
                           down_s=round(now - self.down_since, 6), resolution_s=RTO_RESOLUTION_S)
                self.down_since, self.failed_starts = None, 0

    def _ended(self, now: float) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), True)
        rest = proc.stdout.read() or b""
        self.out.write(rest)
        for raw in (self.buffer + rest).split(b"\n"):
            if raw:
                self._line(raw.decode("utf-8", "replace"), now)
        self.buffer = b""
        proc.stdout.close()
        self.proc = None
        end = ending("\n".join(self.said), proc.returncode if proc.returncode is not None else 0,
                              self.driver.classify_words)
        self.out.write(f"== run {self.runs} ended {now:.6f}, exit {proc.returncode}\n".encode())
        self.out.flush()
        if self.stopping and (end is None or proc.returncode in (-15, 143)):
            return
        if end is None:
            end = Ending(self.threads_started, f"sysbench ended (exit {proc.returncode})",
                                  ErrorClass.connection_lost)
        t_end = max(self.first_fatal or now, self.last_ok or 0.0)
        if not end.started:
            self.started = min(self.started, t_end)
            self._failed_start(t_end, end.error_class.value, end.message)
            return
        # one op per thread: a thread that said it failed in its COMMIT may have committed (info),
        # in an earlier statement it did not (fail); one that said nothing (a crash) is unknown
        said = list(end.failed_in[:self.group.workers])
        lost = end.error_class == ErrorClass.connection_lost
        for i in range(self.group.workers):
            committing = may_have_committed(said[i]) if i < len(said) else True
            outcome = INFO if self.settings.writes and lost and committing else FAIL
            self.recorder.record(self.worker, self.kind, self.last_ok or self.started, t_end, outcome,
                                 end.error_class.value, f"in {said[i][:60]!r}: {end.message}" if i < len(said)
                                 else end.message)
        self.down_since = t_end
        self.backoff = self.spec.backoff_min
        self.next_start = now
        self.event("tool_client_aborted", t_end, self.worker, exit=proc.returncode, why=end.message)

    def tick(self, now: float) -> None:
        if self.proc is None:
            if not self.stopping and now >= self.next_start:
                self._start(now)
            return
        self._read(now)
        if self.proc.poll() is not None:
            self._ended(now)

    def stop(self) -> None:
        """sysbench reports as it goes: the load's stop ends it with SIGTERM (its final summary
        is not needed); one still running after the grace is killed."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self._read(stamp.now())
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._ended(stamp.now())
        self.out.close()
        self.reports.close()


class Sysbench(LoadEngine):
    name = "sysbench"
    measures = Measures(RTO_RESOLUTION_S, False, False, False)  # its per-second report: rates only
    speaks = ("postgres", "mysql")
    settings = Settings
    tests = TESTS  # an experiment's cells run its oltp_* tests

    @classmethod
    def cell_settings(cls, settings: Settings | None, test: str, prepare: bool) -> Settings:
        s = settings or Settings()
        return Settings(test=test, tables=s.tables, table_size=s.table_size, prepare=s.prepare and prepare)

    @classmethod
    def window_latency(cls, raw: Path, t_from: float, t_to: float) -> dict[str, float | None]:
        """Its per-second percentile (`--percentile`, 99 here), the median and the worst over the
        seconds whose reports were read within the window (`reports.tsv`). Not a window percentile:
        one cannot be made from per-second ones, so it has its own names."""
        values = []
        path = raw / "reports.tsv"
        for row in path.read_text().splitlines() if path.exists() else []:
            t, _, line = row.split("\t", 2)
            report = parse(line).intervals
            if report and t_from <= float(t) <= t_to and report[0].tps > 0:
                values.append(report[0].latency_ms)
        return {"tool_p99_ms_median_of_seconds": statistics.median(values) if values else None,
                "tool_p99_ms_worst_second": max(values) if values else None}

    @classmethod
    def programs(cls, settings: object) -> tuple[str, ...]:
        return ("sysbench",)

    @classmethod
    def describe(cls, group: ClientGroup, route: Cluster) -> list[str]:
        """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
        s: Settings = group.settings or Settings()
        name, host, db = DRIVERS[route.engine], "<writer>", route.database
        out = [" ".join(argv) for argv in prepare_argvs(s, name, host, 0, route.user, db)] if s.prepare else []
        out.append(" ".join(run_argv(s, name, host, 0, route.user, db, group.workers))
                   + f"   (the writer of cluster {route.name} found before each start, its port for 0; password in "
                   f"{PASSWORD_ENV[name]}; started again when it ends)")
        return out

    @classmethod
    def prepare(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
        """Before the load: sysbench's tables dropped and made again on the writer (cleanup, prepare)."""
        settings: Settings = group.settings or Settings()
        if not settings.prepare:
            return
        driver = group_driver(cluster, inventory, spec, group)
        name, user, db, env = _connection(driver)
        host, port = driver.writer_endpoint()
        commands = prepare_argvs(settings, name, host, port, user, db)
        run_setup([(f"sysbench {settings.test} {argv[-1]} against {host}:{port}", argv) for argv in commands],
                  raw / "prepare.out", env, group.name, timeout=900)

    @classmethod
    def runner(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
               recorder: Recorder, rate_share: float | None) -> SysbenchGroup:
        driver = group_driver(cluster, inventory, spec, group)
        return SysbenchGroup(group, spec, raw, recorder, rate_share, driver=driver)
