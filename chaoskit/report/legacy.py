"""Run directories written before schema 3 still render. Schema 2 named one RTO (`rto_s`, the
first client back) and judged `rto_max` on each group's first client; schema 3 reports first
client back and all clients back and judges all clients back. Reading an old run.json, the first
client back is its `rto_s`; all clients back is derived from the per-client RTOs it recorded
(their largest, when every client came back), and the evidence carries a note saying so. The
file itself is never rewritten: an old run stays the evidence it was."""

from __future__ import annotations

import copy
from typing import Any

CURRENT = 3
NOTE = ("recorded by an earlier chaoskit (run.json schema {v}): its rto_max SLO judged the first client back "
        "of each client group, not all clients back; 'all clients back' is derived here from the per-client "
        "RTOs it recorded")


def _all_back(per_client: dict[str, Any] | None) -> float | None:
    values = list((per_client or {}).values())
    if not values or any(v is None for v in values):
        return None
    return round(max(values), 6)


def _upgrade_figures(f: dict[str, Any], per_fault: list[dict[str, Any]] | None = None) -> None:
    if "rto_s" not in f or "rto_first_client_s" in f:
        return
    f["rto_first_client_s"] = f.pop("rto_s")
    if per_fault is None:
        f["rto_all_clients_s"] = _all_back(f.get("per_client_rto_s")) if f.get("outage") else None
    else:  # a group: its worst over the faults that caused it an outage
        backs = [_all_back(x.get("per_client_rto_s")) for x in per_fault if x.get("outage")]
        known = [b for b in backs if b is not None]
        f["rto_all_clients_s"] = None if len(known) < len(backs) else max(known, default=0.0)


def upgrade(ev: dict[str, Any]) -> dict[str, Any]:
    """A copy of run.json in the current vocabulary, with `legacy_note` when it was older."""
    version = ev.get("schema_version") or 1
    if version >= CURRENT or "results" not in ev or "experiment" in ev:
        return ev
    ev = copy.deepcopy(ev)
    res = ev.get("results") or {}
    for f in res.get("faults") or []:
        _upgrade_figures(f)
    for g in (res.get("groups") or {}).values():
        for f in g.get("faults") or []:
            _upgrade_figures(f)
        _upgrade_figures(g, g.get("faults") or [])
    rto = (res.get("slo") or {}).get("rto_max")
    if rto is not None:
        rto.setdefault("judges", "rto_first_client_s")
    ev["legacy_note"] = NOTE.format(v=version)
    return ev
