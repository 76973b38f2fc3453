"""A pgbench client group (`load.groups[].tool: pgbench`): one pgbench process per client. pgbench 15
never reconnects: a client whose connection breaks is aborted for good, and the run goes on without
it (tests/fixtures/tools/SOURCE.md). With one client per pgbench, an aborted client is a process
that ended; this runner starts it again at once (backoff 50 ms doubling to 250 ms while it cannot
connect, as chaoskit's own clients retry), so each client's history is continuous: its last
transaction before the outage, the abort (an op of class `connection_lost`), every failed start
(`connect_refused`, `read_only`, `timeout`), and its first transaction after it, on the worker id
the group gave that client. RTO per client is then the same gap chaoskit's own clients give. What
the restart costs (the time between the abort and the next start) is bounded by the backoff and
said in the evidence (`tool_client_*` events).

Every transaction comes from pgbench's per-transaction log (`-l`), read as it grows. pgbench
writes that log through stdio, so lines arrive in blocks; an op recorded late lands in its own
interval (the Recorder folds late ops in). The abort is booked after the client's last logged
transaction, once its process has ended and its log is complete: a worker's ops reach the
Recorder in the order they happened. Everything pgbench wrote is kept under `tools/<group>/`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from chaoskit.db.base import ErrorClass
from chaoskit.db.postgres import class_of_words
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.recorder import FAIL, OK, Recorder
from chaoskit.tools import pgbench
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import POLL_S, STOP_GRACE_S, ToolGroupBase, run_setup, with_parent_death

READ_PER_TICK = 256 * 1024  # bytes of one client's log a read books (~8k transactions, ~25 ms of parsing)
TICK_BUDGET_S = 0.2  # a tick reads logs for this long at most, then ships and looks for the stop


@dataclass
class _Client:
    """One tool process's client: its worker id, the running process (None between runs), how
    far its log was read, and its restarts."""

    worker: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    log: Path | None = None
    read_to: int = 0
    partial: bytes = b""
    out_from: int = 0  # where this run's output starts in the client's output file
    logged: int = 0  # transactions logged by this run
    last_end: float | None = None
    first_end: float | None = None  # this run's first transaction
    next_start: float = 0.0
    backoff: float = 0.05
    failed_starts: int = 0
    down_since: float | None = None
    runs: int = 0


@dataclass(kw_only=True)
class PgbenchGroup(ToolGroupBase):
    """The clients of one pgbench group, started, read and restarted; `tick` does one pass."""

    conninfo: str
    env: dict[str, str]

    def __post_init__(self) -> None:
        self.settings = self.group.pgbench or pgbench.Settings()
        self.kind = "write" if self.settings.writes else "read"
        self.clients = [_Client(w) for w in self.group.worker_ids]
        self._first = 0  # the client a tick reads first (moves each tick)

    def _argv(self, client: _Client) -> list[str]:
        s = self.settings
        rate = self.rate_share / self.group.workers if self.rate_share else None
        return with_parent_death(pgbench.client_argv(
            self.conninfo, str(self.raw / f"client-{client.worker}"), script=s.script, script_file=s.script_file,
            rate=rate, connect_per_transaction=self.group.profile == "per-op"))

    def _start(self, client: _Client, now: float) -> None:
        out = self.raw / f"client-{client.worker}.out"
        with open(out, "ab") as fh:
            client.runs += 1
            fh.write(f"== run {client.runs} started {now:.6f}\n".encode())
            client.out_from = fh.tell()
            client.proc = subprocess.Popen(self._argv(client), stdin=subprocess.DEVNULL, stdout=fh,
                                           stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                           cwd=self.raw)
        client.started, client.logged, client.read_to, client.partial, client.first_end = now, 0, 0, b"", None
        client.log = self.raw / f"client-{client.worker}.{client.proc.pid}"

    def _read_log(self, client: _Client, limit: int | None = READ_PER_TICK) -> bool:
        """Book what the client's log holds past what was read, at most `limit` bytes (None: to
        its end); True if more may be waiting. A tick reads a bounded piece of each log, so a
        reader that fell behind (select-only at ~50k transactions a second on a shared 2-core
        machine outruns the parse) still sees the load's stop within a tick and ends pgbench then,
        instead of letting it run on while a whole backlog is parsed; the rest is read after."""
        if client.log is None or not client.log.exists():
            return False
        with open(client.log, "rb") as fh:
            fh.seek(client.read_to)
            data = fh.read(-1 if limit is None else limit)
        if not data:
            return False
        client.read_to += len(data)
        lines = (client.partial + data).split(b"\n")
        client.partial = lines.pop()
        for n, raw in enumerate(lines, 1):
            line = raw.decode("utf-8", "replace")
            if not line.strip():
                continue
            tx = pgbench.parse_line(line, f"{client.log}:{client.logged + n}")
            if tx is None:
                continue
            if tx.ok:
                self.recorder.record(client.worker, self.kind, tx.t_start or tx.t_end, tx.t_end, OK)
            else:  # serialization / deadlock: rolled back, so it did not commit
                self.recorder.record(client.worker, self.kind, tx.t_end, tx.t_end, FAIL, ErrorClass.serialization.value,
                                     tx.failure or "")
            if not client.logged:
                client.first_end = tx.t_end
            client.logged += 1
            client.last_end = tx.t_end
        return limit is not None and len(data) == limit

    def _ended(self, client: _Client, now: float) -> None:
        """The client's process ended: its log read to the end, then how it ended booked."""
        proc = client.proc
        assert proc is not None
        while self._read_log(client):  # it wrote its last line: all of it now, piece by piece
            self.beat()
        out_path = self.raw / f"client-{client.worker}.out"
        with open(out_path, "rb") as fh:
            fh.seek(client.out_from)
            output = fh.read().decode("utf-8", "replace")
        # its last word (the abort, or the failed connect) was written at the file's mtime, which the
        # kernel stamps from its coarse clock (up to a tick early): never before the last transaction
        # it logged, never after its exit was seen (read now: the tick's `now` was taken before this
        # client's turn, possibly before its last transaction ended)
        seen = time.time()
        t_end = min(seen, max(out_path.stat().st_mtime, client.last_end or 0.0, client.started))
        client.proc = None
        if client.log is not None and client.log.exists() and client.log.stat().st_size == 0:
            client.log.unlink()  # a run that never logged a transaction leaves no empty file behind
        end = pgbench.ending(output)
        if self.stopping and end is None:
            return
        if end is None:
            end = pgbench.Ending(client.logged > 0, None, f"pgbench ended (exit {proc.returncode}) without saying why",
                                 False)
        outcome, cls = pgbench.ending_outcome(end, self.settings.script, self.settings.writes,
                                              class_of_words)
        t_invoke = client.last_end if end.started and client.last_end is not None else client.started
        self.recorder.record(client.worker, self.kind, min(t_invoke, t_end), t_end, outcome, cls.value, end.message)
        if end.started:
            client.down_since = t_end
            client.backoff = self.spec.backoff_min
            self.event("tool_client_aborted", t_end, client.worker, exit=proc.returncode,
                       transactions=client.logged, why=end.message)
        else:
            client.failed_starts += 1
            client.down_since = client.down_since or client.started
            client.backoff = min(self.spec.backoff_max, client.backoff * 2)
        client.next_start = now + (0.0 if end.started else client.backoff)

    def _back(self, client: _Client) -> None:
        """The first transaction of a restarted client: the restart is said once, with its cost."""
        if client.down_since is not None and client.logged and client.first_end is not None:
            self.event("tool_client_back", client.first_end, client.worker, runs=client.runs,
                       failed_starts=client.failed_starts, down_s=round(client.first_end - client.down_since, 6))
            client.down_since, client.failed_starts = None, 0

    def tick(self, now: float) -> None:
        """Start who is due, book a piece of each log while the tick's time lasts (the clients
        taken in turn from a point that moves each tick, so none starves), end who ended."""
        t0 = time.monotonic()
        n = len(self.clients)
        for k in range(n):
            client = self.clients[(self._first + k) % n]
            if client.proc is None:
                if not self.stopping and now >= client.next_start:
                    self._start(client, now)
                continue
            if time.monotonic() - t0 < TICK_BUDGET_S:
                self._read_log(client)
                self._back(client)
            if client.proc.poll() is not None:
                self._ended(client, now)
        self._first = (self._first + 1) % max(1, n)

    def stop(self) -> None:
        """SIGALRM ends each client as its --time would (the transaction in flight finishes, the
        log is flushed); one that does not end within the grace is killed."""
        self.stopping = True
        for client in self.clients:
            if client.proc is not None and client.proc.poll() is None:
                client.proc.send_signal(signal.SIGALRM)
        deadline = time.time() + STOP_GRACE_S
        while any(c.proc is not None for c in self.clients):
            now = time.time()
            for client in self.clients:
                if client.proc is None:
                    continue
                if client.proc.poll() is not None:
                    self._ended(client, now)
                    self._back(client)
                elif now > deadline:
                    client.proc.kill()
                    client.proc.wait()
                    self.event("tool_client_killed", now, client.worker,
                               why=f"still running {STOP_GRACE_S:g}s after SIGALRM at the load's stop")
                    self._ended(client, now)
            time.sleep(POLL_S)


