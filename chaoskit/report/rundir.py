"""A run directory, created when the run starts and written as it goes.

Created before any host is touched (an unwritable `--out` is bad input, exit 2), mode 0700, files
0600: evidence can hold host names, settings and error texts. `events.jsonl` is appended and
flushed event by event, so a controller that crashes mid-drill still leaves what happened; each
line carries `seq` and `prev` (the SHA-256 of the previous line), so removing or editing a line
breaks the chain (`chaoskit verify`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from chaoskit.errors import InputError

GENESIS = "0" * 64
# the files that seal a run directory (report/manifest.py writes and checks the first two,
# report/intoto.py the statement; each names the others')
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
STATEMENT = "attestation.intoto.json"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf as null, keys as strings, tuples as lists."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def run_dir_name(name: str, started: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{name}"


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seq = 0
        self._prev = GENESIS
        self._events: TextIO | None = None

    @classmethod
    def create(cls, root: Path, name: str, started: float) -> RunDirectory:
        try:
            root.mkdir(parents=True, exist_ok=True)
            path = root / run_dir_name(name, started)
            suffix = 1
            while path.exists():
                suffix += 1
                path = root / f"{run_dir_name(name, started)}-{suffix}"
            path.mkdir(mode=0o700)
            (path / "plots").mkdir(mode=0o700)
            probe = path / ".writable"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise InputError(f"cannot create the run directory: {exc.strerror or exc}", source=str(root),
                             field="--out") from None
        return cls(path)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        p = self.path / name
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return p

    def write_json(self, name: str, data: Any) -> Path:
        return self.write_text(name, json.dumps(clean(data), indent=2, default=str))

    def event(self, ev: dict[str, Any]) -> None:
        """Append one event now (flushed), chained to the previous one."""
        with self._lock:
            if self._events is None:
                fd = os.open(self.path / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._events = os.fdopen(fd, "w")
            self._seq += 1
            line = json.dumps({"seq": self._seq, "prev": self._prev, **clean(ev)}, default=str, sort_keys=True)
            self._events.write(line + "\n")
            self._events.flush()
            os.fsync(self._events.fileno())
            self._prev = hashlib.sha256(line.encode()).hexdigest()

    def close(self) -> None:
        with self._lock:
            if self._events is not None:
                self._events.close()
                self._events = None


def verify_chain(lines: list[str]) -> str | None:
    """None if the events chain holds, else what breaks it."""
    prev = GENESIS
    for i, line in enumerate(lines, start=1):
        try:
            ev = json.loads(line)
        except ValueError:
            return f"events.jsonl line {i}: not JSON"
        if ev.get("seq") != i or ev.get("prev") != prev:
            return f"events.jsonl line {i}: the chain is broken (an event was removed, inserted or edited)"
        prev = hashlib.sha256(line.encode()).hexdigest()
    return None


def chain_head(lines: list[str]) -> tuple[int, str]:
    """(number of events, SHA-256 of the last line): what the seal records so that a chain
    recomputed forward, or a last line edited, no longer matches the record."""
    head = GENESIS
    for line in lines:
        head = hashlib.sha256(line.encode()).hexdigest()
    return len(lines), head


def evidence_ids(run_dir: Path) -> dict[str, Any]:
    """run.json's SHA-256 and the events chain's length and head, as the seal, the attestation and
    the report's footer record them (None where the file is absent)."""
    run_json, events = run_dir / "run.json", run_dir / "events.jsonl"
    ids: dict[str, Any] = {"run_json_sha256": None, "events": None, "events_head": None}
    if run_json.exists():
        ids["run_json_sha256"] = hashlib.sha256(run_json.read_bytes()).hexdigest()
    if events.exists():
        ids["events"], ids["events_head"] = chain_head(events.read_text().splitlines())
    return ids
