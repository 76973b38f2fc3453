"""The drill: one function, the lifecycle of DESIGN.md."""

from __future__ import annotations

import getpass
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoskit.analysis.checks import replica_convergence, split_brain
from chaoskit.analysis.durability import rpo_check
from chaoskit.analysis.failover import analyse_fault, baseline_tps
from chaoskit.analysis.verdict import checked, merge
from chaoskit.db.base import Driver, driver_for
from chaoskit.errors import ChaoskitError
from chaoskit.faults.client_link import ClientLink
from chaoskit.faults.manager import FaultManager, InjectedFault
from chaoskit.faults.targets import CLIENT, split_target
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.playbook.models import Playbook, Step
from chaoskit.playbook.preflight import run_preflight
from chaoskit.recorder import Recorder
from chaoskit.topology import patroni
from chaoskit.topology.probe import RoleProbe
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams


class Aborted(Exception):
    """The drill stopped early (Ctrl-C, SIGTERM or an abort condition); faults were healed."""


@dataclass
class RunContext:
    """Everything one run produced, handed to analysis and the report."""

    playbook: Playbook
    inventory: Inventory
    playbook_path: str
    inventory_path: str
    started: float = 0.0
    ended: float = 0.0
    t0: float = 0.0  # load start: step offsets count from here
    preflight: dict[str, Any] = field(default_factory=dict)
    faults: list[InjectedFault] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    recorder: Recorder | None = None
    probe: RoleProbe | None = None
    run_id: str = ""
    aborted: str | None = None
    heal: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    operator: str = field(default_factory=lambda: f"{getpass.getuser()}@{socket.gethostname()}")


