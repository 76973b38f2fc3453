"""The drill: one function, the lifecycle of the methodology (docs/methodology.md)."""

from __future__ import annotations

import bisect
import contextlib
import getpass
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaoskit.analysis.drill import analyse, gather_truth
from chaoskit.analysis.failover import baseline_tps, recovered_at
from chaoskit.db.base import Driver, driver_for
from chaoskit.errors import ChaoskitError
from chaoskit.faults import journal
from chaoskit.faults.client_link import ClientLink
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.manager import FaultManager, InjectedFault, StagedFault
from chaoskit.faults.process import restart_scripts
from chaoskit.faults.spec import CLIENT, FaultBase
from chaoskit.faults.targets import RoleView, split_target
from chaoskit.faults.ttl import DRILL_HEAL_MARGIN_S
from chaoskit.ha.base import HAManager
from chaoskit.ha.registry import is_multi_writer, manager_for
from chaoskit.ha.settings import SettingsChange, change_settings
from chaoskit.hostlogs import LogWindow, window_for
from chaoskit.interrupts import stop_signals_interrupt
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook import schedule
from chaoskit.playbook.models import Playbook, Step
from chaoskit.playbook.preflight import run_preflight
from chaoskit.playbook.schedule import Do
from chaoskit.recorder import Recorder, error_rate
from chaoskit.report.rundir import RunDirectory
from chaoskit.timesource import SYSTEM_CLOCK, Clock, Held
from chaoskit.topology.probe import RoleProbe, first_writer
from chaoskit.topology.roles import steady
from chaoskit.workload.runner import LoadRunner
from chaoskit.workload.spec import load_spec_from_playbook


@dataclass(frozen=True)
class DrillParts:
    """The side effects a drill is built from (SSH pool, database driver, HA manager, preflight,
    load, role probe, the after-run reads), made once per drill and handed down. The defaults are the real ones;
    unit tests hand in shipped fakes (`chaoskit.testing`) to drive every exit path."""

    pool: Callable[[Inventory], RemotePool] = RemotePool
    driver: Callable[[Cluster, Inventory], Driver] = driver_for
    ha: Callable[[Cluster, Inventory, RemotePool], HAManager] = manager_for
    preflight: Callable[..., dict[str, Any]] = run_preflight
    load: Callable[..., LoadRunner] = LoadRunner
    probe: Callable[..., RoleProbe] = RoleProbe
    truth: Callable[[Any, Any], dict[str, Any]] = gather_truth
    logs: Callable[..., LogWindow] = window_for
    clock: Clock = SYSTEM_CLOCK  # the drill's waits and marks; a FakeClock in unit tests
    journal_root: str = journal.ROOT


STEADY_HOLD_S = 1.0  # the recovery wait's "steady": held this long (a campaign between runs holds 3 s)


class Aborted(Exception):
    """The drill stopped early (Ctrl-C, SIGTERM or an abort condition); faults were healed."""


@dataclass
class RunContext:
    """Everything one run produced, handed to analysis and the report."""

    playbook: Playbook
    inventory: Inventory
    playbook_path: str
    inventory_path: str
    run_dir: RunDirectory | None = None
    playbook_sha256: str = ""
    started: float = 0.0
    ended: float = 0.0
    t0: float = 0.0  # load start: step offsets count from here
    preflight: dict[str, Any] = field(default_factory=dict)
    faults: list[InjectedFault] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    recorder: Recorder | None = None
    probe: RoleProbe | None = None
    driver: Driver | None = None  # made once; each purpose tunes its timeouts from it
    clock: Clock = SYSTEM_CLOCK
    run_id: str = ""
    aborted: str | None = None
    refused: str | None = None  # preflight refused: nothing was started
    heal: dict[str, Any] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)  # chaoskit.hostlogs records
    settings_changed: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # client group -> profile, worker ids
    truth: dict[str, Any] = field(default_factory=dict)  # what gather_truth read after the run
    audit: Any = None  # playbook.models.Audit: participants, scope, change reference, objectives
    allow_production: bool = False
    operator: str = field(default_factory=lambda: f"{getpass.getuser()}@{socket.gethostname()}")

    @property
    def cluster(self) -> Cluster:
        return self.inventory.clusters[self.playbook.cluster]

    def event(self, kind: str, t: float, **data: Any) -> None:
        """Record an event now: in memory and, flushed, in the run directory."""
        ev = {"kind": kind, "t": t, **data}
        self.events.append(ev)
        if self.run_dir is not None:
            self.run_dir.event(ev)


