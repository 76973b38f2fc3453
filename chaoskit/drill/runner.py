"""The drill: `run_drill` nests the scopes of one run in reading order (Jepsen's `run!`). Each scope
of `Drill` owns its setup and its teardown, so the way out is the way in read backwards."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from chaoskit.analysis.drill import LoadSource, analyse, gather_truth
from chaoskit.backup.registry import tool_for
from chaoskit.backup.watch import ArchiveWatch
from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.drill.dr import DrActions, restored_target
from chaoskit.drill.healing import Undo
from chaoskit.drill.preflight import placement as placed_hosts
from chaoskit.drill.preflight import run_preflight
from chaoskit.drill.recovery import wait_recovery
from chaoskit.drill.steps import Steps
from chaoskit.errors import ChaoskitError
from chaoskit.faults import journal
from chaoskit.faults.client_link import ClientLink
from chaoskit.faults.manager import FaultManager, _discovered_roles
from chaoskit.faults.spec import CLIENT
from chaoskit.faults.targets import RoleView, fault_hosts, split_target
from chaoskit.faults.ttl import DRILL_HEAL_MARGIN_S
from chaoskit.guard import cluster_hosts
from chaoskit.ha.base import HAManager
from chaoskit.ha.registry import manager_for
from chaoskit.hostlogs import LogWindow, window_for
from chaoskit.hostmetrics import HostSampler, sampler_for
from chaoskit.interrupts import stop_signals_interrupt
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import DR_ACTIONS
from chaoskit.playbook.record import DrillInputs, DrillRecord, DrillResult, EvidenceSink
from chaoskit.recorder import Recorder, error_rate
from chaoskit.timesource import SYSTEM_CLOCK, Clock, Held
from chaoskit.topology.probe import RoleProbe
from chaoskit.workload.engine import measures
from chaoskit.workload.placement import loader_agent_sources
from chaoskit.workload.runner import LoadRunner

# what the live view is shown about 4 times a second: the record so far, the roles now, the last second's load
Progress = Callable[[DrillRecord, dict[str, str], dict[str, Any]], None]

LIVE_VIEW_S = 0.25  # how often the live view reads the judged second's latency (it refreshes 4 times a second)


@dataclass(frozen=True)
class DrillParts:
    """The side effects a drill is built from (SSH pool, database driver, HA manager, preflight,
    load, role probe, the after-run reads, the logs, the clock), made once per drill and handed
    down. The defaults are the real ones; unit tests hand in shipped fakes (`chaoskit.testing`) to
    drive every exit path."""

    pool: Callable[[Inventory], RemotePool] = RemotePool
    driver: Callable[[Cluster, Inventory], Driver] = driver_for
    ha: Callable[[Cluster, Inventory, RemotePool], HAManager] = manager_for
    preflight: Callable[..., dict[str, Any]] = run_preflight
    load: Callable[..., LoadRunner] = LoadRunner
    probe: Callable[..., RoleProbe] = RoleProbe
    truth: Callable[[DrillInputs, str, LoadSource, Driver], dict[str, Any]] = gather_truth
    logs: Callable[..., LogWindow] = window_for
    metrics: Callable[[Inventory, RemotePool, list[str]], HostSampler] = sampler_for
    clock: Clock = SYSTEM_CLOCK  # the drill's waits and marks; a FakeClock in unit tests
    journal_root: str = journal.ROOT


class Aborted(Exception):
    """The drill stopped early (Ctrl-C, SIGTERM or an abort condition); faults were healed."""


def run_drill(inputs: DrillInputs, *, out: EvidenceSink | None = None, progress: Progress | None = None,
              parts: DrillParts = DrillParts()) -> DrillResult:
    """Run one drill; `out` (the run directory) gets every event as it happens and the logs kept.

    1. Load + validate inventory and playbook (done by the caller; nothing touched yet).
    2. Preflight: production guard, SSH, clock offsets, capabilities, HA health, topology, settings;
       refuse on any failure (nothing is started; the refusal is raised).
    3. Mark the members' logs; route the load (through relays when a step cuts the client link);
       set up the workload schema; start the role probe (and the manager's event watch), the host
       metrics, then the load.
    4. Warm-up (discarded), then the baseline window.
    5. HA settings the playbook asks for, journaled and set; then the schedule: faults staged on their
       hosts ahead and triggered at their instants, actions at theirs, the abort rule watched.
    6. Heal: revert every fault and restore every setting (also on error, Ctrl-C, SIGTERM, abort),
       verified on the hosts.
    7. Wait for recovery: one writer, every member answering, then throughput, within the bound
       (skipped when aborted).
    8. Stop the load and the probe; keep the logs' window; read the ground truth; run the checkers.
    9. Hand the result to the evidence (`chaoskit.drill.session` writes the run directory).

    Anything that fails after the preflight (a teardown, the analysis, a bug) does not end the
    drill's evidence: it is recorded (`record.incomplete`, the traceback kept for the run
    directory) and the result carries what is known. Only a refusal is raised.
    """
    drill = Drill(inputs, parts, out, progress)
    with stop_signals_interrupt(), drill.finishing(), drill.failures_recorded(), drill.hosts_connected():
        drill.preflight()
        with drill.log_window(), drill.client_link():
            drill.prepare_load()
            with drill.probe_watching(), drill.hosts_sampled(), drill.archive_watched(), drill.load_running(), \
                    drill.recovery_awaited(), drill.healing(), drill.aborts_recorded():
                drill.change_settings()
                drill.execute_schedule()
    return drill.analysed()


class Drill:
    """One drill's live handles and its record. Each scope sets one thing up and, on the way out,
    tears it down; the scopes share nothing but these attributes, set as the drill gets to them."""

    def __init__(self, inputs: DrillInputs, parts: DrillParts, out: EvidenceSink | None,
                 progress: Progress | None) -> None:
        self.inputs, self.parts, self.out, self.progress = inputs, parts, out, progress
        self.pb, self.cluster, self.clock = inputs.playbook, inputs.cluster, parts.clock
        # the cluster as the inventory declares it: what the load and the client link are routed
        # by (a managed service's endpoints, never the members that stand in for them in the probe)
        self.declared = inputs.inventory.clusters[self.pb.cluster]
        self.record = DrillRecord(started=self.clock.now(), sink=out.event if out is not None else None)
        self.pool: RemotePool | None = None
        self.driver: Driver | None = None  # made once; each purpose tunes its timeouts from it
        self.ha: HAManager | None = None
        self.fm: FaultManager | None = None
        self.load_route: tuple[Cluster, Driver] | None = None  # how the load reaches the cluster
        self.recorder: Recorder | None = None
        self.runner: LoadRunner | None = None
        self.probe: RoleProbe | None = None
        self.undo: Undo | None = None  # what the heal undoes: faults and settings changes

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """The run's first and last marks; an interrupt that reaches this far (while healing or
        stopping: the heal ran first) is recorded, not raised."""
        self.record.event("run_started", self.record.started, playbook=self.pb.name, cluster=self.pb.cluster,
                          operator=self.inputs.operator)
        try:
            yield
        except KeyboardInterrupt:
            self.record.aborted = self.record.aborted or "interrupted while healing or stopping (the heal ran first)"
        finally:
            self.record.ended = self.clock.now()
            if self.probe is not None:
                with self.probe.log.lock:
                    self.record.add_events(list(self.probe.log.events))

    @contextlib.contextmanager
    def failures_recorded(self) -> Iterator[None]:
        """An error that escapes the drill's scopes after the preflight is recorded as the reason the
        run is incomplete (every scope inside has already torn down: faults healed, load stopped),
        never raised past the evidence. A refusal, and a chaoskit error before the load started
        (nothing of the drill ran), is raised as it is."""
        try:
            yield
        except ChaoskitError as exc:
            if self.record.refused is not None or not self.record.t0:
                raise
            self.incomplete("drill", exc)
        except Exception as exc:
            self.incomplete("drill", exc)

    def incomplete(self, stage: str, exc: BaseException) -> None:
        line = self.record.failures.add(stage, exc)
        self.record.event("incomplete", self.clock.now(), reason=line)

    @contextlib.contextmanager
    def hosts_connected(self) -> Iterator[None]:
        """SSH to the hosts (opened on first use, closed last), the drill's one database driver, its
        HA manager and fault manager."""
        with self.parts.pool(self.inputs.inventory) as pool:
            self.pool = pool
            self.driver = self.parts.driver(self.declared, self.inputs.inventory)
            self.ha = self.parts.ha(self.cluster, self.inputs.inventory, pool)
            self.fm = FaultManager(self.inputs.inventory, pool, roles=self._live_roles,
                                   journal_root=self.parts.journal_root, clock=self.clock.now)
            self.undo = Undo(self.fm, self.ha, self.inputs.inventory_path)
            yield

    def preflight(self) -> None:
        """Every check before anything starts; a refusal is recorded and raised."""
        try:
            self.record.preflight = self.parts.preflight(self.pb, self.inputs.inventory, self.pool, self.ha, self.fm,
                                                         self.inputs.allow_production, driver=self.driver)
        except ChaoskitError as exc:
            self.record.refused = str(exc)
            self.record.event("preflight_refused", self.clock.now(), reason=str(exc))
            raise
        pf = self.record.preflight
        pf["warnings"] = [*pf["warnings"], *unrecorded_audit(self.inputs.evidence)]
        self.record.event("preflight", self.clock.now(), primary=pf["primary_before"],
                          production_targets=pf["production_targets"], warnings=pf["warnings"])

    @contextlib.contextmanager
    def log_window(self) -> Iterator[None]:
        """The members' logs (and those of the other hosts a fault names) marked now and their
        window kept under logs/ on the way out, after the load and the probe stopped (best effort:
        a host that does not answer is said in the record, never fails the drill).
        `evidence.log_bytes_per_file: 0` keeps none."""
        limit = self.inputs.evidence.log_bytes_per_file
        if not limit:
            yield
            return
        inv = self.inputs.inventory
        hosts = tuple(inv.hosts[h] for h in fault_hosts(self.pb.steps, inv) if inv.hosts[h].logs)
        logs = self.parts.logs(self.cluster, self.ha, self.pool, limit, hosts)
        logs.mark()
        try:
            yield
        finally:
            self.record.logs = logs.collect(self.out.write_text if self.out is not None else None)
            self.record.event("logs_kept", self.clock.now(), files=sum(1 for r in self.record.logs if r.get("file")),
                              of=len(self.record.logs))

    @contextlib.contextmanager
    def client_link(self) -> Iterator[None]:
        """How the load reaches the cluster: directly, or, when a step cuts the client link, through
        clean relays on the control node for the whole drill (the step changes their toxics)."""
        assert self.driver is not None and self.fm is not None
        if not any(split_target(f.target)[0] == CLIENT for st in self.pb.steps for f in st.specs):
            self.load_route = (self.declared, self.driver)
            yield
            return
        ttl = self.pb.duration + self.pb.recovery.within + 600
        with ClientLink(self.declared, self.inputs.inventory, ttl=ttl, driver=self.driver) as link:
            self.fm.client_link = link
            self.load_route = (link.cluster, self.parts.driver(link.cluster, self.inputs.inventory))
            self.record.event("client_link", self.clock.now(), relays=link.driver.endpoints(),
                              note="the load reaches the database through relays on the control node for the whole "
                                   "drill; the baseline includes their overhead")
            yield

    def prepare_load(self) -> None:
        """The recorder, the client groups and the workload's schema (nothing runs yet)."""
        assert self.load_route is not None
        # closed intervals, ledger blocks and the kept op history move to the run directory as the
        # run goes (recorder/), so the controller's memory stays flat however long the drill
        self.recorder = Recorder(base=self.clock.now(), interval=0.1,
                                 spill_dir=self.out.file("recorder") if self.out is not None else None)
        spec = self.pb.load.to_spec()
        self.record.run_id = spec.run_id
        if spec.params.sql is not None and self.out is not None:  # what ran, as it was read
            self.out.write_text(spec.params.sql.kept_as, spec.params.sql.text)
        # groups with `where:` run as load agents on their loader hosts (validated: at least one matches)
        placed = {g.group_name: g for g in self.pb.load.groups or () if g.where is not None}
        wheres = {name: g.where for name, g in placed.items() if g.where is not None}
        found = (self.record.preflight or {}).get("placement")  # as the preflight found it
        placement = {g: tuple(h) for g, h in found.items()} if found is not None else \
            placed_hosts(self.pb, self.inputs.inventory)
        self.record.groups = {g.name: {"profile": g.profile, "tool": g.tool, "workers": list(g.worker_ids),
                                       "rto_resolution_s": measures(g.tool).rto_resolution_s,
                                       "statement_timeout": g.statement_timeout, "validation": g.validate,
                                       "route": g.route or self.pb.cluster,
                                       **({"where": wheres[g.name].said(), "loaders": list(placement[g.name])}
                                          if g.name in wheres else {})} for g in spec.client_groups()}
        cluster, driver = self.load_route
        extra: dict[str, Any] = {}
        if placement:
            assert self.pool is not None
            extra["make_sources"] = loader_agent_sources(self.pool, placement, spec.run_id)
        # what a tool group's tool wrote is kept in the run directory (tools/<group>/), and its
        # clients' restarts are events of the run
        self.runner = self.parts.load(cluster, self.inputs.inventory, spec, self.recorder, driver=driver,
                                      tool_dir=self.out.file("tools") if self.out is not None else None,
                                      on_event=lambda ev: self.record.event(ev.pop("kind"), ev.pop("t"), **ev),
                                      **extra)
        self.runner.setup()

    @contextlib.contextmanager
    def probe_watching(self) -> Iterator[None]:
        """Every member's role (and the manager's events) on the drill's clock until the load stopped."""
        self.probe = self.parts.probe(self.cluster, self.inputs.inventory, self.ha, self.pb.probes.interval,
                                      sink=self.record.sink, driver=self.driver)
        self.probe.start()
        try:
            yield
        finally:
            self.probe.stop()

    @contextlib.contextmanager
    def hosts_sampled(self) -> Iterator[None]:
        """CPU, memory, disk and network of the members' hosts, the hosts a fault names and the
        control node, every second until the load stopped (`chaoskit.hostmetrics`)."""
        assert self.pool is not None
        inv = self.inputs.inventory
        # the inventory's members: a managed service's endpoints stand in for members but have no host
        hosts = list(dict.fromkeys(cluster_hosts(inv, self.pb.cluster) + fault_hosts(self.pb.steps, inv)))
        sampler = self.parts.metrics(inv, self.pool, hosts)
        sampler.start()
        try:
            yield
        finally:
            self.record.host_metrics = sampler.stop()

    @contextlib.contextmanager
    def archive_watched(self) -> Iterator[None]:
        """Where the cluster is backed up (its `backup:` in the inventory), the primary's archiving
        read once a second until the load stopped (`chaoskit.backup.watch`): the archive's age
        over the run, and when archiving failed."""
        if self.declared.backup is None or self.driver is None or self.fm is None:
            yield
            return
        tool = tool_for(self.declared, self.inputs.inventory, self.fm.pool.get, self.fm.offset)
        watch = ArchiveWatch(tool, self.driver, self.clock.now)
        watch.start()
        try:
            yield
        finally:
            self.record.archive = watch.stop()

    @contextlib.contextmanager
    def load_running(self) -> Iterator[None]:
        """The load from t0 (step offsets count from here) until after the recovery wait."""
        assert self.runner is not None
        self.record.t0 = self.runner.start()
        cpu = self.runner.cpu_window()  # the generator's own CPU, start to stop: was the client the limit?
        cpu.begin()
        try:
            self.record.event("load_started", self.record.t0, workers=self.pb.load.workers,
                              workload=self.pb.load.workload_name)
            yield
        finally:
            try:
                # open loop: did it keep its schedule? (read while the collector still merges: the
                # recorder holds its own lock)
                dispatch = self.recorder.totals() if self.recorder else {}
                self.record.client_cpu = cpu.end().with_dispatch(dispatch).figures()
            finally:
                self.runner.stop()

    @contextlib.contextmanager
    def recovery_awaited(self) -> Iterator[None]:
        """After the heal, the load keeps running until the cluster has recovered (`recovery`);
        skipped when the drill aborted: the operator wants out."""
        yield
        if restored_target(self.inputs) is not None or self.pb.actions("drop_table"):
            # the source lost its table for good: what recovers is the restored copy (its phases)
            self.record.event("recovery_wait_skipped", self.clock.now(),
                              reason="a disaster-recovery drill: the restore is the recovery (see its phases)")
            return
        if not self.record.aborted:
            assert self.probe is not None and self.recorder is not None
            wait_recovery(self.record, self.pb, self.cluster, self.probe.log.current_roles, self.recorder, self.clock)

    @contextlib.contextmanager
    def healing(self) -> Iterator[None]:
        """On the way out, whatever happened: every fault reverted and verified, every setting restored."""
        try:
            yield
        finally:
            self._heal()

    @contextlib.contextmanager
    def aborts_recorded(self) -> Iterator[None]:
        """An interrupt, the abort rule or an error during the schedule ends the drill early: recorded,
        then healed and reported like any abort (never raised past the heal)."""
        try:
            yield
        except KeyboardInterrupt:
            self.record.aborted = "interrupted (Ctrl-C or SIGTERM)"
        except Aborted as exc:
            self.record.aborted = str(exc)
        except Exception as exc:
            self.record.aborted = f"error: {type(exc).__name__}: {exc}"
        if self.record.aborted:
            self.record.event("aborted", self.clock.now(), reason=self.record.aborted)

    def change_settings(self) -> None:
        """The HA settings the playbook asks for, journaled on the hosts (with their dead-man) and set."""
        if not self.pb.settings:
            return
        assert self.ha is not None and self.undo is not None
        ttl = self.pb.duration + self.pb.recovery.within + DRILL_HEAL_MARGIN_S
        change = self.undo.change_settings(dict(self.pb.settings), ttl)
        self.record.settings_changed = {"applied": dict(self.pb.settings), "previous": change.previous,
                                        "journal": str(change.path)}
        self.record.event("settings_changed", self.clock.now(), manager=self.ha.kind, values=dict(self.pb.settings),
                          previous=change.previous)

    def execute_schedule(self) -> None:
        """The steps on their instants, the abort rule watched every tick (`AbortRule`)."""
        assert self.fm is not None and self.ha is not None and self.recorder is not None and self.runner is not None
        recorder = self.recorder
        rule = AbortRule(self.pb.abort.error_rate_above, self.pb.abort.for_, recorder)
        try:
            shown = [-math.inf]

            def look(now: float) -> None:
                judged = rule.look(now)
                if self.progress is not None and now - shown[0] >= LIVE_VIEW_S:  # latency read as often as shown
                    shown[0] = now
                    self.progress(self.record, self.probe.log.current_roles() if self.probe else {},
                                  recorder.window(*judged))

            steps = Steps(self.inputs, self.record, self.fm, self.ha, self.recorder, self.clock, self._probe_events())
            if self.pb.actions(*DR_ACTIONS):
                assert self.driver is not None
                steps.dr = DrActions(self.inputs, self.fm, self.driver, self.clock, steps.step_instant)
            steps.run(look)
        finally:
            self.record.abort_rule = rule.figures()

    def _probe_events(self) -> Callable[[], list[dict[str, Any]]]:
        """What the role probe and the manager's watch recorded since the last call (for steps
        that wait for an event)."""
        seen = 0

        def new() -> list[dict[str, Any]]:
            nonlocal seen
            if self.probe is None:
                return []
            with self.probe.log.lock:
                events = self.probe.log.events[seen:]
                seen += len(events)
            return list(events)

        return new

    def _heal(self) -> None:
        assert self.fm is not None and self.undo is not None
        fm, record = self.fm, self.record
        report = self.undo.undo()
        record.faults = list(fm.injected)
        record.heal = {"reverted": [f.id for f in fm.injected if f.revert_verified],
                       "not_verified": [{"id": f.id, "host": f.host, "error": f.revert_error}
                                        for f in report.not_verified]}
        events = record.events_now()
        for f in fm.injected:
            if f.t_reverted and not any(e.get("id") == f.id and e["kind"] == "fault_reverted" for e in events):
                record.event("fault_reverted", f.t_reverted, id=f.id, host=f.host, by=f.reverted_by)
        for restored in report.restored:
            record.event("settings_restored", self.clock.now(), values=restored)
        for error in report.errors:
            record.heal["settings_error"] = error
            record.event("settings_restore_failed", self.clock.now(), error=error)

    def _live_roles(self, cluster: Cluster) -> tuple[RoleView, set[str]]:
        """Roles for resolving a fault's target: the drill's own probe where it watches the cluster."""
        if self.probe is not None and cluster.name == self.cluster.name:
            roles = self.probe.log.current_roles()
            if len(roles) == len(cluster.members):
                return roles, self.probe.log.current_sync()
        return _discovered_roles(self.inputs.inventory)(cluster)

    def analysed(self) -> DrillResult:
        """The ground truth read after the run, the checkers, the phase marks; or, for a drill that
        never started its load, the record alone."""
        if self.runner is None or self.recorder is None or self.probe is None:
            return DrillResult(self.inputs, self.record, self.recorder)
        assert self.driver is not None
        truth: dict[str, Any] = {}
        try:
            # after a restore the data is judged where it was restored: the restored server
            restored = restored_target(self.inputs)
            driver = self.driver if restored is None else self.parts.driver(restored, self.inputs.inventory)
            truth = self.parts.truth(self.inputs, self.record.run_id, self.runner, driver)
            results, marks = analyse(self.pb, self.record, self.recorder, self.probe.log, truth, self.cluster)
        except (Exception, KeyboardInterrupt) as exc:  # the evidence of what was seen is kept all the same
            self.incomplete("analysis", exc)
            return DrillResult(self.inputs, self.record, self.recorder, self.probe.log, truth)
        for mark in marks:
            self.record.event("phase_mark", mark["t"], mark=mark["mark"], fault=mark["fault"])
        return DrillResult(self.inputs, self.record, self.recorder, self.probe.log, truth, results)


