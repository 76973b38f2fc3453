"""The load generator's own CPU: is the client the bottleneck? (seed 002's rule: "the load client
must not be the bottleneck"; on this 2-core machine chaoskit's MySQL loader reached 0.42x of
sysbench at 64 connections, so on a thread ladder it can measure itself, not the server).

A load runs in worker processes (chaoskit's own clients) or tool processes (a tool group's driver
and the tools it starts: pgbench, sysbench). Their CPU over a window is read from the kernel's
accounts of each process (psutil): its own user + system time, that of its children it has
reaped (a pgbench that ended and was started again), and that of the descendants still running.

A window's generator is **saturated** when one of chaoskit's own worker processes used at least
`BUSY` of a core (an event loop, or threads behind one interpreter lock: it cannot go faster, so the
server was not the limit), or all of the load's processes together used at least `BUSY` of every
core of the control node (the machine the load runs on was full). A tool's processes count in the
total only: sysbench's threads spread over cores.

An open-loop load is also the client's when it **could not keep its own schedule**: more than
`LATE_SHARE` of its arrivals were started more than DISPATCH_LATE_S (10 ms) after both their
scheduled instant and a free connection (`Recorder.dispatched`: a lag nothing outside the client
caused, e.g. its process starved of CPU by the database sharing its machine), i.e. the p99 of its
own dispatch lag was above 10 ms. A closed loop has no schedule: its CPU is the only sign.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import psutil

from chaoskit.recorder import DISPATCH_LATE_S

BUSY = 0.9  # of a core (one process), or of every core (all together)
LATE_SHARE = 0.01  # of an open loop's arrivals started late by the client itself
MIN_DISPATCHED = 100  # fewer arrivals say nothing of a share


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by a process, its reaped children and its live descendants; 0.0
    for a process that is gone."""
    try:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                continue
        return total
    except psutil.Error:
        return 0.0


@dataclass(frozen=True)
class ClientCpu:
    """The generator's CPU over one window: per process (cores used, 1.0 = one core busy for the
    whole window), which of them are bound to one core (chaoskit's own worker processes), the
    control node's cores, and whether it was saturated and why."""

    seconds: float
    per_process: dict[int, float]
    cores: int
    one_core: frozenset[int] = frozenset()
    dispatched: int = 0  # open loop: arrivals started in the window (Recorder columns)
    dispatched_late: int = 0

    @property
    def late_share(self) -> float | None:
        return self.dispatched_late / self.dispatched if self.dispatched else None

    @property
    def total_cores(self) -> float:
        return sum(self.per_process.values())

    @property
    def busiest(self) -> float:
        """The busiest process bound to one core (0.0 when none is)."""
        return max((v for pid, v in self.per_process.items() if pid in self.one_core), default=0.0)

    @property
    def saturated_why(self) -> str | None:
        if self.busiest >= BUSY:
            return (f"a load process used {self.busiest:.0%} of a core: the client, not the server, set the pace "
                    f"(saturated at {BUSY:.0%})")
        if self.total_cores >= BUSY * self.cores:
            return (f"the load's processes used {self.total_cores:.2f} of the control node's {self.cores} cores: "
                    "the machine the client runs on was full")
        share = self.late_share
        if share is not None and self.dispatched >= MIN_DISPATCHED and share > LATE_SHARE:
            return (f"{share:.1%} of the open loop's arrivals were started more than {DISPATCH_LATE_S * 1000:g} ms "
                    "after both their schedule and a free connection: the client could not keep its schedule "
                    f"(saturated above {LATE_SHARE:.0%})")
        return None

    def with_dispatch(self, counts: Mapping[str, float]) -> ClientCpu:
        """The same window with the open loop's dispatch counts (a Recorder window's or totals)."""
        return replace(self, dispatched=int(counts.get("dispatched", 0)),
                       dispatched_late=int(counts.get("dispatched_late", 0)))

    def figures(self) -> dict[str, object]:
        share = self.late_share
        return {"client_cpu_cores": round(self.total_cores, 3), "client_cpu_busiest_process": round(self.busiest, 3),
                "client_dispatch_late_pct": None if share is None else round(100 * share, 3),
                "client_saturated": self.saturated_why is not None, "client_saturated_why": self.saturated_why}


class CpuWindow:
    """Sampled at the window's start and end for a fixed set of processes."""

    def __init__(self, pids: list[int], one_core: set[int] | frozenset[int] = frozenset(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pids = list(pids)
        self.one_core = frozenset(one_core)
        self._now = clock
        self.start: dict[int, float] | None = None
        self.t_start = 0.0

    def begin(self) -> None:
        self.t_start = self._now()
        self.start = {pid: tree_cpu_seconds(pid) for pid in self.pids}

    def end(self) -> ClientCpu:
        assert self.start is not None, "begin() first"
        elapsed = max(1e-9, self._now() - self.t_start)
        used = {pid: max(0.0, tree_cpu_seconds(pid) - self.start[pid]) / elapsed for pid in self.pids}
        return ClientCpu(elapsed, used, os.cpu_count() or 1, self.one_core)
