"""A drill's figures and verdicts, in two steps: `gather_truth` reads the cluster after the run (the
only database reads: rows present, bank total, per-member digests, always directly, never
through the load's relays); `analyse` is a pure function of the recorded history, the probe's
log, the faults and that truth, and returns the results plus the phase marks to record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from chaoskit.analysis.catchup import standby_catchup
from chaoskit.analysis.checks import convergence_verdict, gather_convergence, split_brain
from chaoskit.analysis.errors import error_table
from chaoskit.analysis.failover import (
    MANAGED_SERVICE,
    NO_MANAGER,
    analyse_fault,
    baseline_tps,
    client_figures,
    fault_gaps,
    role_at,
)
from chaoskit.analysis.restore import archive_figures, disaster_action, restore_figures
from chaoskit.analysis.verdict import checked, merge
from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.ha.registry import is_multi_writer
from chaoskit.inventory.models import Cluster
from chaoskit.playbook.models import Playbook
from chaoskit.playbook.record import DrillInputs, DrillRecord
from chaoskit.recorder import OK, Recorder, error_rate
from chaoskit.topology.probe import ProbeLog, writer_view
from chaoskit.workload.checks import Check, Judging
from chaoskit.workload.engine import BUILTIN, engine, measures
from chaoskit.workload.workloads import data_checks

MARKS = ("t_fault", "t_detect", "t_promoted", "t_first_ok", "t_recovered")
# why an external tool's group has no RPO (results.groups.<name>.rpo_null_reason)
TOOL_RPO_NULL = ("{tool} does not say which of its writes were acknowledged, so none can be looked up after the "
                 "run: this group's RPO is not measured (chaoskit's own clients' is)")
TOOL_RTO_RESOLUTION = ("{tool} reports rates every {s:g} s, never single transactions: this group's outage edges "
                       "are the reports that saw them, so its RTO is late by up to {s:g} s, never early, and its "
                       "write gap is long by up to {d:g} s (its last write before the outage was up to {s:g} s "
                       "later than the report that counted it)")
RTO_FIGURES = ("rto_first_client_s", "rto_all_clients_s", "write_gap_s")  # a group's worst over its outages


class LoadSource(Protocol):
    """What the truth is read through: the load's workload (its tables) and what the load read
    before it started (`before`: the update workload's versions)."""

    workload: Any
    before: Any


def gather_truth(inputs: DrillInputs, run_id: str, load: LoadSource, driver: Driver | None = None) -> dict[str, Any]:
    """Read the cluster after the run, as the load's workload says its checks need: through the
    writer (causally) what each check reads (`Workload.truth_readers`), and from each member the
    workload's digest for `replica_convergence`. What cannot be read is said in the truth
    (`writer_error`, a reading's `error`), never raised."""
    pb, cluster = inputs.playbook, inputs.cluster
    truth: dict[str, Any] = {}
    base = driver or driver_for(cluster, inputs.inventory)
    driver = base.tuned(connect_timeout=pb.load.connect_timeout, op_timeout=60.0)
    readers = load.workload.truth_readers(pb.checks, load.before)
    writer = None
    try:
        if readers:
            writer = driver.connect_writer()
            driver.causal_reads(writer)
        for key, read in readers.items():
            truth[key] = checked(read, writer)
    except Exception as exc:
        truth["writer_error"] = f"no writer after the drill: {exc}"
    finally:
        Driver.close_quietly(writer)
    if "replica_convergence" in pb.checks:
        truth["convergence"] = checked(gather_convergence, driver, cluster, load.workload.member_digest,
                                       pb.recovery.within, rows_only_added=load.workload.rows_only_added,
                                       multi_writer=is_multi_writer(cluster))
    return truth


def together_by_step(disturbances: list[dict[str, Any]], probe: ProbeLog) -> list[dict[str, Any]]:
    """One disturbance per step: the faults a step started at one instant (several faults, or a
    target on several hosts) are one event for the cluster, analysed once over one window. It is
    named by the fault on the member that was the primary then (what a failover answers), else the
    first to take effect; the others are listed with it (`together_with`)."""
    out: list[dict[str, Any]] = []
    by_step: dict[int, list[dict[str, Any]]] = {}
    for d in disturbances:
        if d.get("step") is None or str(d.get("id", "")).startswith("action"):
            out.append(d)
        else:
            by_step.setdefault(d["step"], []).append(d)
    for group in by_step.values():
        primary = [d for d in group if role_at(probe, d["t_effect"]).get(d["host"]) == "primary"]
        lead = {**(primary or group)[0]}
        others = [d for d in group if d["id"] != lead["id"]]
        if others:
            lead["together_with"] = [{"id": d["id"], "kind": d["kind"], "host": d["host"], "t_effect": d["t_effect"],
                                      "t_reverted": d.get("t_reverted")} for d in others]
        out.append(lead)
    return sorted(out, key=lambda f: f["t_effect"])


def analyse(pb: Playbook, run: DrillRecord, rec: Recorder, probe: ProbeLog, truth: dict[str, Any],
            cluster: Cluster | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The drill's `results` (per fault figures, checks, SLOs, verdict) and the phase marks to
    record, from what it recorded and read: a pure function of its arguments. `cluster` matters
    only for a multi-writer cluster (None: a single writer)."""
    base = baseline_tps(rec, run.t0 + pb.load.warmup, run.t0 + pb.baseline)
    observable = bool(run.preflight.get("ha", {}).get("manager") not in (None, "none"))
    no_detection = None if observable else MANAGED_SERVICE if cluster is not None and cluster.managed else NO_MANAGER
    multi_writer = cluster is not None and is_multi_writer(cluster)
    # the roles as the clients meet them: in a multi-writer cluster the one writer they use
    roles = writer_view(probe, [m.host for m in cluster.members]) if multi_writer and cluster else probe
    # Faults and actions alike: a planned switchover is analysed from the instant it was issued.
    disturbances = [f.to_dict() for f in run.faults] + [
        {"id": f"action{i}", "kind": a["kind"], "host": a.get("member"), "t_effect": a["t_sent"],
         "t_scheduled": a.get("t_scheduled"), "step": a.get("step")}
        for i, a in enumerate(run.actions) if a["kind"] == "switchover"]
    first_at = together_by_step(sorted(disturbances, key=lambda f: f["t_effect"]), probe)
    faults = []
    for i, f in enumerate(first_at):
        window_end = first_at[i + 1]["t_effect"] if i + 1 < len(first_at) else run.ended
        faults.append(checked(analyse_fault, f, rec, roles, baseline=base, window_end=window_end,
                              tps_fraction=pb.recovery.tps_fraction, hold=pb.recovery.hold,
                              no_detection=no_detection, promotes=not multi_writer))
    for f, fa in zip(first_at, faults, strict=True):
        if fa.get("valid") != "unknown" and not multi_writer and \
                role_at(probe, f["t_effect"]).get(f["host"]) == "replica":
            fa["catchup"] = checked(standby_catchup, probe, f["host"], f["t_effect"], f.get("t_reverted"),
                                    fa.get("window_end") or run.ended,
                                    baseline=(run.t0 + pb.load.warmup, run.t0 + pb.baseline), actions=run.actions)
    marks = [{"t": fa[key], "mark": key, "fault": fa.get("id")} for fa in faults for key in MARKS if fa.get(key)]
    checks: dict[str, Any] = {}
    outage_faults = [f for f in faults if f.get("outage")]
    t_fault = outage_faults[0]["t_fault"] if outage_faults else (faults[0]["t_fault"] if faults else None)
    t_fault = t_fault if t_fault is not None else disaster_instant(run.actions)
    error = truth.get("writer_error")
    judging = Judging(rec, t_fault, pb.slo.rpo_max_writes, len(run.groups), error, _recovered(outage_faults, faults),
                      **restore_judging(run.actions))
    for check in own_checks(pb):  # the workload's checks of its data, each judged the same way
        checks[check.name] = check.judge(truth.get(check.reads), judging)
    brain = checked(split_brain, roles, pb.probes.interval, multi_writer=multi_writer)
    if "split_brain" in pb.checks:
        checks["split_brain"] = brain
    for fa in faults:
        mark_split_brain(fa, brain)
    expected = expectations(pb, faults, run.actions)
    if expected["steps"]:
        checks["expected_outcome"] = expected
    if "convergence" in truth:
        said = logged_complaints(run.logs)
        checks["replica_convergence"] = checked(convergence_verdict, truth["convergence"],
                                                run.preflight.get("primary_before"), run.preflight.get("ha", {}), said)
    for name in pb.checks:  # a check the playbook asked for is never dropped: unread is unknown
        checks.setdefault(name, {"valid": "unknown", "error": error or f"nothing was read for the {name} check"})
    groups = group_figures(run.groups, pb, rec, first_at, faults, truth, t_fault, run.events)
    restored = restore_figures(run.actions, [f.to_dict() for f in run.faults],
                               {m.host for m in cluster.members} if cluster is not None else set())
    slo = _slo(pb, faults, checks, rec, run.ended, groups, restored)
    advisory = {c.name for c in own_checks(pb) if c.severity != "fail"}  # said, never failing the verdict
    verdict = merge([c.get("valid", "unknown") for name, c in checks.items() if name not in advisory]
                    + [s["ok"] for s in slo.values()])
    if run.aborted:
        verdict = "aborted"
    out = {"baseline_tps": base, "faults": faults, "rpo": checks.get("rpo"), "checks": checks, "slo": slo,
           "verdict": verdict, "errors": error_table(rec.errors, faults, run.t0, rec.errors_dropped)}
    if groups:
        out["groups"] = groups
    if restored is not None:
        out["restore"] = restored
    archive = archive_figures(run.archive, run.t0)
    if archive is not None:
        out["archive"] = archive
    return out, marks


def restore_judging(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """What a restore tells the checks (`Judging`): the data read is the restored server's, judged
    against the restore's target (the instant the data was recovered to on the control clock);
    the disaster is the instant the first disaster step started (the loss is counted back from it)."""
    restore = next((a for a in actions if a.get("kind") == "restore"), None)
    if restore is None:
        return {}
    target = restore.get("target") or {}
    return {"restored": True, "restore_target": target.get("t"),
            "restore_margin_s": float(target.get("margin_s") or 0.0)}


def disaster_instant(actions: list[dict[str, Any]]) -> float | None:
    """When the run's disaster action was sent (None without one)."""
    drop = disaster_action(actions)
    return float(drop["t_sent"]) if drop is not None and drop.get("t_sent") else None


def _recovered(outage_faults: list[dict[str, Any]], faults: list[dict[str, Any]]) -> float | None:
    """The recovery of the fault `t_fault` names (the first that caused an outage, else the first)."""
    first = outage_faults[0] if outage_faults else (faults[0] if faults else None)
    return first.get("t_recovered") if first else None


def own_checks(pb: Playbook) -> list[type[Check]]:
    """The checks of its own data the playbook's workload makes (none for a load of tools only)."""
    if not pb.load.builtin_clients:
        return []
    return data_checks(pb.load.workload_name, pb.load.workload_params(), pb.checks)


def logged_complaints(kept: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per host, the error lines its logs wrote in the run's window (`hostlogs.complaints`), each
    prefixed with the log's label (`postgres: ...`, `patroni: ...`)."""
    said: dict[str, list[str]] = {}
    for record in kept:
        said.setdefault(record["host"], []).extend(f"{record['label']}: {line}"
                                                   for line in record.get("complaints") or [])
    return said


def group_figures(groups: dict[str, dict[str, Any]], pb: Playbook, rec: Recorder, disturbances: list[dict[str, Any]],
                  faults: list[dict[str, Any]], truth: dict[str, Any], t_fault: float | None,
                  events: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Each client group's own figures (results.groups.<name>): per fault what its clients saw
    (outage edges, first client back, all clients back, write gap, per-client RTO), and its RPO:
    the acknowledged writes of its workers that are gone, when they were acknowledged relative to
    the fault and on which node. The group's `rto_first_client_s`, `rto_all_clients_s` and
    `write_gap_s` are the worst over the faults that caused it an outage (null if one of them
    never ended for it)."""
    per_group = [c for c in own_checks(pb) if c.per_group]
    nodes = {(o.worker, o.seq): o.node for o in rec.history.kept_ops()
             if o.outcome == OK and o.seq is not None and o.node is not None} if per_group else {}
    outage_faults = [f for f in faults if f.get("outage")]
    judging = Judging(rec, t_fault, pb.slo.rpo_max_writes, len(groups), truth.get("writer_error"),
                      _recovered(outage_faults, faults))
    out: dict[str, Any] = {}
    for name, group in groups.items():
        workers = set(group["workers"])
        per_fault = []
        for dist, fa in zip(disturbances, faults, strict=True):
            if "t_fault" not in fa:  # its analysis failed (reported there)
                continue
            gaps = fault_gaps(rec, dist, fa["window_end"], workers)
            figures = client_figures(gaps, fa["t_fault"]) if gaps else {
                "outage": False, "rto_first_client_s": None, "rto_all_clients_s": None, "write_gap_s": None,
                "per_client_rto_s": {}}
            per_fault.append({"id": fa["id"], "t_fault": fa["t_fault"], **figures})
        outages = [f for f in per_fault if f["outage"]]
        applies = pb.slo.group in (None, name)
        tool = group.get("tool", "builtin")
        judged: dict[str, Any] = {"rpo": None}  # a check's figure for this group's workers, where it has one
        for check in per_group if measures(tool).rpo else ():
            figure = check.judge_group(truth.get(check.reads), judging, workers,
                                       pb.slo.rpo_max_writes if applies else None, nodes)
            if figure is not None:
                judged[check.name] = figure
        out[name] = {
            "profile": group["profile"], "tool": tool, "workers": sorted(workers),
            **{key: _worst([f[key] for f in outages]) for key in RTO_FIGURES}, **judged, "faults": per_fault}
        if group.get("where") is not None:  # its clients ran on loader hosts: which, and how exact their clocks are
            out[name]["where"], out[name]["loaders"] = group["where"], group.get("loaders")
            out[name]["loader_clock_error_s"] = loader_clock_error(name, events)
        if not measures(tool).rpo:
            out[name]["rpo_null_reason"] = TOOL_RPO_NULL.format(tool=tool)
        if engine(tool).external():
            out[name]["tool_restarts"] = tool_restarts(name, events)
        if measures(tool).rto_resolution_s:
            out[name]["rto_resolution_s"] = measures(tool).rto_resolution_s
            out[name]["rto_resolution_note"] = TOOL_RTO_RESOLUTION.format(
                tool=tool, s=measures(tool).rto_resolution_s, d=2 * measures(tool).rto_resolution_s)
    return out


def loader_clock_error(group: str, events: Sequence[dict[str, Any]]) -> float | None:
    """How far a group's op stamps can be off the control clock when its clients ran on loader
    hosts. An agent stamps with its host's clock corrected by the offset measured before the start
    (exact to within that measurement's uncertainty, from the `load_sources` event) and measured
    again every 30 s (`loader_clock`: its `error_s`, the change since the previous measurement plus
    both uncertainties); the bound is the worst of those over the group's loaders. Every time
    figure of the group is exact to within it, beside the fault's own offset uncertainty. None
    when no loader of the group was measured."""
    bounds = [s.get("clock_uncertainty_s") or 0.0
              for e in events if e.get("kind") == "load_sources" for s in e.get("sources") or ()
              if s.get("group") == group]
    bounds += [e.get("error_s") or 0.0 for e in events if e.get("kind") == "loader_clock" and e.get("group") == group]
    return round(max(bounds), 6) if bounds else None


def tool_restarts(group: str, events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the drill did for a tool that gives clients up (pgbench aborts a client whose
    connection broke): how many clients it gave up, how many were back after being started again,
    the starts that found no writer, and the longest a client was down."""
    mine = [e for e in events if e.get("group") == group]
    back = [e for e in mine if e["kind"] == "tool_client_back"]
    return {"aborted": sum(1 for e in mine if e["kind"] == "tool_client_aborted"), "back": len(back),
            "failed_starts": sum(e.get("failed_starts", 0) for e in back),
            "longest_down_s": max((e["down_s"] for e in back), default=None),
            "killed_at_stop": sum(1 for e in mine if e["kind"] == "tool_client_killed"),
            # JMeter: the plan ended (or the JVM failed) before the load's stop; threads beyond `workers`
            "ended_early": sum(1 for e in mine if e["kind"] == "tool_ended"),
            "samples_dropped": sum(e.get("samples", 0) for e in mine if e["kind"] == "tool_samples_dropped")}


def _worst(values: list[float | None]) -> float | None:
    """The largest, or None if any is None (an outage that never ended); 0.0 for no outage."""
    return None if any(v is None for v in values) else max(values, default=0.0)  # type: ignore[type-var]


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


def expectations(pb: Playbook, faults: list[dict[str, Any]], actions: list[dict[str, Any]]) -> dict[str, Any]:
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


def _slo(pb: Playbook, faults: list[dict[str, Any]], checks: dict[str, Any], rec: Recorder,
         ended: float, groups: dict[str, Any] | None = None, restored: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each SLO against the worst of the client groups it applies to (every group unless
    `slo.group` names one); without groups, against the totals. `rto_max` judges all clients back:
    the moment the last client that lost service wrote again, per group and overall; in a restore
    drill, the restore's RTO (the disaster to the restored server taking a write)."""
    out: dict[str, Any] = {}
    scope = {n: g for n, g in (groups or {}).items() if pb.slo.group in (None, n)}
    if pb.slo.rto_max is not None and restored is not None:
        rto = restored.get("rto_s")
        out["rto_max"] = {"target": pb.slo.rto_max, "measured": rto, "judges": "restore.rto_s",
                          "ok": rto is not None and rto <= pb.slo.rto_max}
    elif pb.slo.rto_max is not None:
        if scope:
            by_group = {n: g["rto_all_clients_s"] for n, g in scope.items()}
            worst = _worst(list(by_group.values()))
        else:
            by_group = None
            worst = _worst([f.get("rto_all_clients_s") for f in faults if f.get("outage")])
        out["rto_max"] = {"target": pb.slo.rto_max, "measured": worst, "judges": "rto_all_clients_s",
                          "ok": worst is not None and worst <= pb.slo.rto_max}
        if by_group is not None:
            out["rto_max"]["by_group"] = by_group
    if pb.slo.rpo_max_writes is not None:
        judged = {n: g for n, g in scope.items() if measures(g.get("tool", BUILTIN)).rpo}  # a tool's may be null
        if judged and all(g.get("rpo") for g in judged.values()):
            by_lost = {n: g["rpo"]["lost_acknowledged"] for n, g in judged.items()}
            lost = max(by_lost.values())
        else:
            by_lost, lost = None, (checks.get("rpo") or {}).get("lost_acknowledged")
        out["rpo_max_writes"] = {"target": pb.slo.rpo_max_writes, "measured": lost,
                                 "ok": lost is not None and lost <= pb.slo.rpo_max_writes}
        if by_lost is not None:
            out["rpo_max_writes"]["by_group"] = by_lost
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
        if f.get("t_fault") is None or f.get("rto_all_clients_s") is None:
            return None, "a client never wrote again"
        backs.append(f["t_recovered"] or f["t_fault"] + f["rto_all_clients_s"])
    return max(backs), "every client writing again (throughput did not reach the recovery threshold)"