def run_drill(pb: Playbook, inv: Inventory, *, playbook_path: str, inventory_path: str,
              allow_production: bool = False, progress: Any = None) -> RunContext:
    """Run one drill.

    1. Load + validate inventory and playbook (done by the caller; nothing touched yet).
    2. Preflight: SSH, clock offsets, capabilities, topology, settings; refuse on any failure.
    3. Set up the workload schema; start probes and load.
    4. Warm-up (discarded), then the baseline window.
    5. Execute the schedule: faults (journaled on their hosts first) and actions at their offsets.
    6. Heal: revert every fault (also on error, Ctrl-C, SIGTERM, abort) and verify.
    7. Wait for recovery: one writer, every member answering, within the bound.
    8. Stop the load; run the checkers.
    9. Hand everything to the report (the caller writes the run directory).
    """
    ctx = RunContext(pb, inv, playbook_path, inventory_path, started=time.time())
    cluster = inv.clusters[pb.cluster]
    pool = RemotePool(inv)
    fm = FaultManager(inv, pool)
    restore_patroni: dict[str, Any] | None = None
    runner: LoadRunner | None = None
    link: ClientLink | None = None
    previous = signal.signal(signal.SIGTERM, _sigterm)
    try:
        ctx.preflight = run_preflight(pb, inv, pool, allow_production)  # 2
        for host, off in ctx.preflight["clock_offsets"].items():
            fm.offsets.setdefault(host, _offset(off))
        if pb.patroni is not None:
            restore_patroni = _set_patroni(ctx, pb)
        ctx.recorder = Recorder(base=time.time(), interval=0.1)  # 3
        spec = LoadSpec(workload=pb.load.workload, workers=pb.load.workers, rate=pb.load.rate,
                        processes=pb.load.processes, op_timeout=pb.load.op_timeout,
                        connect_timeout=pb.load.connect_timeout,
                        params=WorkloadParams(table_rows=pb.load.table_rows))
        ctx.run_id = spec.run_id
        load_cluster = cluster
        if any(st.fault is not None and split_target(st.fault.target)[0] == CLIENT for st in pb.steps):
            # the load runs through clean relays from the start; the step changes their toxics
            link = ClientLink(cluster, inv, ttl=pb.duration + pb.recovery.within + 600).__enter__()
            fm.client_link = link
            load_cluster = link.cluster
            _event(ctx, "client_link", time.time(), relays=link.driver.endpoints(),
                   note="the load reaches the database through relays on the control node for the whole drill; "
                        "the baseline includes their overhead")
        runner = LoadRunner(load_cluster, inv, spec, ctx.recorder)
        runner.setup()
        ctx.probe = RoleProbe(cluster, inv, pb.probes.interval)
        ctx.probe.start()
        ctx.t0 = runner.start()
        _event(ctx, "load_started", ctx.t0, workers=pb.load.workers, workload=pb.load.workload)
        _schedule(ctx, fm, runner, progress)  # 4 + 5
    except KeyboardInterrupt:
        ctx.aborted = "interrupted (Ctrl-C or SIGTERM)"
    except Aborted as exc:
        ctx.aborted = str(exc)
    except Exception as exc:  # recorded, then healed and reported like any abort
        if isinstance(exc, ChaoskitError) and not ctx.t0:
            if link is not None:
                link.__exit__(None, None, None)
            raise  # preflight refused or bad input: nothing was started
        ctx.aborted = f"error: {type(exc).__name__}: {exc}"
    finally:
        failed = fm.revert_all()  # 6: always
        ctx.faults = list(fm.injected)
        ctx.heal = {"reverted": [f.id for f in fm.injected if f.revert_verified],
                    "not_verified": [{"id": f.id, "host": f.host, "error": f.revert_error} for f in failed]}
        for f in fm.injected:
            if f.t_reverted:
                _event(ctx, "fault_reverted", f.t_reverted, id=f.id, host=f.host)
        if restore_patroni is not None:
            _patch_patroni(ctx, restore_patroni)
        signal.signal(signal.SIGTERM, previous)
    try:
        if ctx.probe is not None and ctx.aborted is None:
            _wait_recovery(ctx, pb.recovery.within, progress)  # 7
    except KeyboardInterrupt:
        ctx.aborted = "interrupted during the recovery wait"
    finally:
        if runner is not None:
            runner.stop()  # 8
        if link is not None:
            link.__exit__(None, None, None)
        if ctx.probe is not None:
            ctx.probe.stop()
            ctx.events.extend(ctx.probe.log.events)
        ctx.ended = time.time()
        pool.close()
    if runner is not None and ctx.recorder is not None:
        ctx.results = analyse(ctx, runner)
    return ctx


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _offset(d: dict[str, Any]) -> Any:
    from chaoskit.inventory.clock import ClockOffset

    return ClockOffset(**d)


def _event(ctx: RunContext, kind: str, t: float, **data: Any) -> None:
    ctx.events.append({"kind": kind, "t": t, **data})


def _schedule(ctx: RunContext, fm: FaultManager, runner: LoadRunner, progress: Any) -> None:
    pb = ctx.playbook
    todo: list[tuple[float, str, Any]] = []
    for i, step in enumerate(pb.steps):
        todo.append((ctx.t0 + step.at, "step", (i, step)))
    todo.sort(key=lambda x: x[0])
    injected: dict[int, list[InjectedFault]] = {}
    end = ctx.t0 + pb.duration
    bad_since: float | None = None
    while True:
        now = time.time()
        due = [x for x in todo if x[0] <= now]
        for item in due:
            todo.remove(item)
            t_sched, what, payload = item
            if what == "step":
                i, step = payload
                _run_step(ctx, fm, i, step, t_sched, injected, todo)
            else:  # scheduled revert
                for f in payload:
                    fm.revert(f)
                    if f.t_reverted:
                        _event(ctx, "fault_reverted", f.t_reverted, id=f.id, host=f.host, scheduled=t_sched)
        if now >= end and not todo:
            return
        assert ctx.recorder is not None
        with runner.lock:
            w = ctx.recorder.window(now - 1.2, now - 0.2)
        ops = w["ok"] + w["fail"] + w["info"]
        rate = (w["fail"] + w["info"]) / ops if ops else 0.0
        bad_since = (bad_since or now) if rate > pb.abort.error_rate_above else None
        if bad_since is not None and now - bad_since >= pb.abort.for_:
            raise Aborted(f"error rate above {pb.abort.error_rate_above:.0%} for {pb.abort.for_:g}s")
        if progress is not None:
            progress(ctx, w)
        nxt = min([x[0] for x in todo] + [end, now + 0.25])
        time.sleep(max(0.0, min(0.25, nxt - time.time())))


