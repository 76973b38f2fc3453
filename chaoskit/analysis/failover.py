"""Failover phases and RTO for one fault, exactly as the methodology (chaoskit/docs/methodology.md)
defines them (control clock).

- t_fault: the fault took effect on the host (host time, offset-corrected).
- t_first_err / t_last_ok / t_first_ok: from every worker's outage edges (exact op timestamps)
  among the gaps that opened at or after t_fault.
- t_detect: the HA manager reacted: the first of its own events (Patroni: the DCS leader key
  deleted or taken; pg_auto_failover: the monitor's event; repmgr: repmgr.events; MHA: its log)
  or of its view as polled (leader changed, or the leader left its healthy state) after t_fault,
  with that event's uncertainty. Null with the reason where there is no manager.
- t_confirmed (DM only): the confirmation monitor agreed and a standby's takeover runs; detection
  then ends here (sub-phases: the watcher's detection, the monitor's confirmation), else at t_detect.
- t_promoted: a node is writable again: the earlier of the role probe seeing it and a client's
  first successful write (which is itself proof of a writer); which node and which evidence
  are recorded.
- t_recovered: throughput (1 s rolling) back to >= fraction x baseline median, held for `hold`.
- RTO, said two ways and named the same everywhere: first client back (rto_first_client_s =
  t_first_ok - t_fault) and all clients back (rto_all_clients_s: the last client in the outage to
  write again, null while one never did). The write gap belongs to a client group (drill.py).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from chaoskit.ha.base import CONFIRMATION_EVENT, REACTION_EVENTS
from chaoskit.recorder import Recorder
from chaoskit.stats import nearest_rank
from chaoskit.topology.probe import ProbeLog

ROLL = 1.0  # seconds of the rolling throughput window


def rolling_tps(rec: Recorder) -> list[tuple[float, float]]:
    """(interval end time, ok ops/s over the last ROLL seconds) per interval."""
    df = rec.to_frame()
    if df.empty:
        return []
    n = max(1, round(ROLL / rec.interval))
    tps = (df["write_ok"].rolling(n, min_periods=n).sum() / (n * rec.interval)).tolist()
    ends = (df["t"] + rec.interval).tolist()
    return [(t, v) for t, v in zip(ends, tps, strict=True) if not math.isnan(v)]


def baseline_tps(rec: Recorder, start: float, end: float) -> float | None:
    values = [v for t, v in rolling_tps(rec) if start + ROLL <= t <= end]
    return statistics.median(values) if values else None


def role_at(probe: ProbeLog, t: float) -> dict[str, str]:
    roles: dict[str, str] = {}
    for ts, member, role in probe.samples:
        if ts > t:
            break
        roles[member] = role
    return roles


def gap_window_start(fault: dict[str, Any]) -> float:
    """The fault took effect somewhere between the host's two timestamps: a client may see its
    first error before t_fault (the later one). Gaps count from the earlier one, less the clock
    uncertainty; RTO is still measured from t_fault as defined."""
    t_fault = fault["t_effect"]
    return min(t_fault, fault.get("t_apply_start") or t_fault) - (fault.get("offset_uncertainty_s") or 0.0)


def fault_gaps(rec: Recorder, fault: dict[str, Any], window_end: float,
               workers: set[int] | None = None) -> list[Any]:
    """The workers' gaps that belong to this fault (of the given workers, or all)."""
    t_open = gap_window_start(fault)
    return [g for g in rec.gaps if t_open <= g.first_err < window_end and (workers is None or g.worker in workers)]


