"""One load specification: the defaults live here once (`DRILL`, `THROUGHPUT`); a playbook's `load:`
becomes one on the playbook's side (`playbook.models.LoadConfig.to_spec`), the CLI and experiments
build theirs from their own options."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from chaoskit.db.base import ClientProfile
from chaoskit.workload.workloads import WorkloadParams

LOOP_WORKERS = 64
LOOP_FAMILIES = ("postgres", "mysql")  # engines with a non-blocking wire (chaoskit.workload.loop)


@dataclass(frozen=True)
class LoadDefaults:
    """The load's defaults, declared once. Drills (`DRILL`) measure an outage: few workers, a short
    op deadline so a stalled op is seen as an error within ~2 s. A command that measures a server's
    throughput instead names its override here once (`THROUGHPUT`) and nowhere else."""

    workload: str = "ledger"
    workers: int = 4
    op_timeout_s: float = 2.0  # the client deadline is this + 0.25 s: long enough for a healthy commit
    connect_timeout_s: float = 1.0
    warmup_s: float = 5.0
    table_rows: int = 10_000


DRILL = LoadDefaults()  # playbooks (`load:`) and the client groups
# `chaoskit load` and experiments (sweep, ramp, compare): they measure throughput and latency, not an
# outage: twice the workers, and an op deadline that lets a slow op under load count as a latency
THROUGHPUT = replace(DRILL, workers=8, op_timeout_s=5.0)
PROFILES = ("deadline", "pool", "per-op")


@dataclass(frozen=True)
class ClientGroup:
    """Workers that hold their connections the same way (docs/methodology.md, "client profiles"):

    - `deadline`: chaoskit's careful client: a client-side deadline per op (op_timeout + 0.25 s),
      aggressive TCP keepalives and tcp_user_timeout; the connection is dropped at the deadline;
    - `pool`: a long-lived connection as an application pool keeps it: no client-side deadline,
      the driver's default keepalives, an optional server-side `statement_timeout`, reconnect only
      after an error, an optional validation query before each op (`validation`);
    - `per-op`: a new connection (writer search included) for every op, closed after it; no
      client-side deadline either.
    A worker's id says its group: ids are handed out group after group from 1."""

    name: str
    profile: str = "deadline"
    workers: int = DRILL.workers
    statement_timeout: float | None = None
    validate: bool = False
    first_worker: int = 1
    route: str | None = None  # the inventory cluster it connects through (default: the load's)
    tool: str = "builtin"  # who makes the load: chaoskit's own clients, or a tool (chaoskit.workload.engine)
    settings: Any = None  # the tool's settings model (None: its defaults; chaoskit's own clients have none)

    @property
    def worker_ids(self) -> range:
        return range(self.first_worker, self.first_worker + self.workers)

    @property
    def client_deadline(self) -> bool:
        return self.profile == "deadline"

    def client_profile(self) -> ClientProfile:
        return ClientProfile(self.profile, self.statement_timeout, self.validate)


@dataclass(frozen=True)
class LoadSpec:
    workload: str
    workers: int
    rate: float | None = None  # open loop: total arrivals per second
    think_time: float = 0.0  # closed loop pause between ops
    processes: int | None = None
    op_timeout: float = DRILL.op_timeout_s
    connect_timeout: float = DRILL.connect_timeout_s
    max_lateness: float = 1.0
    backoff_min: float = 0.05
    backoff_max: float = 0.25
    params: WorkloadParams = field(default_factory=WorkloadParams)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    interval: float = 0.1
    engine: str = "auto"  # auto | loop | threads
    # MySQL family: the client library of chaoskit's own clients (pymysql, the default and the loop's;
    # mysqlclient, the C library, on threads), see chaoskit.db.mysql
    mysql_library: str = "pymysql"
    groups: tuple[ClientGroup, ...] = ()  # empty: one `deadline` group of every worker, named "main"

    def client_groups(self) -> tuple[ClientGroup, ...]:
        return self.groups or (ClientGroup("main", "deadline", self.workers),)

    def group_of(self) -> dict[int, str]:
        """worker id -> its group's name."""
        return {w: g.name for g in self.client_groups() for w in g.worker_ids}

    def uses_loop(self, family: str) -> bool:
        if self.engine not in ("auto", "loop", "threads"):
            raise ValueError(f"unknown load engine {self.engine!r}; choose auto, loop or threads")
        if self.engine == "loop" and family not in LOOP_FAMILIES:
            raise ValueError(f"the loop engine drives {' and '.join(LOOP_FAMILIES)} only")
        return family in LOOP_FAMILIES and self.engine != "threads"

    def process_count(self, family: str = "postgres") -> int:
        """Threads: one process per core. Loop: one process per LOOP_WORKERS workers (at most one
        per core): a loop keeps up with ~5,000 ops/s using a fraction of a core, and every extra
        process on cores shared with the database costs context switches (measured on the lab's 2
        cores: 2 loop processes reached 0.72x of pgbench where one reached 0.86x, 8 connections;
        at 64 connections one process reached 0.79x of sysbench where two reached 0.70x, and
        0.67x of pgbench where two reached 0.66x)."""
        if self.processes:
            n = self.processes
        elif self.uses_loop(family):
            n = min(os.cpu_count() or 1, -(-self.workers // LOOP_WORKERS))
        else:
            n = os.cpu_count() or 1
        return max(1, min(n, self.workers))