def run_drill(pb: Playbook, inv: Inventory, *, run_dir: RunDirectory | None, playbook_path: str,
              inventory_path: str, playbook_sha256: str = "", allow_production: bool = False,
              progress: Any = None, parts: DrillParts = DrillParts(), audit: Any = None) -> RunContext:
    """Run one drill.

    1. Load + validate inventory and playbook (done by the caller; nothing touched yet).
    2. Preflight: production guard, SSH, clock offsets, capabilities, HA health, topology, settings;
       refuse on any failure (nothing is started).
    3. Set up the workload schema; start probes (and the manager's event watch) and load.
    4. Warm-up (discarded), then the baseline window.
    5. Execute the schedule: faults staged on their hosts ahead and triggered at their instants,
       actions at theirs; HA settings the playbook asks for, journaled and set first.
    6. Heal: revert every fault and restore every setting (also on error, Ctrl-C, SIGTERM, abort),
       verified on the hosts.
    7. Wait for recovery: one writer, every member answering, within the bound.
    8. Stop the load and the probes; read the ground truth; run the checkers.
    9. Hand everything to the report (the caller writes the rest of the run directory).
    """
    ctx = RunContext(pb, inv, playbook_path, inventory_path, run_dir=run_dir, playbook_sha256=playbook_sha256,
                     started=parts.clock.now(), allow_production=allow_production, audit=audit or pb.evidence,
                     clock=parts.clock)
    if ctx.audit.operator:
        ctx.operator = ctx.audit.operator
    ctx.event("run_started", ctx.started, playbook=pb.name, cluster=pb.cluster, operator=ctx.operator)
    runner: LoadRunner | None = None
    with stop_signals_interrupt():  # Ctrl-C and SIGTERM abort and heal, whatever was inherited
        try:
            with contextlib.ExitStack() as stack:
                pool = stack.enter_context(parts.pool(inv))
                ctx.driver = driver = parts.driver(ctx.cluster, inv)
                ha = parts.ha(ctx.cluster, inv, pool)
                fm = FaultManager(inv, pool, roles=lambda cluster: _live_roles(ctx, cluster, fm),
                                  journal_root=parts.journal_root, clock=parts.clock.now)
                try:
                    ctx.preflight = parts.preflight(pb, inv, pool, ha, fm, allow_production, driver=driver)  # 2
                except ChaoskitError as exc:
                    ctx.refused = str(exc)
                    ctx.event("preflight_refused", ctx.clock.now(), reason=str(exc))
                    raise
                ctx.event("preflight", ctx.clock.now(), primary=ctx.preflight["primary_before"],
                          production_targets=ctx.preflight["production_targets"], warnings=ctx.preflight["warnings"])
                if ctx.audit.log_bytes_per_file:  # marked now, read last on the way out (after the load stops)
                    logs = parts.logs(ctx.cluster, ha, pool, ctx.audit.log_bytes_per_file)
                    logs.mark()
                    stack.callback(_keep_logs, ctx, logs)
                ctx.recorder = Recorder(base=ctx.clock.now(), interval=0.1)  # 3
                spec = load_spec_from_playbook(pb)
                ctx.run_id = spec.run_id
                ctx.groups = {g.name: {"profile": g.profile, "workers": list(g.worker_ids), "statement_timeout":
                                       g.statement_timeout, "validation": g.validate, "route": g.route or pb.cluster}
                              for g in spec.client_groups()}
                load_cluster, load_driver = ctx.cluster, driver
                if any(st.fault is not None and split_target(st.fault.target)[0] == CLIENT for st in pb.steps):
                    # the load runs through clean relays from the start; the step changes their toxics
                    link_ttl = pb.duration + pb.recovery.within + 600
                    link = stack.enter_context(ClientLink(ctx.cluster, inv, ttl=link_ttl, driver=driver))
                    fm.client_link = link
                    load_cluster, load_driver = link.cluster, parts.driver(link.cluster, inv)  # the relays' view
                    ctx.event("client_link", ctx.clock.now(), relays=link.driver.endpoints(),
                              note="the load reaches the database through relays on the control node for the whole "
                                   "drill; the baseline includes their overhead")
                runner = parts.load(load_cluster, inv, spec, ctx.recorder, driver=load_driver)
                runner.setup()
                ctx.probe = parts.probe(ctx.cluster, inv, ha, pb.probes.interval,
                                        sink=ctx.run_dir.event if run_dir else None, driver=driver)
                ctx.probe.start()
                stack.callback(ctx.probe.stop)
                ctx.t0 = runner.start()
                stack.callback(runner.stop)  # 8 (after the recovery wait)
                ctx.event("load_started", ctx.t0, workers=pb.load.workers, workload=pb.load.workload)
                stack.callback(_wait_recovery, ctx, progress)  # 7 (after the heal)
                settings: list[SettingsChange] = []
                stack.callback(_heal, ctx, fm, ha, settings)  # 6: always, first on the way out
                try:
                    if pb.settings:
                        settings.append(_change_settings(ctx, ha))  # 5
                    _execute(ctx, fm, ha, runner, progress)  # 4 + 5
                except KeyboardInterrupt:
                    ctx.aborted = "interrupted (Ctrl-C or SIGTERM)"
                except Aborted as exc:
                    ctx.aborted = str(exc)
                except Exception as exc:  # recorded, then healed and reported like any abort
                    ctx.aborted = f"error: {type(exc).__name__}: {exc}"
                if ctx.aborted:
                    ctx.event("aborted", ctx.clock.now(), reason=ctx.aborted)
        except KeyboardInterrupt:
            ctx.aborted = ctx.aborted or "interrupted while healing or stopping (the heal ran first)"
        finally:
            ctx.ended = ctx.clock.now()
            if ctx.probe is not None:
                ctx.events.extend(ctx.probe.log.events)
    if runner is not None and ctx.recorder is not None and ctx.probe is not None:
        ctx.truth = parts.truth(ctx, runner)  # 8
        ctx.results, marks = analyse(ctx, ctx.truth)
        for mark in marks:
            ctx.event("phase_mark", mark["t"], mark=mark["mark"], fault=mark["fault"])
    return ctx