def client_figures(gaps: list[Any], t_fault: float) -> dict[str, Any]:
    """What the clients saw of one fault, from their gaps (each worker's first one counts): the
    outage edges, the two RTOs (first client back, all clients back), the write gap and the
    per-client RTOs. One formula for the totals and every group; the caller keeps the write gap
    of a client group only (a gap across groups is an instant no single client saw)."""
    first_gap: dict[int, Any] = {}
    for g in sorted(gaps, key=lambda g: g.first_err):
        first_gap.setdefault(g.worker, g)
    t_first_err = min(g.first_err for g in first_gap.values())
    lasts = [g.last_ok_before for g in first_gap.values() if g.last_ok_before is not None]
    t_last_ok = max(lasts) if lasts else None
    firsts = [g.first_ok_after for g in first_gap.values() if g.first_ok_after is not None]
    t_first_ok = min(firsts) if firsts else None
    per_client = {str(w): (g.first_ok_after - t_fault if g.first_ok_after else None)
                  for w, g in sorted(first_gap.items())}
    rtos = sorted(v for v in per_client.values() if v is not None)
    not_back = sum(1 for v in per_client.values() if v is None)
    gap = _diff(t_first_ok, t_last_ok)
    # outages that never overlapped (the clients of an isolated primary went on writing while the
    # others failed over) leave no instant without a write: no common gap, never a negative one
    overlap = gap is None or gap >= 0
    return {"outages_overlap": overlap, "first_err_after_fault_s": round(t_first_err - t_fault, 6), "outage": True,
            "t_last_ok": t_last_ok,
            "t_first_err": t_first_err, "t_first_ok": t_first_ok,
            "rto_first_client_s": _diff(t_first_ok, t_fault),
            "rto_all_clients_s": round(rtos[-1], 6) if rtos and not not_back else None,
            "write_gap_s": gap if overlap else 0.0, "per_client_rto_s": per_client,
            "per_client_rto_percentiles_s": {f"p{p}": nearest_rank(rtos, p) for p in (50, 90, 99)} if rtos else {},
            "workers_in_outage": len(first_gap),
            "workers_not_recovered": not_back}


GROUP_ONLY = ("write_gap_s", "outages_overlap")  # figures of one client group, never of all clients together
# why a fault has no detection signal (analyse_fault's `no_detection`), said in its notes
NO_MANAGER = "no HA manager in this cluster (ha: none): no detection signal exists, t_detect is null"
MANAGED_SERVICE = ("a managed service fails over by itself, out of sight (no host, no manager to ask): no detection "
                   "signal exists, t_detect is null; its endpoints' roles are asked over SQL")