def _run_step(ctx: RunContext, fm: FaultManager, i: int, step: Step, t_sched: float,
              injected: dict[int, list[InjectedFault]], todo: list[tuple[float, str, Any]]) -> None:
    pb = ctx.playbook
    if step.fault is not None:
        spec = step.fault.model_copy(update={"cluster": step.fault.cluster or pb.cluster, "ttl": pb.fault_ttl(step)})
        faults = fm.inject(spec, t_scheduled=t_sched)
        injected[i] = faults
        for f in faults:
            _event(ctx, "fault_injected", f.t_effect, id=f.id, fault_kind=f.kind, host=f.host, step=i,
                   scheduled=t_sched, sent=f.t_sent)
        if step.fault.duration:
            todo.append((faults[0].t_effect + step.fault.duration, "revert", faults))
            todo.sort(key=lambda x: x[0])
    elif step.action is not None:
        handler = {"switchover": _switchover, "restart": _restart, "rejoin": _rejoin}[step.action.kind]
        ctx.actions.append(handler(ctx, step, t_sched, fm))


def _patroni_base(ctx: RunContext, member_host: str | None = None) -> list[str]:
    return patroni.api_urls(ctx.inventory.clusters[ctx.playbook.cluster], ctx.inventory, member_host)


def _restart(ctx: RunContext, step: Step, t_sched: float, fm: FaultManager) -> dict[str, Any]:
    """Start every configured process of a member that is not running (same script as a kill's revert)."""
    from chaoskit.faults.kinds import HostFacts, restart_missing

    assert step.action is not None and step.action.target
    member = next(m for m in ctx.inventory.clusters[ctx.playbook.cluster].members if m.host == step.action.target)
    script = restart_missing(list(member.processes), HostFacts(host=member.host, processes=dict(member.processes)))
    t_sent = time.time()
    res = fm.pool.get(member.host).shell(f"(\n{script}\n)", check=False, timeout=120)
    record = {"kind": "restart", "t_scheduled": t_sched, "t_sent": t_sent, "t_answered": time.time(),
              "leader": member.host, "exit": res.exited, "answer": (res.stderr or res.stdout)[-300:]}
    _event(ctx, "action", t_sent, action="restart", host=member.host, exit=res.exited)
    return record


def _rejoin(ctx: RunContext, step: Step, t_sched: float, fm: FaultManager) -> dict[str, Any]:
    assert step.action is not None and step.action.target
    t_sent = time.time()
    status, text = patroni.request(f"{_patroni_base(ctx, step.action.target)[0]}/reinitialize", "POST", {"force": True})
    record = {"kind": "rejoin", "t_scheduled": t_sched, "t_sent": t_sent, "t_answered": time.time(),
              "leader": step.action.target, "http_status": status, "answer": text[:300]}
    _event(ctx, "action", t_sent, action="rejoin", host=step.action.target, http_status=status)
    return record


def _switchover(ctx: RunContext, step: Step, t_sched: float, fm: FaultManager | None = None) -> dict[str, Any]:
    """Planned switchover through Patroni's REST API (POST /switchover on the leader)."""
    assert step.action is not None and ctx.probe is not None
    leader = next((m for m, r in ctx.probe.log.current_roles().items() if r == "primary"), None)
    body: dict[str, Any] = {"leader": leader}
    if step.action.candidate:
        body["candidate"] = step.action.candidate
    t_sent = time.time()
    status, text = patroni.request(f"{_patroni_base(ctx, leader)[0]}/switchover", "POST", body)
    record = {"kind": "switchover", "t_scheduled": t_sched, "t_sent": t_sent, "t_answered": time.time(),
              "leader": leader, "candidate": step.action.candidate, "http_status": status, "answer": text[:300]}
    _event(ctx, "action", t_sent, action=record["kind"], leader=leader, candidate=step.action.candidate,
           http_status=status)
    return record


