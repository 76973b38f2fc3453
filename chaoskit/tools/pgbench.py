"""pgbench's per-transaction log (`-l`) and its complaints on stderr, as PostgreSQL 15 writes them.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from chaoskit.db.base import ErrorClass, connect_class
from chaoskit.recorder import FAIL, INFO

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


@dataclass(frozen=True)
class Settings:
    """A drill's pgbench group: a builtin script or the user's file (an absolute path, checked at
    load), the builtin tables made first at `scale` when `init`, and whether the script writes."""

    script: str | None = "tpcb-like"
    script_file: str | None = None
    scale: int = 1
    init: bool = True
    writes: bool = True


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