def _keep_logs(ctx: RunContext, logs: LogWindow) -> None:
    """The members' log lines of the run's window into logs/ (best effort: a host that does not
    answer is said in the record, never fails the drill)."""
    ctx.logs = logs.collect(ctx.run_dir.write_text if ctx.run_dir is not None else None)
    ctx.event("logs_kept", ctx.clock.now(), files=sum(1 for r in ctx.logs if r.get("file")), of=len(ctx.logs))


def _live_roles(ctx: RunContext, cluster: Cluster, fm: FaultManager) -> tuple[RoleView, set[str]]:
    """Roles for resolving a fault's target: the drill's own probe where it watches the cluster."""
    if ctx.probe is not None and cluster.name == ctx.cluster.name:
        roles = ctx.probe.log.current_roles()
        if len(roles) == len(cluster.members):
            return roles, ctx.probe.log.current_sync()
    from chaoskit.faults.manager import _discovered_roles

    return _discovered_roles(ctx.inventory)(cluster)


def _change_settings(ctx: RunContext, ha: HAManager) -> SettingsChange:
    pb = ctx.playbook
    ttl = pb.duration + pb.recovery.within + DRILL_HEAL_MARGIN_S
    change = change_settings(ha, ctx.inventory_path, dict(pb.settings), ttl)
    ctx.settings_changed = {"applied": dict(pb.settings), "previous": change.previous, "journal": str(change.path)}
    ctx.event("settings_changed", ctx.clock.now(), manager=ha.kind, values=dict(pb.settings), previous=change.previous)
    return change


def _heal(ctx: RunContext, fm: FaultManager, ha: HAManager, settings: list[SettingsChange]) -> None:
    failed = fm.revert_all()
    ctx.faults = list(fm.injected)
    ctx.heal = {"reverted": [f.id for f in fm.injected if f.revert_verified],
                "not_verified": [{"id": f.id, "host": f.host, "error": f.revert_error} for f in failed]}
    for f in fm.injected:
        if f.t_reverted and not any(e.get("id") == f.id and e["kind"] == "fault_reverted" for e in ctx.events):
            ctx.event("fault_reverted", f.t_reverted, id=f.id, host=f.host, by=f.reverted_by)
    for change in settings:
        try:
            restored = change.restore(ha)
            ctx.event("settings_restored", ctx.clock.now(), values=restored)
        except Exception as exc:  # the journal entry stays; its dead-man and `recover` retry
            ctx.heal["settings_error"] = f"{type(exc).__name__}: {exc}"
            ctx.event("settings_restore_failed", ctx.clock.now(), error=ctx.heal["settings_error"])


