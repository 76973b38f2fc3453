"""A JMeter run made elsewhere (its JTL, CSV form) read into a chaoskit run directory: the same
timeline, throughput dips and outage figures a drill gives, measured against the instants the
user says the faults took effect (`--fault-at`, UTC) or read from a chaoskit run's events
(`--faults events.jsonl`: each `fault_injected` with its host-clock window).

Each JMeter thread is one client (worker ids in the order threads first appear in the file); each
sample is one op, booked as a drill's JMeter group books it (`engines.jmeter.book_sample`): so a
drill's JTL imported against the same fault gives that drill's JMeter figures again. What an
import cannot have is said, never guessed: no role probe ran, so the HA phases (detection,
promotion) are null with that reason; JMeter does not say which writes it had acknowledged, so
there is no RPO.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaoskit.analysis.errors import error_table
from chaoskit.analysis.failover import analyse_fault, baseline_tps
from chaoskit.db.base import ErrorClass
from chaoskit.db.mysql import class_of_words as mysql_words
from chaoskit.db.postgres import class_of_words as postgres_words
from chaoskit.errors import InputError
from chaoskit.recorder import Recorder
from chaoskit.topology.probe import ProbeLog
from chaoskit.workload.engines import jmeter
from chaoskit.workload.engines.jmeter import book_sample
from chaoskit.workload.outcomes import client_deadline
from chaoskit.workload.spec import DRILL

SCHEMA = "chaoskit-import/1"
NO_PROBE = ("imported run: no role probe ran, so detection and the outcome (failover or not) are not placed; "
            "'promoted' is the first client write after the fault (proof that a writer was there), not a "
            "promotion seen")
WORDS = {"postgres": postgres_words, "mysql": mysql_words}
_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]00:?00)?$")


@dataclass(frozen=True)
class GivenFault:
    """A fault instant the import measures against: when it took effect, and where it came from."""

    id: str
    t_effect: float
    kind: str = "fault"
    host: str | None = None
    t_apply_start: float | None = None  # a chaoskit run's host-clock window: the effect fell within
    uncertainty_s: float = 0.0

    def as_fault(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "host": self.host, "t_effect": self.t_effect,
                "t_apply_start": self.t_apply_start, "offset_uncertainty_s": self.uncertainty_s}


def parse_instant(text: str, field: str = "--fault-at") -> float:
    """A UTC instant (`2026-12-03T19:02:36.298531Z`; without a zone it is read as UTC; only UTC
    is taken) as seconds since the epoch, to the microsecond."""
    if not _INSTANT.match(text.strip()):
        raise InputError(f"{text[:60]!r} is not a UTC instant like 2026-12-03T19:02:36.298Z", source="command line",
                         field=field)
    body = text.strip().replace(" ", "T").rstrip("Z")
    body = re.sub(r"[+-]00:?00$", "", body)
    head, _, frac = body.partition(".")
    t = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return t + (int(frac.ljust(9, "0")) / 1e9 if frac else 0.0)


def faults_from_events(path: Path) -> list[GivenFault]:
    """Every `fault_injected` of a chaoskit run's events.jsonl, with its host-clock window."""
    out: list[GivenFault] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror}", source=str(path)) from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not a JSON line: {exc.msg}", source=str(path), line=n) from None
        if not isinstance(ev, dict) or ev.get("kind") != "fault_injected":
            continue
        t = ev.get("t")
        if not isinstance(t, int | float) or isinstance(t, bool):
            raise InputError(f"t is {str(t)[:40]!r}, not a number", source=str(path), line=n, field="t")
        applied = ev.get("applied_from")
        unc = ev.get("uncertainty_s")
        host = str(ev["host"])[:80] if ev.get("host") else None
        out.append(GivenFault(str(ev.get("id") or f"fault{len(out)}")[:40], float(t),
                              str(ev.get("fault_kind") or "fault")[:40], host,
                              float(applied) if isinstance(applied, int | float) else None,
                              float(unc) if isinstance(unc, int | float) else 0.0))
    if not out:
        raise InputError("no fault_injected event in it", source=str(path))
    return out


@dataclass(frozen=True)
class ImportSettings:
    name: str = "jmeter-import"
    timestamp: str = "start"
    writes: bool = True
    engine: str | None = None  # whose words class a sample without an SQLSTATE (None: PostgreSQL's, then MySQL's)
    warmup_s: float = 5.0
    tps_fraction: float = 0.9
    hold_s: float = 3.0
    interval: float = 0.1
    # an ok sample that took longer than this was an outage for its thread (a stall), as a drill's
    # clients count one; the default is a drill's (its op deadline, 2 s, plus 0.25 s)
    stall_s: float = client_deadline(DRILL.op_timeout_s)