def _init_tables(group: ClientGroup, conninfo: str, env: dict[str, str], raw: Path) -> None:
    """The builtin script's tables, made once before the load (pgbench -i at the group's scale)."""
    settings = group.pgbench or pgbench.Settings()
    if settings.init:
        run_setup([(f"pgbench -i --scale={settings.scale}", pgbench.init_argv(conninfo, settings.scale))],
                  raw / "init.out", env, group.name, timeout=600)


def tool_conninfo(cluster: Cluster, inventory: Inventory, spec: LoadSpec, group: ClientGroup
                  ) -> tuple[str, dict[str, str]]:
    driver = driver_for(cluster, inventory, connect_timeout=spec.connect_timeout, op_timeout=spec.op_timeout,
                        profile=group.client_profile())
    return driver.tool_conninfo(f"chaoskit-{group.tool}")  # type: ignore[attr-defined]


def prepare(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
    """Before the load: the builtin script's tables (pgbench -i) through the group's route."""
    conninfo, env = tool_conninfo(cluster, inventory, spec, group)
    _init_tables(group, conninfo, env, raw)


def runner(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
           recorder: Recorder, rate_share: float | None) -> PgbenchGroup:
    conninfo, env = tool_conninfo(cluster, inventory, spec, group)
    return PgbenchGroup(group, spec, raw, recorder, rate_share, conninfo=conninfo, env=env)


def describe(group: ClientGroup, route: Cluster) -> list[str]:
    """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
    s = group.pgbench or pgbench.Settings()
    conninfo = (f"<writer of cluster {route.name}: its endpoints, read-write, the profile's timeouts; password in "
                "PGPASSWORD>")
    out = []
    if s.init:
        out.append(" ".join(pgbench.init_argv(conninfo, s.scale)))
    out.append(" ".join(pgbench.client_argv(conninfo, f"tools/{group.name}/client-<worker>", script=s.script,
                                            script_file=s.script_file,
                                            connect_per_transaction=group.profile == "per-op"))
               + f"   (x{group.workers}, one per client, started again when it ends)")
    return out
