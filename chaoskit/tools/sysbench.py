"""sysbench 1.0.20's per-interval report (`--report-interval=N`) and its fatal errors.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from chaoskit.db.base import ErrorClass, connect_class

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


@dataclass(frozen=True)
class Settings:
    """A drill's sysbench group: an oltp_* test, its tables (made first with `prepare` when
    `prepare`, after `cleanup` drops sysbench's old ones)."""

    test: str = "oltp_read_write"
    tables: int = 4
    table_size: int = 10_000
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
