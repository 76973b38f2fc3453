"""A drill's figures and verdicts, in two steps: `gather_truth` reads the cluster after the run (the
only database reads: rows present, bank total, per-member digests, always directly, never
through the load's relays); `analyse` is a pure function of the recorded history, the probe's
log, the faults and that truth, and returns the results plus the phase marks to record."""

from __future__ import annotations

from typing import Any

from chaoskit.analysis.catchup import standby_catchup
from chaoskit.analysis.checks import convergence_verdict, gather_convergence, split_brain
from chaoskit.analysis.durability import rpo_check
from chaoskit.analysis.failover import analyse_fault, baseline_tps, role_at
from chaoskit.analysis.verdict import checked, merge
from chaoskit.db.base import Driver, driver_for
from chaoskit.recorder import Recorder

MARKS = ("t_fault", "t_detect", "t_promoted", "t_first_ok", "t_recovered")


def gather_truth(ctx: Any, runner: Any) -> dict[str, Any]:
    pb = ctx.playbook
    truth: dict[str, Any] = {}
    driver = driver_for(ctx.cluster, ctx.inventory, connect_timeout=pb.load.connect_timeout, op_timeout=60.0)
    writer = None
    try:
        writer = driver.connect_writer()
        if "rpo" in pb.checks:
            truth["ledger_present"] = checked(lambda: {"rows": runner.workload.present(writer)})
        if "bank" in pb.checks:
            truth["bank"] = checked(lambda: dict(zip(("accounts", "total"), runner.workload.total(writer),
                                                     strict=True)) | {"expected": runner.workload.expected_total()})
    except Exception as exc:
        truth["writer_error"] = f"no writer after the drill: {exc}"
    finally:
        Driver.close_quietly(writer)
    if "replica_convergence" in pb.checks and pb.load.workload == "ledger":
        truth["convergence"] = checked(gather_convergence, driver, ctx.cluster, ctx.inventory, ctx.run_id,
                                       pb.recovery.within)
    return truth