def _execute(ctx: RunContext, fm: FaultManager, ha: HAManager, runner: LoadRunner, progress: Any) -> None:
    pb = ctx.playbook
    items = schedule.plan(pb, ctx.t0)
    staged: dict[int, list[StagedFault]] = {}
    injected: dict[int, list[InjectedFault]] = {}
    end = ctx.t0 + pb.duration
    bad = Held(pb.abort.for_)
    while True:
        now = ctx.clock.now()
        while items and items[0].t <= now:
            item = items.pop(0)
            _do(ctx, fm, ha, item, staged, injected, items)
            now = ctx.clock.now()
        if now >= end and not items:
            return
        assert ctx.recorder is not None
        with runner.lock:
            w = ctx.recorder.window(now - 1.2, now - 0.2)
        rate = error_rate(w)
        if bad.look(rate > pb.abort.error_rate_above, now):
            raise Aborted(f"error rate above {pb.abort.error_rate_above:.0%} for {pb.abort.for_:g}s")
        if progress is not None:
            progress(ctx, w)
        nxt = items[0].t if items else end
        ctx.clock.sleep(max(0.0, min(0.25, nxt - ctx.clock.now())))


def _step_spec(ctx: RunContext, step: Step) -> FaultBase:
    assert step.fault is not None
    return step.fault if step.fault.cluster else step.fault.replace(cluster=ctx.playbook.cluster)


def _do(ctx: RunContext, fm: FaultManager, ha: HAManager, item: schedule.Item, staged: dict[int, list[StagedFault]],
        injected: dict[int, list[InjectedFault]], items: list[schedule.Item]) -> None:
    step = ctx.playbook.steps[item.step]
    t_sched = ctx.t0 + step.at
    if item.what is Do.STAGE:
        staged[item.step] = fm.stage(_step_spec(ctx, step), t_scheduled=t_sched)
        for s in staged[item.step]:
            ctx.event("fault_staged", s.t_staged, id=s.id, host=s.host, step=item.step)
    elif item.what is Do.TRIGGER:
        spec = _step_spec(ctx, step)
        if split_target(spec.target)[0] == CLIENT:
            faults = fm.inject(spec, t_scheduled=t_sched)
        else:
            ready = staged.pop(item.step, [])
            if ready and split_target(spec.target)[0].startswith("role:"):
                now_hosts = fm.resolve(spec)
                if sorted(now_hosts) != sorted(s.host for s in ready):  # the role moved since staging
                    ctx.event("fault_restaged", ctx.clock.now(), step=item.step, was=[s.host for s in ready],
                              now=now_hosts)
                    for s in ready:
                        fm.discard(s)
                    ready = fm.stage(spec, t_scheduled=t_sched, hosts=now_hosts)
            ready = ready or fm.stage(spec, t_scheduled=t_sched)
            faults = [fm.trigger(s) for s in ready]
        injected[item.step] = faults
        for f in faults:
            ctx.recorder.history.keep_around(f.t_effect)  # type: ignore[union-attr]
            f.step = item.step
            ctx.event("fault_injected", f.t_effect, id=f.id, fault_kind=f.kind, host=f.host, step=item.step,
                      scheduled=t_sched, sent=f.t_sent, applied_from=f.t_apply_start, t_effect_host=f.t_effect_host,
                      offset_s=f.offset_s, uncertainty_s=f.offset_uncertainty_s, duration=step.fault.duration
                      if step.fault else None)
        if step.fault is not None and step.fault.duration:
            bisect.insort(items, schedule.revert_item(item.step, max(f.t_effect for f in faults) + step.fault.duration))
    elif item.what is Do.REVERT:
        for f in injected.get(item.step, []):
            fm.revert(f)
            if f.t_reverted:
                ctx.event("fault_reverted", f.t_reverted, id=f.id, host=f.host, by=f.reverted_by,
                          scheduled=item.t)
    elif item.what is Do.ACTION:
        assert step.action is not None
        record = _action(ctx, fm, ha, step, injected)
        record["t_scheduled"] = t_sched
        record["step"] = item.step
        if record["kind"] == "switchover":
            ctx.recorder.history.keep_around(record["t_sent"])  # type: ignore[union-attr]
        ctx.actions.append(record)
        ctx.event("action", record["t_sent"], action=record["kind"], member=record.get("member"),
                  ok=record.get("ok"), candidate=record.get("candidate"))