def _set_patroni(ctx: RunContext, pb: Playbook) -> dict[str, Any] | None:
    assert pb.patroni is not None
    return _patch_patroni(ctx, pb.patroni.model_dump(exclude_none=True))


def _patch_patroni(ctx: RunContext, values: dict[str, Any]) -> dict[str, Any] | None:
    previous = patroni.apply_config(ctx.inventory.clusters[ctx.playbook.cluster], ctx.inventory, values)
    if previous is not None:
        _event(ctx, "patroni_config", time.time(), values=values)
    return previous


def _wait_recovery(ctx: RunContext, within: float, progress: Any) -> None:
    """One writer and every member answering, held for a second, within the bound."""
    assert ctx.probe is not None
    cluster = ctx.inventory.clusters[ctx.playbook.cluster]
    deadline = time.time() + within
    stable_since = None
    while time.time() < deadline:
        roles = ctx.probe.log.current_roles()
        ok = len(roles) == len(cluster.members) and sorted(roles.values()).count("primary") == 1 and \
            "down" not in roles.values()
        stable_since = (stable_since or time.time()) if ok else None
        if stable_since and time.time() - stable_since >= 1.0:
            _event(ctx, "cluster_steady", stable_since, roles=roles)
            return
        time.sleep(0.2)
    _event(ctx, "cluster_not_steady", time.time(), roles=ctx.probe.log.current_roles())