def analyse_fault(fault: dict[str, Any], rec: Recorder, probe: ProbeLog, *, baseline: float | None,
                  window_end: float, tps_fraction: float, hold: float, no_detection: str | None = None,
                  promotes: bool = True) -> dict[str, Any]:
    """One disturbance's figures from the clients' history and the probe's log. `no_detection` is
    why no detection signal exists (no manager, a managed service, an imported run; it becomes a
    note); None when the HA manager's events are in the log."""
    t_fault = fault["t_effect"]
    gaps = fault_gaps(rec, fault, window_end)
    out: dict[str, Any] = {"id": fault["id"], "kind": fault["kind"], "target_host": fault["host"],
                           "t_scheduled": fault.get("t_scheduled"), "t_fault": t_fault,
                           "t_open": gap_window_start(fault),
                           "t_reverted": fault.get("t_reverted"), "step": fault.get("step"), "notes": []}
    if fault.get("together_with"):  # the other faults its step started at the same instant
        out["together_with"] = fault["together_with"]
    null_phases = {"detection_s": None, "promotion_s": None, "reconnect_s": None, "stabilisation_s": None}
    if not gaps:
        out.update({"outage": False, "t_last_ok": None, "t_first_err": None, "t_detect": None,
                    "t_confirmed": None, "t_promoted": None,
                    "t_first_ok": None, "t_recovered": None, "phases": null_phases, "rto_first_client_s": None,
                    "rto_all_clients_s": None, "per_client_rto_s": {}})
        out.update(fault_outcome(probe, t_fault, window_end, outage=False, target_host=fault["host"]))
        out["notes"].append("no write outage observed: no phases; effect is the throughput change below")
        # to its revert, but never into the next disturbance (whose effect is that one's)
        out["effect"] = _effect(rec, t_fault, min(fault.get("t_reverted") or window_end, window_end), baseline)
        return out
    clients = {k: v for k, v in client_figures(gaps, t_fault).items() if k not in GROUP_ONLY}
    t_last_ok, t_first_ok = clients["t_last_ok"], clients["t_first_ok"]

    outcome = fault_outcome(probe, t_fault, window_end, outage=True, target_host=fault["host"],
                            refused=_refusal(gaps))
    old_primary, new_primary = outcome["primary_at_fault"], outcome.get("new_primary")
    # the writer that ended the outage: the member that took over (a failover), else the old one
    # back in place; an old primary writable again for a moment before the failover (its agent
    # restarted it) is noted, not taken for the promotion
    t_probe_writable = outcome.get("t_new_primary") or outcome.get("t_back")
    if outcome["outcome"] == "failover" and outcome.get("t_back") and outcome["t_back"] < outcome["t_new_primary"]:
        out["notes"].append(f"{old_primary} was writable again in place at +{outcome['t_back'] - t_fault:.3f}s, "
                            f"before {new_primary} took over: writes it acknowledged then are lost if it is rewound")
    candidates = [(t, "probe") for t in [t_probe_writable] if t is not None] + \
                 [(t, "client") for t in [t_first_ok] if t is not None]
    t_promoted, evidence = min(candidates) if candidates else (None, None)
    if not promotes:
        # a multi-writer cluster promotes nothing: its other nodes were writable all along, and
        # writes resume when the cluster lets commits through again (the clients' first write)
        t_promoted, evidence = None, None
        out["notes"].append("multi-writer cluster: no promotion (t_promoted null); the phase after detection is "
                            "the clients' reconnect to a node that commits again")
    elif t_promoted is None:
        out["notes"].append("no writable node observed after the fault within the window")
    if not promotes:
        out["non_primary"] = non_primary_spans(probe, t_fault, window_end)
        for span in out["non_primary"]:
            out["notes"].append(f"{span['member']} was outside the Primary Component, refusing writes, from "
                                f"+{span['from_s']:.3f}s to +{span['to_s']:.3f}s (as polled)")

    t_detect, detect_how, detect_unc = _detect(probe, t_fault, window_end, fault.get("offset_uncertainty_s") or 0.0) \
        if no_detection is None else (None, None, None)
    if no_detection is not None:
        out["notes"].append(no_detection)
    elif t_detect is None:
        out["notes"].append("the HA manager showed no reaction (leader change or leader state change)")
    if outcome["outcome"] == "no_reaction" and t_detect is not None and promotes:
        out["notes"].append(f"the manager's first event after the fault ({detect_how}, at "
                            f"+{t_detect - t_fault:.3f}s) moved no leader: no failover, so no detection is reported")
        t_detect, detect_how, detect_unc = None, None, None
    if not promotes and t_detect is not None and t_first_ok is not None and t_detect > t_first_ok:
        out["notes"].append(f"view change seen {t_detect - t_first_ok:.3f}s after the first write went through "
                            "(poll granularity); t_detect clamped to it (the cluster had moved on before)")
        t_detect = t_first_ok
    if t_detect is not None and t_promoted is not None and t_detect > t_promoted:
        out["notes"].append(f"manager signal seen {t_detect - t_promoted:.3f}s after the node was writable "
                            "(poll granularity); t_detect clamped to t_promoted (the manager acted before)")
        t_detect = t_promoted

    # DM: detection ends when the confirmation monitor agreed (its sub-phases: the watcher's
    # detection, then the monitor's confirmation); every other manager: at its first reaction
    t_confirmed = _confirmed(probe, t_detect, window_end) if t_detect is not None else None
    if t_confirmed is not None and t_promoted is not None and t_confirmed > t_promoted:
        out["notes"].append(f"the monitor's confirmation seen {t_confirmed - t_promoted:.3f}s after the node was "
                            "writable (poll granularity); t_confirmed clamped to t_promoted")
        t_confirmed = t_promoted
    detected = t_confirmed if t_confirmed is not None else t_detect

    t_recovered = recovered_at(rec, t_first_ok, baseline, tps_fraction, hold) if t_first_ok else None
    if baseline is None:
        out["notes"].append("no baseline throughput: t_recovered is null")
    phases: dict[str, Any] = {
        "detection_s": _diff(detected, t_fault),
        "promotion_s": _diff(t_promoted, detected),
        "reconnect_s": _diff(t_first_ok, t_promoted if promotes else detected),
        "stabilisation_s": _diff(t_recovered, t_first_ok),
    }
    if t_confirmed is not None:
        # the watcher's detection is known apart only when a reaction came before the confirmation
        split = t_detect is not None and t_detect < t_confirmed
        phases["detection_parts"] = {"watcher_s": _diff(t_detect, t_fault) if split else None,
                                     "confirmation_s": _diff(t_confirmed, t_detect) if split else None}
    if t_last_ok is not None and t_last_ok - t_fault > 1.0:
        out["notes"].append(f"writes kept succeeding for {t_last_ok - t_fault:.3f}s after the fault before the "
                            "outage: check rpo and split_brain for where they went")
    out.update({
        **clients, "t_detect": t_detect, "t_confirmed": t_confirmed,
        "detect_signal": detect_how, "detect_uncertainty_s": detect_unc, "t_promoted": t_promoted,
        "promoted_evidence": evidence,
        "old_primary": old_primary, "new_primary": new_primary, "t_recovered": t_recovered,
        "phases": phases, **outcome,
    })
    out["effect"] = _effect(rec, t_fault, t_recovered or window_end, baseline)
    return out


