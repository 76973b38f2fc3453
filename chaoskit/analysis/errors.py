"""Errors by class and phase: what the clients were told, when, and how often, so a reader sees
the refused connections of the outage apart from the errors after recovery. Pure: from the
recorder's kept errors (each with its class and message) and the faults' marks.

Phases of a fault (between its `t_open` and the next fault): "fault to first client back"
[t_open, T_first_ok), "first client back to recovered" [T_first_ok, T_recovered), "after recovery"
from T_recovered; a fault that caused no outage has one phase, "during and after the fault".
Errors before the first fault are "before the fault". Instants are seconds since the fault's
T_fault (before the first fault: since the load started)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

BEFORE = "before the fault"


def _phase(t: float, f: dict[str, Any]) -> str:
    if not f.get("outage"):
        return "during and after the fault"
    first_ok, recovered = f.get("t_first_ok"), f.get("t_recovered")
    if first_ok is None or t < first_ok:
        return "fault to first client back"
    if recovered is None or t < recovered:
        return "first client back to recovered"
    return "after recovery"


def error_table(errors: Iterable[tuple], faults: list[dict[str, Any]], t0: float, dropped: int = 0) -> dict[str, Any]:
    """`rows`: one per (fault, phase, outcome, class), in time order of their first error:
    count, first and last instant, the first message; `dropped`: errors beyond what the
    recorder keeps (counted in the totals, not here)."""
    timed = sorted((f for f in faults if f.get("t_open") is not None), key=lambda f: f["t_open"])
    rows: dict[tuple, dict[str, Any]] = {}
    for t, _worker, _kind, outcome, cls, message in sorted(errors, key=lambda e: e[0]):
        owner: int | None = None
        key: tuple[int | None, str, Any, Any]
        for i, f in enumerate(timed):
            if t >= f["t_open"]:
                owner = i
        if owner is None:
            key, origin, phase, fault = (None, BEFORE, outcome, cls), t0, BEFORE, None
        else:
            f = timed[owner]
            phase = _phase(t, f)
            key, origin, fault = (owner, phase, outcome, cls), f["t_fault"], f.get("id")
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"fault": fault, "phase": phase, "outcome": outcome, "class": cls, "count": 0,
                               "first_s": round(t - origin, 3), "sample": message}
        row["count"] += 1
        row["last_s"] = round(t - origin, 3)
    return {"rows": list(rows.values()), "dropped": dropped}  # errors come in time order: so do the rows