def _words(engine: str | None) -> Any:
    if engine is not None:
        return WORDS[engine]

    def either(text: str) -> ErrorClass | None:
        return postgres_words(text) or mysql_words(text)
    return either


def read_run(jtl: Path, data: bytes, settings: ImportSettings
             ) -> tuple[Recorder, dict[str, int], list[jmeter.Sample]]:
    """The JTL's samples (`data`, the file's bytes) booked in a Recorder, threads numbered from 1
    in the order they first appear in the file (the order a drill's group met them)."""
    try:
        samples = jmeter.parse_jtl(data, jtl, settings.timestamp)
    except jmeter.JtlError as exc:
        raise InputError(str(exc)) from None
    if not samples:
        raise InputError("no sample in it", source=str(jtl))
    threads: dict[str, int] = {}
    for s in samples:
        threads.setdefault(s.thread, len(threads) + 1)
    rec = Recorder(min(s.t_start for s in samples), settings.interval, keep_ops=True, stall_s=settings.stall_s)
    words = _words(settings.engine)
    kind = "write" if settings.writes else "read"
    for s in sorted(samples, key=lambda s: (s.t_end, s.thread)):
        book_sample(rec, threads[s.thread], kind, s, settings.writes, words)
    rec.finish()
    return rec, threads, samples


def analyse(rec: Recorder, faults: list[GivenFault], settings: ImportSettings, t_end: float) -> dict[str, Any]:
    """Per fault, what a drill's analysis gives from the clients alone: outage edges, both RTOs,
    per-client RTO, the throughput dip and recovery (baseline: the median 1 s throughput from the
    warm-up's end to the first fault)."""
    ordered = sorted(faults, key=lambda f: f.t_effect)
    first = ordered[0].t_effect
    base = baseline_tps(rec, rec.base + settings.warmup_s, first)
    out = []
    for i, f in enumerate(ordered):
        window_end = ordered[i + 1].t_effect if i + 1 < len(ordered) else t_end
        fa = analyse_fault(f.as_fault(), rec, ProbeLog(), baseline=base, window_end=window_end,
                           tps_fraction=settings.tps_fraction, hold=settings.hold_s, no_detection=NO_PROBE)
        fa.update({"outcome": "not_observed", "outcome_text": "not observed: an imported run has no role probe",
                   "primary_at_fault": None})
        out.append(fa)
    return {"baseline_tps": base, "faults": out,
            "errors": error_table(rec.errors, out, rec.base, rec.errors_dropped),
            "rpo": None, "rpo_null_reason": "JMeter does not say which writes it had acknowledged"}


def import_jtl(jtl: Path, faults: list[GivenFault], out: Path, settings: ImportSettings) -> tuple[Path, str | None]:
    """The run directory of an imported JTL (under `out`, a fresh name each time: `-2`, `-3` after
    the first), with run.json, timeline.csv, the plots and report.html; its path, and why it is
    incomplete (None: complete). Bad input is raised before the directory exists."""
    from chaoskit.report.imported import write_imported
    from chaoskit.report.rundir import RunDirectory

    try:
        raw = jtl.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror}", source=str(jtl)) from None
    rec, threads, samples = read_run(jtl, raw, settings)
    t_end = max(s.t_end for s in samples)
    if not any(rec.base <= f.t_effect <= t_end for f in faults):
        raise InputError(f"no fault instant falls within the file's samples ({_utc(rec.base)} to {_utc(t_end)})",
                         source="command line", field="--fault-at")
    results = analyse(rec, faults, settings, t_end)
    run = {"schema": SCHEMA, "kind": "imported", "name": settings.name,
           "source": {"tool": "jmeter", "file": str(jtl), "sha256": hashlib.sha256(raw).hexdigest(),
                      "samples": len(samples), "failed": sum(not s.ok for s in samples), "threads": threads,
                      "timestamp": settings.timestamp, "writes": settings.writes},
           "stall_s": settings.stall_s, "started": rec.base, "ended": t_end,
           "faults_given": [f.as_fault() for f in faults], "totals": rec.totals(), "results": results}
    path = RunDirectory.create(out, settings.name, rec.base).path
    written = write_imported(run, rec, path)
    return path, written.get("incomplete")


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