# the server's own refusals, as the outcome says them (the class that opened most clients' outages)
REFUSALS = {"resources": "it refused writes meanwhile: out of disk space, memory or connections",
            "read_only": "it refused writes as read-only meanwhile"}


def _refusal(gaps: list[Any]) -> str | None:
    classes = Counter(g.first_err_class for g in gaps)
    top = classes.most_common(1)[0][0] if classes else None
    return top if top in REFUSALS else None


def fault_outcome(probe: ProbeLog, t_fault: float, window_end: float, *, outage: bool,
                  target_host: str | None = None, refused: str | None = None) -> dict[str, Any]:
    """What the fault led to, from the role probe between the fault and the next disturbance:
    `failover` (another member became the primary), `restarted_in_place` (the primary left its
    role and the same member came back as the only one), `no_reaction` (the primary never left
    its role: the manager held its leader through the fault; `refused` names the server's own
    refusal that opened the clients' outages, if one did), `no_writer` (the primary left and
    nobody took over within the window). Split-brain is judged over the same window by the caller
    from the split-brain check. `outcome_text` says it in words for the evidence; `t_rejoined` is
    when the old primary was first seen as a replica after a failover (null otherwise);
    `t_read_only` when the old primary, having left its role, was first seen running read-only
    before it or another member was the primary again (a demotion when the fault was on another
    host, `target_host`: etcd, a proxy; the manager's own doing)."""
    old = next((m for m, r in role_at(probe, t_fault).items() if r == "primary"), None)
    samples = [(t, m, r) for t, m, r in probe.samples if t_fault < t < window_end]
    t_left = next((t for t, m, r in samples if m == old and r != "primary"), None)
    after = [(t, m) for t, m, r in samples if r == "primary" and m != old]
    back = next((t for t, m, r in samples if t_left is not None and t > t_left and m == old and r == "primary"), None)
    # the old primary following the new one: its first sample as a replica once another member
    # took over (a rejoin: restarted, rewound or rebuilt as the manager does it)
    rejoined = next((t for t, m, r in samples if after and t >= after[0][0] and m == old and r == "replica"), None)
    until = min(x for x in (back, after[0][0] if after else None, window_end) if x is not None)
    read_only = next((t for t, m, r in samples if t_left is not None and t_left <= t < until and m == old
                      and r == "replica"), None)
    times = {"t_new_primary": after[0][0] if after else None, "new_primary": after[0][1] if after else None,
             "t_back": back, "t_left": t_left, "t_rejoined": rejoined, "t_read_only": read_only}
    demoted = read_only is not None and target_host is not None and target_host != old

    def since(t: float) -> str:
        return f"+{t - t_fault:.1f} s"

    if old is None:
        kind, text = "no_writer", "no primary before the fault"
    elif after:
        kind, text = "failover", f"failover from {old} to {after[0][1]}"
    elif t_left is None:
        kind = "no_reaction"
        text = f"no failover: {old} stayed the primary through the fault" + (
            f" ({REFUSALS[refused] if refused else 'writes stopped meanwhile'})" if outage else "")
    elif back is not None and read_only is not None:
        kind = "restarted_in_place"
        text = (f"{old} {'demoted by its manager' if demoted else 'left the primary role'} at {since(t_left)} "
                f"(read-only from {since(read_only)}) and was the primary again at {since(back)}; no other member "
                "was promoted (no failover)")
    elif back is not None:
        kind, text = "restarted_in_place", f"{old} came back as the primary in place (no failover)"
    elif read_only is not None:
        kind = "no_writer"
        text = (f"{old} {'demoted by its manager' if demoted else 'left the primary role'} at {since(t_left)} "
                f"(read-only from {since(read_only)}) and no member took over before the window ended")
    else:
        kind, text = "no_writer", f"{old} left the primary role and no member took over before the window ended"
    return {"outcome": kind, "outcome_text": text, "primary_at_fault": old, "window_end": window_end, **times}


