"""The pgbench engine (`tool: pgbench`): PostgreSQL's pgbench 15, one pgbench per client.

## Its output

pgbench's per-transaction log (`-l`) and its complaints on stderr, as PostgreSQL 15 writes them.

One file per pgbench thread: `<prefix>.<pid>` for thread 0, `<prefix>.<pid>.<n>` for thread n
(prefix `pgbench_log` unless `--log-prefix`). Each line:

    client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]

`time` is the transaction's latency in microseconds, or, for a transaction that did not commit, the
failure (`serialization`, `deadlock`, `failed`; `skipped` under --latency-limit, never started);
`time_epoch`.`time_us` is when it ended. pgbench 15 never reconnects: a client whose connection
breaks is aborted ("client N aborted in command C ...") and its transaction in flight is not logged.
Fixtures: tests/fixtures/tools/pgbench-15-* (SOURCE.md there says how they were made).

A drill runs it as one pgbench per client (`client_argv`): a client pgbench aborted is then a
process that ended, and the group runner (`chaoskit.workload.tool_group`) starts it again, which
pgbench itself cannot do.

## Its group runner

A pgbench client group (`load.groups[].tool: pgbench`): one pgbench process per client. pgbench 15
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
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field, ValidationInfo, field_validator, model_validator

from chaoskit.db.base import ErrorClass, connect_class
from chaoskit.db.postgres import class_of_words
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.models import Frozen
from chaoskit.recorder import FAIL, INFO, OK, Recorder
from chaoskit.validation import SafePath, input_file
from chaoskit.workload import stamp
from chaoskit.workload.engine import LoadEngine, Measures, ToolGroupBase, group_driver
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import POLL_S, STOP_GRACE_S, run_setup, with_parent_death

FAILURES = ("serialization", "deadlock", "failed")
# pgbench's builtin scripts (`pgbench --show-script=NAME`); which one only reads; and the number of
# the command that commits each writing one (0-based, meta-commands counted: "aborted in command
# 10" of tpcb-like is its END, so the transaction may have committed; any earlier one did not)
BUILTIN_SCRIPTS = ("tpcb-like", "simple-update", "select-only")
READ_ONLY = ("select-only",)
COMMIT_COMMAND = {"tpcb-like": 10, "simple-update": 8}
FOREVER_S = 86_400  # --time for a drill's client: it is ended by SIGALRM (as -T ends it) at the load's stop
SKIPPED = "skipped"
_ABORTED = re.compile(r"client (\d+) aborted in command (\d+) \(([^)]*)\) of script (\d+)")
# a statement the server refused with an error pgbench does not retry ends the client too
_REFUSED = re.compile(r"client (\d+) script (\d+) aborted in command (\d+) query \d+: (.*)")


class Settings(Frozen):
    """What a pgbench group runs (`pgbench: {...}`, a playbook's group and an experiment's load
    alike): one of pgbench's builtin scripts (`script`, default tpcb-like) or the user's own script
    (`file`, pgbench's script syntax, a path relative to the playbook). `init` makes the builtin
    scripts' tables first (`pgbench -i`, at `scale`; it drops pgbench's old tables), by default for
    a builtin script only. `writes` says whether a user's script writes (default true): a
    read-only one's aborted transactions are failures, never unknown commits. After validation
    `script` or `file` is set, and `init` and `writes` are known."""

    script: Literal[BUILTIN_SCRIPTS] | None = None  # type: ignore[valid-type]
    file: SafePath | None = None
    scale: int = Field(1, ge=1, le=10_000)
    init: bool | None = None
    writes: bool | None = None

    @field_validator("file")
    @classmethod
    def _exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else input_file(value, info)

    @model_validator(mode="after")
    def _one_script(self) -> Settings:
        if self.script is not None and self.file is not None:
            raise ValueError("script (a builtin one) or file (your own), not both")
        if self.script is None and self.file is None:
            object.__setattr__(self, "script", "tpcb-like")
        known = None if self.file is not None else self.script not in READ_ONLY
        if self.writes is not None and known is not None and self.writes != known:
            raise ValueError("writes is said of your own script (file); a builtin script's is known")
        if self.init is None:
            object.__setattr__(self, "init", self.file is None)
        if self.writes is None:
            object.__setattr__(self, "writes", True if known is None else known)
        return self


class Transaction(NamedTuple):
    """One transaction pgbench logged. `t_start` is None where pgbench gave no latency (a failed
    transaction: only its end is known)."""

    client: int
    number: int
    script: int
    t_start: float | None
    t_end: float
    ok: bool
    failure: str | None  # pgbench's word for why it did not commit
    retries: int = 0


class Abort(NamedTuple):
    client: int
    command: int
    script: int


class LogError(ValueError):
    """A line pgbench did not write: the file, line number and field, the text shown escaped."""


def parse_line(line: str, where: str = "") -> Transaction | None:
    """One log line; None for a `skipped` transaction (never sent to the server)."""
    fields = line.split()
    if len(fields) not in (6, 7, 8):
        raise LogError(f"{where}: expected 6 to 8 fields, got {len(fields)}: {line.strip()!r}")
    client, number, script, epoch, micros = (_int(fields[i], name, line, where) for i, name in
                                             ((0, "client_id"), (1, "transaction_no"), (3, "script_no"),
                                              (4, "time_epoch"), (5, "time_us")))
    if micros >= 1_000_000:
        raise LogError(f"{where}: time_us {micros} is not below 1000000: {line.strip()!r}")
    retries = 0
    if len(fields) == 8:
        retries = _int(fields[7], "retries", line, where)
    t_end = epoch + micros / 1e6
    word = fields[2]
    if word == SKIPPED:
        return None
    if word in FAILURES:
        return Transaction(client, number, script, None, t_end, False, word, retries)
    latency_us = _int(word, "time", line, where)
    return Transaction(client, number, script, t_end - latency_us / 1e6, t_end, True, None, retries)


def _int(text: str, field: str, line: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LogError(f"{where}: field {field} is {text!r}, not a number: {line.strip()!r}") from None
    if value < 0:
        raise LogError(f"{where}: field {field} is negative: {line.strip()!r}")
    return value


def log_files(directory: Path, pid: int, prefix: str = "pgbench_log") -> list[Path]:
    """The run's files, thread 0 first."""
    first = directory / f"{prefix}.{pid}"
    rest = sorted((p for p in directory.glob(f"{prefix}.{pid}.*") if p.suffix[1:].isdigit()),
                  key=lambda p: int(p.suffix[1:]))
    return ([first] if first.exists() else []) + rest


