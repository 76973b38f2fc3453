"""One load specification: the defaults live here once, and the playbook, the CLI and experiments
are converted to it in one place each (`load_spec_from_*`)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chaoskit.workload.workloads import WorkloadParams

if TYPE_CHECKING:
    from chaoskit.playbook.models import LoadConfig, Playbook

LOOP_WORKERS = 16
DEFAULT_WORKLOAD = "ledger"
DEFAULT_WORKERS = 4
DEFAULT_OP_TIMEOUT_S = 2.0  # the client deadline is this + 0.25 s: long enough for a healthy commit
DEFAULT_CONNECT_TIMEOUT_S = 1.0
DEFAULT_WARMUP_S = 5.0
DEFAULT_TABLE_ROWS = 10_000


@dataclass(frozen=True)
class LoadSpec:
    workload: str
    workers: int
    rate: float | None = None  # open loop: total arrivals per second
    think_time: float = 0.0  # closed loop pause between ops
    processes: int | None = None
    op_timeout: float = DEFAULT_OP_TIMEOUT_S
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    max_lateness: float = 1.0
    backoff_min: float = 0.05
    backoff_max: float = 0.25
    params: WorkloadParams = field(default_factory=WorkloadParams)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    interval: float = 0.1
    engine: str = "auto"  # auto | loop | threads

    def uses_loop(self, family: str) -> bool:
        if self.engine not in ("auto", "loop", "threads"):
            raise ValueError(f"unknown load engine {self.engine!r}; choose auto, loop or threads")
        if self.engine == "loop" and family != "postgres":
            raise ValueError("the loop engine drives PostgreSQL only")
        return family == "postgres" and self.engine != "threads"

    def process_count(self, family: str = "postgres") -> int:
        """Threads: one process per core. Loop: one process per LOOP_WORKERS workers (at most one
        per core): a loop keeps up with ~5,000 ops/s using a fraction of a core, and every extra
        process on cores shared with the database costs context switches (measured: 2 loop
        processes reached 0.72x of pgbench where one reached 0.86x, 8 connections)."""
        if self.processes:
            n = self.processes
        elif self.uses_loop(family):
            n = min(os.cpu_count() or 1, -(-self.workers // LOOP_WORKERS))
        else:
            n = os.cpu_count() or 1
        return max(1, min(n, self.workers))


def load_spec_from_config(load: LoadConfig) -> LoadSpec:
    return LoadSpec(workload=load.workload, workers=load.workers, rate=load.rate, processes=load.processes,
                    op_timeout=load.op_timeout, connect_timeout=load.connect_timeout,
                    params=WorkloadParams(table_rows=load.table_rows))


def load_spec_from_playbook(pb: Playbook) -> LoadSpec:
    return load_spec_from_config(pb.load)
