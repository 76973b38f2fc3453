"""A database server's clock offset against the control node, measured over SQL (NTP-style: the
server's clock read between a send and a reply; the sample with the smallest round trip wins).

Managers whose own timestamps are written by a database (pg_auto_failover's monitor event table,
repmgr.events) convert them with this, so their events land on the control clock without SSH
access to the database host."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SqlClock:
    offset_s: float  # server - control
    uncertainty_s: float

    def to_control(self, server_ts: float) -> float:
        return server_ts - self.offset_s


def measure_sql_clock(execute: Any, samples: int = 7) -> SqlClock:
    """`execute(sql)` returns rows; the server answers with its epoch seconds."""
    best: tuple[float, float, float] | None = None
    for _ in range(samples):
        t0 = time.time()
        rows = execute("SELECT extract(epoch from clock_timestamp())")
        t1 = time.time()
        server = float(rows[0][0])
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, server, (t0 + t1) / 2)
    assert best is not None
    rtt, server, mid = best
    return SqlClock(offset_s=server - mid, uncertainty_s=rtt / 2)