def read_logs(paths: Iterable[Path]) -> list[Transaction]:
    """Every logged transaction of the run, in order of their end."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    tx = parse_line(line, f"{path}:{n}")
                    if tx is not None:
                        out.append(tx)
    out.sort(key=lambda t: (t.t_end, t.client))
    return out


def aborts(stderr: str) -> list[Abort]:
    """The clients pgbench aborted (a lost connection, mostly), in the order it said so."""
    return [Abort(int(c), int(cmd), int(s)) for c, cmd, _, s in _ABORTED.findall(stderr)]


class Ending(NamedTuple):
    """How one client's pgbench ended, from its own output: `started` is False when it never
    connected (every failure before the first transaction: refused, a standby reached, a timeout),
    `command` the script command it was aborted in, `message` pgbench's first error line."""

    started: bool
    command: int | None
    message: str
    refused_by_server: bool  # the server answered the statement with an error (it did not commit)


def ending(output: str) -> Ending | None:
    """None when pgbench ended on its own (its --time elapsed, or SIGALRM at the load's stop)."""
    refused = _REFUSED.search(output)
    if refused:
        return Ending(True, int(refused.group(3)), refused.group(4).strip()[:200], True)
    aborted = _ABORTED.search(output)
    if aborted:
        return Ending(True, int(aborted.group(2)), _first_error(output), False)
    if "could not create connection" in output or "connection to server" in output:
        return Ending(False, None, _first_error(output), False)
    return None


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("pgbench: error: "):
            return line[len("pgbench: error: "):][:200]
    return output.strip().splitlines()[-1][:200] if output.strip() else "pgbench ended without a word"