def non_primary_spans(probe: ProbeLog, t_fault: float, window_end: float) -> list[dict[str, Any]]:
    """Members the manager's poll saw in a non-Primary component (a multi-writer cluster's
    minority: up, answering, refusing every write) between the fault and the window's end: first
    and last sample of each stretch, relative to the fault."""
    spans: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for t, _, states in probe.manager:
        if not t_fault <= t < window_end:
            continue
        for member, state in states.items():
            refusing = state.split("/")[1:2] == ["non-Primary"]
            if refusing and member not in open_:
                open_[member] = {"member": member, "from_s": round(t - t_fault, 3), "to_s": round(t - t_fault, 3)}
                spans.append(open_[member])
            elif refusing:
                open_[member]["to_s"] = round(t - t_fault, 3)
            else:
                open_.pop(member, None)
    return spans


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 6)


def _detect(probe: ProbeLog, t_fault: float, window_end: float,
            uncertainty: float = 0.0) -> tuple[float | None, str | None, float | None]:
    """The first event after the fault that shows the HA manager reacting (its own event stream,
    or its view as polled): (time, what, uncertainty)."""
    hits = sorted((e for e in probe.manager_events if e.kind in REACTION_EVENTS
                   and t_fault - uncertainty <= e.t < window_end), key=lambda e: e.t)
    if not hits:
        return None, None, None
    first = hits[0]
    return first.t, f"{first.source}: {first.detail}", first.uncertainty_s


def _confirmed(probe: ProbeLog, since: float, window_end: float) -> float | None:
    """The first confirmation event (DM's monitor agreed the primary failed) at or after the
    first reaction and before the window ends."""
    return min((e.t for e in probe.manager_events if e.kind == CONFIRMATION_EVENT and since <= e.t < window_end),
               default=None)


def recovered_at(rec: Recorder, since: float, baseline: float | None, fraction: float, hold: float) -> float | None:
    """The start of the first stretch after `since` where the 1 s rolling throughput stays at or
    above fraction x baseline for `hold` seconds (t_recovered); None when there is none. The drill
    asks it live to keep its load running until recovery is seen, the analysis afterwards."""
    if not baseline:
        return None
    threshold = fraction * baseline
    series = [(t, v) for t, v in rolling_tps(rec) if t >= since]
    start = None
    for t, v in series:
        if v >= threshold:
            if start is None:
                start = t
            if t - start >= hold:
                return start
        else:
            start = None
    return None


def _effect(rec: Recorder, t0: float, t1: float, baseline: float | None) -> dict[str, Any]:
    """Throughput during [t0, t1] against baseline: dip depth and transactions lost to it."""
    series = [(t, v) for t, v in rolling_tps(rec) if t0 <= t <= t1]
    df = rec.to_frame()
    sel = df[(df["t"] >= t0) & (df["t"] < t1)]
    done = int(sel["write_ok"].sum()) if len(sel) else 0
    out: dict[str, Any] = {"window_s": round(t1 - t0, 3), "writes_ok": done, "baseline_tps": baseline}
    if baseline and series:
        low = min(v for _, v in series)
        mean = done / max(1e-9, t1 - t0)
        out.update({"min_tps": round(low, 1), "dip_depth": round(1 - low / baseline, 4),
                    "mean_tps": round(mean, 1), "tps_change": round(mean / baseline - 1, 4),
                    "transactions_lost_to_dip": max(0, round(baseline * (t1 - t0) - done))})
    return out