def _action(ctx: RunContext, fm: FaultManager, ha: HAManager, step: Step,
            injected: dict[int, list[InjectedFault]]) -> dict[str, Any]:
    action = step.action
    assert action is not None
    if action.kind == "switchover":
        return ha.switchover(action.candidate).to_dict()
    assert action.target
    target = action.target
    if target.startswith("fault."):
        faults = injected.get(int(target.split(".")[1]), [])
        if not faults:
            raise RuntimeError(f"{target}: that fault was not applied, so there is no host to act on")
        target = faults[0].host
    if action.kind == "rejoin":
        record = ha.rejoin(target).to_dict()
        record["restart"] = _restart(fm, ctx, target)  # whatever of the member is still not running
        return record
    t_sent = ctx.clock.now()
    res = _restart(fm, ctx, target)
    return {"kind": "restart", "ok": res["ok"], "t_sent": t_sent, "t_answered": ctx.clock.now(), "member": target,
            "answer": res["answer"]}


def _restart(fm: FaultManager, ctx: RunContext, host: str) -> dict[str, Any]:
    """Start every configured process of the member that is not running (a kill's revert)."""
    member = next(m for m in ctx.cluster.members if m.host == host)
    scripts = restart_scripts(HostFacts(host=member.host, processes=dict(member.processes)))
    res = fm.pool.get(member.host).shell(journal.oneshot_script(scripts, scripts.revert, root=fm.journal_root),
                                         check=False, timeout=120)
    return {"ok": res.exited == 0, "answer": (res.stderr or res.stdout)[-300:]}


def _wait_recovery(ctx: RunContext, progress: Any) -> None:
    """After the heal, the load keeps running until the cluster has recovered as the playbook
    defines it, at most `recovery.within`: one writer and every member answering, held for a
    second; then throughput back to `tps_fraction` of the baseline for `hold` (the analysis's
    t_recovered). Without the second wait a drill whose `duration` ends soon after the heal
    reports t_recovered null for a recovery it stopped watching. Skipped when the drill aborted:
    the operator wants out."""
    if ctx.probe is None or ctx.aborted:
        return
    cluster = ctx.cluster
    multi_writer = is_multi_writer(cluster)
    deadline = ctx.clock.now() + ctx.playbook.recovery.within
    held = Held(STEADY_HOLD_S)
    while ctx.clock.now() < deadline:
        roles = ctx.probe.log.current_roles()
        if multi_writer:
            roles = first_writer(roles, [m.host for m in cluster.members])
        if held.look(steady(roles, len(cluster.members)), ctx.clock.now()):
            ctx.event("cluster_steady", held.since, roles=roles)
            _wait_throughput(ctx, deadline)
            return
        ctx.clock.sleep(0.2)
    ctx.event("cluster_not_steady", ctx.clock.now(), roles=ctx.probe.log.current_roles())


def _wait_throughput(ctx: RunContext, deadline: float) -> None:
    """Until a `hold` stretch at `tps_fraction` of the baseline has been seen after the last
    disturbance took effect (the stretch the analysis finds as t_recovered), or the bound. A drill
    whose throughput came back before the heal does not wait at all."""
    pb, rec = ctx.playbook, ctx.recorder
    base = baseline_tps(rec, ctx.t0 + pb.load.warmup, ctx.t0 + pb.baseline)
    disturbed = [f.t_effect for f in ctx.faults] + [a["t_sent"] for a in ctx.actions if a.get("t_sent")]
    if not base or not disturbed:
        return
    since = max(disturbed)
    while True:
        t = recovered_at(rec, since, base, pb.recovery.tps_fraction, pb.recovery.hold)
        if t is not None:
            ctx.event("throughput_recovered", t, baseline_tps=round(base, 1))
            return
        if ctx.clock.now() >= deadline:
            ctx.event("throughput_not_recovered", ctx.clock.now(), baseline_tps=round(base, 1),
                      tps_fraction=pb.recovery.tps_fraction, hold_s=pb.recovery.hold)
            return
        ctx.clock.sleep(min(0.5, deadline - ctx.clock.now()))  # the last look is at the bound itself