def client_argv(conninfo: str, log_prefix: str, *, script: str | None = None, script_file: str | None = None,
                rate: float | None = None, connect_per_transaction: bool = False,
                duration_s: int = FOREVER_S) -> list[str]:
    """One client's pgbench: no vacuum (the group's init did it), its per-transaction log under
    `log_prefix`, the connection string after `--` (never read as an option; no password in it:
    the caller passes that in PGPASSWORD, out of `ps`). Values are whole `--name=value` words, so
    none can become an option of its own."""
    if (script is None) == (script_file is None):
        raise ValueError("one of script and script_file")
    if script is not None and script not in BUILTIN_SCRIPTS:
        raise ValueError(f"unknown builtin script {script!r}")
    argv = ["pgbench", "--no-vacuum", "--client=1", "--jobs=1", f"--time={int(duration_s)}", "--log",
            f"--log-prefix={log_prefix}"]
    argv.append(f"--builtin={script}" if script is not None else f"--file={script_file}")
    if rate is not None:
        argv.append(f"--rate={rate:.6f}")
    if connect_per_transaction:
        argv.append("--connect")
    return [*argv, "--", conninfo]


def init_argv(conninfo: str, scale: int) -> list[str]:
    """The builtin scripts' tables (pgbench_accounts has 100,000 rows per unit of scale), made
    again from nothing: `pgbench -i` drops the old ones first."""
    return ["pgbench", "--initialize", f"--scale={int(scale)}", "--quiet", "--", conninfo]