def analyse(ctx: RunContext, runner: LoadRunner) -> dict[str, Any]:
    pb, rec, probe = ctx.playbook, ctx.recorder, ctx.probe
    assert rec is not None and probe is not None
    cluster = ctx.inventory.clusters[pb.cluster]
    base = baseline_tps(rec, ctx.t0 + pb.load.warmup, ctx.t0 + pb.baseline)
    # Faults and actions alike: a planned switchover is analysed from the instant it was issued.
    disturbances = [f.to_dict() for f in ctx.faults] + [
        {"id": f"action{i}", "kind": a["kind"], "host": a.get("leader"), "t_effect": a["t_sent"],
         "t_scheduled": a.get("t_scheduled")} for i, a in enumerate(ctx.actions) if a["kind"] == "switchover"]
    first_at = sorted(disturbances, key=lambda f: f["t_effect"])
    faults = []
    for i, f in enumerate(first_at):
        window_end = first_at[i + 1]["t_effect"] if i + 1 < len(first_at) else ctx.ended
        faults.append(checked(analyse_fault, f, rec, probe.log, baseline=base, window_end=window_end,
                              tps_fraction=pb.recovery.tps_fraction, hold=pb.recovery.hold,
                              manager_observable=cluster.role_probe == "patroni"))
    for fa in faults:
        for key in ("t_fault", "t_detect", "t_promoted", "t_first_ok", "t_recovered"):
            if fa.get(key):
                _event(ctx, "phase_mark", fa[key], mark=key, fault=fa.get("id"))
    checks: dict[str, Any] = {}
    outage_faults = [f for f in faults if f.get("outage")]
    t_fault = outage_faults[0]["t_fault"] if outage_faults else (faults[0]["t_fault"] if faults else None)
    writer = None
    # the ground truth is read from the cluster itself, never through the load's relays
    truth = driver_for(cluster, ctx.inventory, connect_timeout=pb.load.connect_timeout, op_timeout=60.0)
    try:
        writer = truth.connect_writer()
        if "rpo" in pb.checks:
            present = checked(lambda: {"rows": runner.workload.present(writer)})  # type: ignore[attr-defined]
            checks["rpo"] = rpo_check(rec, present["rows"], t_fault, pb.slo.rpo_max_writes) if "rows" in present \
                else present
        if "bank" in pb.checks:
            def bank() -> dict[str, Any]:
                count, total = runner.workload.total(writer)  # type: ignore[attr-defined]
                expected = runner.workload.expected_total()  # type: ignore[attr-defined]
                return {"valid": total == expected, "total": total, "expected": expected, "accounts": count}
            checks["bank"] = checked(bank)
    except Exception as exc:
        for name in ("rpo", "bank"):
            if name in pb.checks and name not in checks:
                checks[name] = {"valid": "unknown", "error": f"no writer after the drill: {exc}"}
    finally:
        Driver.close_quietly(writer)
    if "split_brain" in pb.checks:
        checks["split_brain"] = checked(split_brain, probe.log, pb.probes.interval)
    if "replica_convergence" in pb.checks and pb.load.workload == "ledger":
        checks["replica_convergence"] = checked(replica_convergence, truth, cluster, ctx.inventory,
                                                ctx.run_id, pb.recovery.within)
        conv = checks["replica_convergence"]
        old = ctx.preflight.get("primary_before")
        if old and "members" in conv:
            members = conv["members"]
            writer = next((d for d in members.values() if d.get("role") == "primary"), {})
            mine = members.get(old, {})
            same = "rows" in mine and (mine.get("rows"), mine.get("seq_sum")) == (writer.get("rows"),
                                                                                  writer.get("seq_sum"))
            checks["replica_convergence"]["old_primary"] = {
                "host": old, "role_now": mine.get("role"),
                # rejoined = back in the cluster *and* holding exactly the writer's rows
                "rejoined": mine.get("role") in ("replica", "primary") and same,
                "diverged": mine.get("role") == "replica" and not same,
                "rewind": _rewind_note(cluster, mine.get("role"))}
    slo = _slo(pb, faults, checks, rec)
    verdict = merge([c.get("valid", "unknown") for c in checks.values()] + [s["ok"] for s in slo.values()])
    if ctx.aborted:
        verdict = "aborted"
    return {"baseline_tps": base, "faults": faults, "rpo": checks.get("rpo"), "checks": checks, "slo": slo,
            "verdict": verdict}


def _slo(pb: Playbook, faults: list[dict[str, Any]], checks: dict[str, Any], rec: Recorder) -> dict[str, Any]:
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
        start, anchor = _recovery_start([f for f in faults if f.get("outage")])
        rate = None
        if start is not None:
            w = rec.window(start, rec.index(time.time()) * rec.interval + 10)
            ops = w["ok"] + w["fail"] + w["info"]
            rate = round((w["fail"] + w["info"]) / ops, 6) if ops else 0.0
        elif not any(f.get("outage") for f in faults):
            totals = rec.totals()
            ops = totals["ok"] + totals["fail"] + totals["info"]
            rate = round((totals["fail"] + totals["info"]) / ops, 6) if ops else 0.0
            anchor = "whole run (no outage)"
        out["max_error_rate_after_recovery"] = {"target": pb.slo.max_error_rate_after_recovery, "measured": rate,
                                                "from": anchor,
                                                "ok": rate is not None and rate <= pb.slo.max_error_rate_after_recovery}
    return out


def _rewind_note(cluster: Any, role_now: str | None) -> str:
    if role_now == "primary":
        return "not needed: the old primary is the writer again"
    if cluster.patroni is None:
        return "not applicable: no HA manager rejoins nodes in this cluster"
    return "unknown: not observable through Patroni's REST API (see the node's Patroni log)"


def _recovery_start(outages: list[dict[str, Any]]) -> tuple[float | None, str]:
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


def run_dir_name(pb: Playbook, started: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{pb.name}"


def ensure_dir(root: Path, pb: Playbook, started: float) -> Path:
    d = root / run_dir_name(pb, started)
    d.mkdir(parents=True, exist_ok=False)
    (d / "plots").mkdir()
    return d