def analyse(ctx: Any, truth: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pb, rec, probe = ctx.playbook, ctx.recorder, ctx.probe
    base = baseline_tps(rec, ctx.t0 + pb.load.warmup, ctx.t0 + pb.baseline)
    observable = bool(ctx.preflight.get("ha", {}).get("manager") not in (None, "none"))
    # Faults and actions alike: a planned switchover is analysed from the instant it was issued.
    disturbances = [f.to_dict() for f in ctx.faults] + [
        {"id": f"action{i}", "kind": a["kind"], "host": a.get("member"), "t_effect": a["t_sent"],
         "t_scheduled": a.get("t_scheduled"), "step": a.get("step")}
        for i, a in enumerate(ctx.actions) if a["kind"] == "switchover"]
    first_at = sorted(disturbances, key=lambda f: f["t_effect"])
    faults = []
    for i, f in enumerate(first_at):
        window_end = first_at[i + 1]["t_effect"] if i + 1 < len(first_at) else ctx.ended
        faults.append(checked(analyse_fault, f, rec, probe.log, baseline=base, window_end=window_end,
                              tps_fraction=pb.recovery.tps_fraction, hold=pb.recovery.hold,
                              manager_observable=observable))
    for f, fa in zip(first_at, faults, strict=True):
        if fa.get("valid") != "unknown" and role_at(probe.log, f["t_effect"]).get(f["host"]) == "replica":
            fa["catchup"] = checked(standby_catchup, probe.log, f["host"], f["t_effect"], f.get("t_reverted"),
                                    fa.get("window_end") or ctx.ended,
                                    baseline=(ctx.t0 + pb.load.warmup, ctx.t0 + pb.baseline), actions=ctx.actions)
    marks = [{"t": fa[key], "mark": key, "fault": fa.get("id")} for fa in faults for key in MARKS if fa.get(key)]
    checks: dict[str, Any] = {}
    outage_faults = [f for f in faults if f.get("outage")]
    t_fault = outage_faults[0]["t_fault"] if outage_faults else (faults[0]["t_fault"] if faults else None)
    error = truth.get("writer_error")
    if "rpo" in pb.checks:
        present = truth.get("ledger_present") or {"valid": "unknown", "error": error}
        checks["rpo"] = rpo_check(rec, present["rows"], t_fault, pb.slo.rpo_max_writes) if "rows" in present \
            else present
    if "bank" in pb.checks:
        bank = truth.get("bank") or {"valid": "unknown", "error": error}
        checks["bank"] = bank if "total" not in bank else {"valid": bank["total"] == bank["expected"], **bank}
    brain = checked(split_brain, probe.log, pb.probes.interval)
    if "split_brain" in pb.checks:
        checks["split_brain"] = brain
    for fa in faults:
        mark_split_brain(fa, brain)
    expected = expectations(pb, faults, ctx.actions)
    if expected["steps"]:
        checks["expected_outcome"] = expected
    if "convergence" in truth:
        checks["replica_convergence"] = checked(convergence_verdict, truth["convergence"],
                                                ctx.preflight.get("primary_before"), ctx.preflight.get("ha", {}))
    slo = _slo(pb, faults, checks, rec, ctx.ended)
    verdict = merge([c.get("valid", "unknown") for c in checks.values()] + [s["ok"] for s in slo.values()])
    if ctx.aborted:
        verdict = "aborted"
    return ({"baseline_tps": base, "faults": faults, "rpo": checks.get("rpo"), "checks": checks, "slo": slo,
             "verdict": verdict}, marks)


def mark_split_brain(fault: dict[str, Any], brain: dict[str, Any]) -> None:
    """A fault in whose window two members were writable at once led to split-brain, whatever
    else happened."""
    if "outcome" not in fault:
        return
    t0, t1 = fault["t_fault"], fault["window_end"]
    hits = [o for o in brain.get("overlaps") or [] if o["to"] > t0 and o["from"] < t1]
    if hits:
        fault["outcome"] = "split_brain"
        fault["outcome_text"] = (f"split-brain: {' and '.join(hits[0]['members'])} both answered as writable "
                                 f"primaries for {hits[0]['to'] - hits[0]['from']:.1f}s from "
                                 f"+{hits[0]['from'] - t0:.3f}s after the fault")


def expectations(pb: Any, faults: list[dict[str, Any]], actions: list[dict[str, Any]]) -> dict[str, Any]:
    """Each step that says `expect: failover` (and every switchover) against what happened; every
    action must have succeeded: a drill whose fault did not lead where it was meant to, or whose
    switchover or rejoin failed, has not shown what it set out to show."""
    rows = []
    for f in faults:
        step = f.get("step")
        if step is None:
            continue
        wanted = "failover" if pb.steps[step].expect == "failover" or f.get("kind") == "switchover" else None
        if wanted:
            rows.append({"step": step, "fault": f.get("id"), "expected": wanted, "outcome": f.get("outcome"),
                         "ok": f.get("outcome") == wanted, "text": f.get("outcome_text")})
    for a in actions:
        rows.append({"step": a.get("step"), "action": a["kind"], "expected": "succeeded",
                     "outcome": "succeeded" if a.get("ok") else "failed", "ok": bool(a.get("ok")),
                     "text": (a.get("answer") or "")[-300:] if not a.get("ok") else None})
    return {"valid": all(r["ok"] for r in rows), "steps": rows}


def _slo(pb: Any, faults: list[dict[str, Any]], checks: dict[str, Any], rec: Recorder,
         ended: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if pb.slo.rto_max is not None:
        rtos = [f.get("rto_s") for f in faults if f.get("outage")]
        worst = None if any(r is None for r in rtos) else max(rtos, default=0.0)
        out["rto_max"] = {"target": pb.slo.rto_max, "measured": worst,
                          "ok": worst is not None and worst <= pb.slo.rto_max}
    if pb.slo.rpo_max_writes is not None:
        lost = (checks.get("rpo") or {}).get("lost_acknowledged")
        out["rpo_max_writes"] = {"target": pb.slo.rpo_max_writes, "measured": lost,
                                 "ok": lost is not None and lost <= pb.slo.rpo_max_writes}
    if pb.slo.max_error_rate_after_recovery is not None:
        start, anchor = recovery_start([f for f in faults if f.get("outage")])
        rate = None
        if start is not None:
            w = rec.window(start, ended + rec.interval)  # to the end of the run (the load stopped before it)
            rate = error_rate(w)
        elif not any(f.get("outage") for f in faults):
            rate = error_rate(rec.totals())
            anchor = "whole run (no outage)"
        out["max_error_rate_after_recovery"] = {"target": pb.slo.max_error_rate_after_recovery, "measured": rate,
                                                "from": anchor,
                                                "ok": rate is not None and rate <= pb.slo.max_error_rate_after_recovery}
    return out


def error_rate(counts: dict[str, Any]) -> float:
    """(fail + info) / all ops, 0 with no ops: the one formula every abort rule and SLO uses."""
    ops = counts["ok"] + counts["fail"] + counts["info"]
    return round((counts["fail"] + counts["info"]) / ops, 6) if ops else 0.0


def recovery_start(outages: list[dict[str, Any]]) -> tuple[float | None, str]:
    """Where "after recovery" starts: the latest T_recovered; where throughput never got back to
    its threshold (a real finding, reported as stabilisation null), the moment every client had
    written again, so the error-rate SLO still judges the errors and not the throughput. None if
    a client never came back."""
    if not outages:
        return None, ""
    if all(f.get("t_recovered") for f in outages):
        return max(f["t_recovered"] for f in outages), "t_recovered"
    backs = []
    for f in outages:
        per_client = f.get("per_client_rto_s") or {}
        if f.get("t_fault") is None or not per_client or any(v is None for v in per_client.values()):
            return None, "a client never wrote again"
        backs.append(f["t_recovered"] or f["t_fault"] + max(per_client.values()))
    return max(backs), "every client writing again (throughput did not reach the recovery threshold)"
