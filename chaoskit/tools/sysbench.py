"""sysbench 1.0.20's per-interval report (`--report-interval=N`) and its fatal errors.

sysbench reports rates per interval, never single transactions: a figure built from it carries the
interval as its resolution, and what needs each write's fate (RPO) is not available from it.
Each report line (one line in the output):

    [ 3s ] thds: 4 tps: 1019.92 qps: 20445.35 (r/w/o: 14315.84/4071.67/2057.83)
    lat (ms,95%): 2.26 err/s: 5.00 reconn/s: 0.00

sysbench 1.0.20 does not ride through a lost connection: with MySQL it stops at the first one
("FATAL: ... error 2013"), and with `--mysql-ignore-errors` or with PostgreSQL it crashed
(SIGSEGV) on this machine. The fixtures (tests/fixtures/tools/sysbench-1.0.20-*) show each.
"""

from __future__ import annotations

import re
from typing import NamedTuple

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