class AbortRule:
    """The drill's abort rule: the error rate of the last second the load has delivered above
    `error_rate_above`, held for `for_s` of that delivered time.

    It judges closed intervals only (`Recorder.closed_until`): those every live load source has
    delivered. chaoskit's own clients deliver within ~0.3 s; a tool group reads its tool's output
    and ships intervals ~2 s old, so the judged second then ends ~2 s before now. Judging the last
    second of the wall clock instead would read a window the tool's reader has not filled yet (no
    ops, error rate 0) and never fire. How far behind it judged is kept (`figures`)."""

    def __init__(self, error_rate_above: float, for_s: float, recorder: Recorder) -> None:
        self.limit, self.for_s, self.recorder = error_rate_above, for_s, recorder
        self.held = Held(for_s)
        self.lags: list[float] = []
        self.fired: dict[str, Any] | None = None

    def look(self, now: float) -> tuple[float, float]:
        """Judge the last delivered second (its counts); the window judged. Raises Aborted."""
        until = self.recorder.closed_until()
        if until is None or until > now:  # nothing delivered yet (or a source ahead of this clock)
            until = now - 0.2
        else:
            self.lags.append(now - until)
        window = self.recorder.window(until - 1.0, until, latency=False)
        if self.held.look(error_rate(window) > self.limit, until):
            self.fired = {"t": now, "judged_until": until, "lag_s": round(now - until, 3),
                          "error_rate": error_rate(window)}
            raise Aborted(f"error rate above {self.limit:.0%} for {self.for_s:g}s")
        return until - 1.0, until

    def figures(self) -> dict[str, Any]:
        lags = sorted(self.lags)
        return {"judges": "the last second every live load source has delivered", "looks": len(lags),
                "lag_s_median": round(lags[len(lags) // 2], 3) if lags else None,
                "lag_s_max": round(lags[-1], 3) if lags else None, "fired": self.fired}


def unrecorded_audit(audit: Any) -> list[str]:
    """A warning for each audit field a DR test record needs and the run leaves empty (the
    report shows it as "not recorded", never as a blank)."""
    missing = [name for name, value in (("participants", audit.participants), ("scope", audit.scope),
                                        ("change_ref", audit.change_ref)) if not value]
    if not missing:
        return []
    return [f"evidence: {', '.join(missing)} not given (playbook `evidence:`, --participant, --change-ref): "
            "the report says 'not recorded'"]