def ending_outcome(end: Ending, script: str | None, writes: bool,
                   classify: Callable[[str], ErrorClass | None]) -> tuple[str, ErrorClass]:
    """What the client's transaction in flight became, in the recorder's terms: `fail` when it did
    not commit (never connected, the server refused a statement, or the connection broke before
    the script's commit), `info` when it may have (broken at the commit, or in a user's script,
    whose commit is not known here), as chaoskit's own clients judge theirs. `classify` reads
    pgbench's words by the PostgreSQL driver's rule (`Driver.classify_words`), so a failure has the
    name chaoskit's own clients give it."""
    if not end.started:
        return FAIL, connect_class(classify(end.message))
    if end.refused_by_server:
        return FAIL, classify(end.message) or ErrorClass.other
    commit = COMMIT_COMMAND.get(script or "")
    if not writes or (commit is not None and end.command is not None and end.command < commit):
        return FAIL, ErrorClass.connection_lost
    return INFO, ErrorClass.connection_lost


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
        self.settings: Settings = self.group.settings or Settings()
        self.kind = "write" if self.settings.writes else "read"
        self.clients = [_Client(w) for w in self.group.worker_ids]
        self._first = 0  # the client a tick reads first (moves each tick)

    def _argv(self, client: _Client) -> list[str]:
        s = self.settings
        rate = self.rate_share / self.group.workers if self.rate_share else None
        return with_parent_death(client_argv(
            self.conninfo, str(self.raw / f"client-{client.worker}"), script=s.script, script_file=s.file,
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
        off = stamp.CLOCK.offset()  # pgbench stamps with its host's clock: on the control clock less this
        lines = (client.partial + data).split(b"\n")
        client.partial = lines.pop()
        for n, raw in enumerate(lines, 1):
            line = raw.decode("utf-8", "replace")
            if not line.strip():
                continue
            tx = parse_line(line, f"{client.log}:{client.logged + n}")
            if tx is None:
                continue
            t_end = tx.t_end - off
            if tx.ok:
                self.recorder.record(client.worker, self.kind, (tx.t_start or tx.t_end) - off, t_end, OK)
            else:  # serialization / deadlock: rolled back, so it did not commit
                self.recorder.record(client.worker, self.kind, t_end, t_end, FAIL, ErrorClass.serialization.value,
                                     tx.failure or "")
            if not client.logged:
                client.first_end = t_end
            client.logged += 1
            client.last_end = t_end
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
        seen = stamp.now()
        mtime = out_path.stat().st_mtime - stamp.CLOCK.offset()
        t_end = min(seen, max(mtime, client.last_end or 0.0, client.started))
        client.proc = None
        if client.log is not None and client.log.exists() and client.log.stat().st_size == 0:
            client.log.unlink()  # a run that never logged a transaction leaves no empty file behind
        end = ending(output)
        if self.stopping and end is None:
            return
        if end is None:
            end = Ending(client.logged > 0, None, f"pgbench ended (exit {proc.returncode}) without saying why",
                                 False)
        outcome, cls = ending_outcome(end, self.settings.script, bool(self.settings.writes),
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
        deadline = stamp.now() + STOP_GRACE_S
        while any(c.proc is not None for c in self.clients):
            now = stamp.now()
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
    settings: Settings = group.settings or Settings()
    if settings.init:
        run_setup([(f"pgbench -i --scale={settings.scale}", init_argv(conninfo, settings.scale))],
                  raw / "init.out", env, group.name, timeout=600)


def tool_conninfo(cluster: Cluster, inventory: Inventory, spec: LoadSpec, group: ClientGroup
                  ) -> tuple[str, dict[str, str]]:
    driver = group_driver(cluster, inventory, spec, group)
    return driver.tool_conninfo(f"chaoskit-{group.tool}")  # type: ignore[attr-defined]


class Pgbench(LoadEngine):
    name = "pgbench"
    measures = Measures(0.0, False, True, True)  # its per-transaction log: every transaction's end and latency
    speaks = ("postgres",)
    settings = Settings
    tests = BUILTIN_SCRIPTS  # an experiment's cells run its builtin scripts on tables of `scale`

    @classmethod
    def cell_settings(cls, settings: Settings | None, test: str, prepare: bool) -> Settings:
        s = settings or Settings()
        if s.file is not None:
            raise ValueError("an experiment's cells run pgbench's builtin scripts (the grid's workload), not a file")
        return Settings(script=test, scale=s.scale, init=bool(s.init) and prepare)

    @classmethod
    def tables_of(cls, test: str) -> str:
        return "pgbench"  # the builtin scripts share pgbench's tables

    @classmethod
    def programs(cls, settings: object) -> tuple[str, ...]:
        return ("pgbench",)

    @classmethod
    def describe(cls, group: ClientGroup, route: Cluster) -> list[str]:
        """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
        s: Settings = group.settings or Settings()
        conninfo = (f"<writer of cluster {route.name}: its endpoints, read-write, the profile's timeouts; password "
                    "in PGPASSWORD>")
        out = []
        if s.init:
            out.append(" ".join(init_argv(conninfo, s.scale)))
        out.append(" ".join(client_argv(conninfo, f"tools/{group.name}/client-<worker>", script=s.script,
                                        script_file=s.file, connect_per_transaction=group.profile == "per-op"))
                   + f"   (x{group.workers}, one per client, started again when it ends)")
        return out

    @classmethod
    def prepare(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
        """Before the load: the builtin script's tables (pgbench -i) through the group's route."""
        conninfo, env = tool_conninfo(cluster, inventory, spec, group)
        _init_tables(group, conninfo, env, raw)

    @classmethod
    def runner(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
               recorder: Recorder, rate_share: float | None) -> PgbenchGroup:
        conninfo, env = tool_conninfo(cluster, inventory, spec, group)
        return PgbenchGroup(group, spec, raw, recorder, rate_share, conninfo=conninfo, env=env)
