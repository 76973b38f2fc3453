"""pgbench's per-transaction log (`-l`) and its complaints on stderr, as PostgreSQL 15 writes them.

One file per pgbench thread: `<prefix>.<pid>` for thread 0, `<prefix>.<pid>.<n>` for thread n
(prefix `pgbench_log` unless `--log-prefix`). Each line:

    client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]

`time` is the transaction's latency in microseconds, or, for a transaction that did not commit, the
failure (`serialization`, `deadlock`, `failed`; `skipped` under --latency-limit, never started);
`time_epoch`.`time_us` is when it ended. pgbench 15 never reconnects: a client whose connection
breaks is aborted ("client N aborted in command C ...") and its transaction in flight is not logged.
Fixtures: tests/fixtures/tools/pgbench-15-* (SOURCE.md there says how they were made).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

FAILURES = ("serialization", "deadlock", "failed")
SKIPPED = "skipped"
_ABORTED = re.compile(r"client (\d+) aborted in command (\d+) \(([^)]*)\) of script (\d+)")


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
