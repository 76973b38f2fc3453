"""The playbook's steps on their instants: faults staged on their hosts ahead of time, triggered at
their instant (staged again where a role moved meanwhile), reverted at their planned end; actions
(switchover, rejoin, restart) at theirs. The plan is `playbook.schedule.plan` (pure); this module
carries it out and records each instant in the drill's record. A step `after` an event is armed
when the step before it starts and gets its instant from what the probe and the manager report
(`chaoskit.drill.triggers`); one whose event never comes is skipped at its deadline, recorded."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chaoskit.drill.triggers import Decision, Triggers
from chaoskit.faults import journal
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.manager import FaultManager, InjectedFault, StagedFault
from chaoskit.faults.process import restart_scripts
from chaoskit.faults.spec import CLIENT, STEP_TARGET, FaultBase
from chaoskit.faults.targets import split_target
from chaoskit.ha.base import HAManager
from chaoskit.playbook import schedule
from chaoskit.playbook.models import DR_ACTIONS, Step
from chaoskit.playbook.record import DrillInputs, DrillRecord
from chaoskit.playbook.schedule import Do
from chaoskit.recorder import Recorder
from chaoskit.timesource import Clock

LATE_S = 1.0  # a step's trigger, action or revert started later than this after its instant is said


class Steps:
    """One drill's schedule, item by item (`run`), and what each step left: the faults staged and
    applied per step (a later action's `target: fault.N` names the host of step N's fault)."""

    def __init__(self, inputs: DrillInputs, record: DrillRecord, fm: FaultManager, ha: HAManager,
                 recorder: Recorder, clock: Clock,
                 observed: Callable[[], list[dict[str, Any]]] = lambda: []) -> None:
        self.inputs, self.record, self.fm, self.ha = inputs, record, fm, ha
        self.recorder, self.clock, self.observed = recorder, clock, observed
        self.dr: Any = None  # the disaster-recovery actions (`chaoskit.drill.dr.DrActions`), where the playbook has any
        self.items = schedule.plan(inputs.playbook, record.t0)
        # each step's planned instant: its offset, or (after an event) the event + delay once seen
        self.planned: dict[int, float] = {i: record.t0 + st.at for i, st in enumerate(inputs.playbook.steps)
                                          if st.at is not None}
        self.triggers = Triggers([m.host for m in inputs.cluster.members])
        self.staged: dict[int, dict[int, list[StagedFault]]] = {}  # step -> its fault's index -> staged
        self.applied: dict[int, list[InjectedFault]] = {}
        self._last: dict[str, Any] | None = None  # the item done last: its step, what, how long it took
        self._do: dict[Do, Callable[[schedule.Item, Step], None]] = {
            Do.STAGE: self._stage, Do.TRIGGER: self._trigger, Do.REVERT: self._revert, Do.ACTION: self._act}

    def run(self, look: Callable[[float], None]) -> None:
        """Every item at its instant, until the playbook's duration is over and nothing is left
        (no item due, no step waiting for its event); between items `look(now)` (the drill's abort
        rule and progress) at least every 0.25 s."""
        end = self.record.t0 + self.inputs.playbook.duration
        while True:
            now = self.clock.now()
            self._decide(now)
            while self.items and self.items[0].t <= now:
                item = self.items.pop(0)
                started = self.clock.now()
                self._said_late(item, started)
                self._do[item.what](item, self.inputs.playbook.steps[item.step])
                self._last = {"step": item.step, "what": item.what.value,
                              "took_s": round(self.clock.now() - started, 3)}
                if item.what in (Do.TRIGGER, Do.ACTION):
                    self._arm_next(item.step, self._started(item))
                now = self.clock.now()
            if now >= end and not self.items and not self.triggers.armed:
                return
            look(now)
            nxt = self.items[0].t if self.items else end
            self.clock.sleep(max(0.0, min(0.1 if self.triggers.armed else 0.25, nxt - self.clock.now())))

    def _said_late(self, item: schedule.Item, started: float) -> None:
        """A trigger, action or revert that starts more than LATE_S after its instant is an event
        (`step_late`) with what ran before it and how long that took: the steps run one after the
        other, so a slow revert or action holds back the next (the timeline must not read a late
        rejoin as one on plan)."""
        late = started - item.t
        if item.what == Do.STAGE or late <= LATE_S:
            return
        self.record.event("step_late", started, step=item.step, what=item.what.value, planned=item.t,
                          late_s=round(late, 3), held_by=self._last)

    def _started(self, item: schedule.Item) -> float:
        """When a step started: its first fault's trigger or its action sent (what the cluster
        does from then on may be the step's doing, however long the answer took)."""
        if item.what == Do.TRIGGER and self.applied.get(item.step):
            return min(f.t_sent for f in self.applied[item.step])
        if item.what == Do.ACTION and self.record.actions and self.record.actions[-1].get("step") == item.step:
            return float(self.record.actions[-1].get("t_sent") or self.clock.now())
        return self.clock.now()

    def _arm_next(self, step_no: int, at: float) -> None:
        """The step after `step_no` waits for its event from `at`, if it is one that does."""
        steps = self.inputs.playbook.steps
        nxt = step_no + 1
        if nxt < len(steps) and steps[nxt].after is not None:
            self.triggers.observe(self.observed())  # the picture at arming is the latest one
            self.triggers.arm(nxt, steps[nxt].after, at)  # type: ignore[arg-type]

    def _decide(self, now: float) -> None:
        """Armed steps whose event came get their items (staged now, done at event + delay);
        those past their deadline are skipped, and the next step is armed either way."""
        self.triggers.observe(self.observed())  # kept current, armed or not
        for d in self.triggers.decide(now):
            self._decided(d, now)

    def _decided(self, d: Decision, now: float) -> None:
        said = d.to_event()
        self.record.triggered.append({"fired": d.fired, **said})
        if not d.fired:
            self.record.event("step_skipped", now, **said)
            self._arm_next(d.step, now)
            return
        assert d.t_planned is not None
        self.planned[d.step] = d.t_planned
        self.record.event("step_triggered", now, **said)
        is_fault = bool(self.inputs.playbook.steps[d.step].specs)
        for item in schedule.step_items(d.step, is_fault, now, max(now, d.t_planned)):  # staged at once
            bisect.insort(self.items, item)

    def _scheduled(self, step_no: int) -> float:
        return self.planned[step_no]

    def _specs(self, step: Step) -> list[FaultBase]:
        """The step's faults as staged: with the playbook's cluster, and a `fault.N` target as the
        host steps[N]'s fault landed on."""
        pb_cluster = self.inputs.playbook.cluster
        out = []
        for s in step.specs:
            s = s if s.cluster else s.replace(cluster=pb_cluster)
            if STEP_TARGET.match(s.target):
                s = s.replace(target=self._fault_host(s.target))
            out.append(s)
        return out

    def _fault_host(self, target: str) -> str:
        """The host of `fault.N`: where step N's (first) fault was applied."""
        faults = self.applied.get(int(target.split(".")[1]), [])
        if not faults:
            raise RuntimeError(f"{target}: that fault was not applied, so there is no host to act on")
        return faults[0].host

    def _stage(self, item: schedule.Item, step: Step) -> None:
        t_sched = self._scheduled(item.step)
        specs = self._specs(step)
        self.staged[item.step] = {j: self.fm.stage(spec, t_scheduled=t_sched) for j, spec in enumerate(specs)
                                  if split_target(spec.target)[0] != CLIENT}
        for staged in self.staged[item.step].values():
            for s in staged:
                self.record.event("fault_staged", s.t_staged, id=s.id, host=s.host, step=item.step)

    def _trigger(self, item: schedule.Item, step: Step) -> None:
        specs, t_sched = self._specs(step), self._scheduled(item.step)
        if len(specs) == 1 and split_target(specs[0].target)[0] == CLIENT:
            faults = self.fm.inject(specs[0], t_scheduled=t_sched)
        else:
            ready = [s for j, spec in enumerate(specs) for s in self._ready(item.step, j, spec, t_sched)]
            faults = self._trigger_together(ready)
        self.applied[item.step] = faults
        for f in faults:
            self.recorder.keep_around(f.t_effect)
            f.step = item.step
            self.record.event("fault_injected", f.t_effect, id=f.id, fault_kind=f.kind, host=f.host, step=item.step,
                              scheduled=t_sched, sent=f.t_sent, applied_from=f.t_apply_start,
                              t_effect_host=f.t_effect_host, offset_s=f.offset_s,
                              uncertainty_s=f.offset_uncertainty_s, duration=step.duration)
        if step.duration:
            bisect.insort(self.items, schedule.revert_item(item.step, max(f.t_effect for f in faults) + step.duration))

    def _trigger_together(self, ready: list[StagedFault]) -> list[InjectedFault]:
        """Every staged fault of the step at one instant: each host's in a thread of its own (on
        one host, one after the other on its channel), so several hosts take theirs at once
        instead of one SSH round trip apart. In staging order; the first failure is raised once
        all have answered (those applied are in the manager's record and healed with the rest)."""
        hosts = list(dict.fromkeys(s.host for s in ready))
        if len(hosts) <= 1:
            return [self.fm.trigger(s) for s in ready]

        def on(host: str) -> list[InjectedFault]:
            return [self.fm.trigger(s) for s in ready if s.host == host]

        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            jobs = {h: pool.submit(on, h) for h in hosts}
        errors = [exc for job in jobs.values() if (exc := job.exception()) is not None]
        if errors:
            raise errors[0]
        done = {f.id: f for job in jobs.values() for f in job.result()}
        return [done[s.id] for s in ready]

    def _ready(self, step_no: int, j: int, spec: FaultBase, t_sched: float) -> list[StagedFault]:
        """What was staged for the step's fault `j`, staged again where a role target moved since."""
        ready = self.staged.get(step_no, {}).pop(j, [])
        if ready and split_target(spec.target)[0].startswith("role:"):
            now_hosts = self.fm.resolve(spec)
            if sorted(now_hosts) != sorted(s.host for s in ready):
                self.record.event("fault_restaged", self.clock.now(), step=step_no, was=[s.host for s in ready],
                                  now=now_hosts)
                for s in ready:
                    self.fm.discard(s)
                ready = self.fm.stage(spec, t_scheduled=t_sched, hosts=now_hosts)
        return ready or self.fm.stage(spec, t_scheduled=t_sched)

    def _revert(self, item: schedule.Item, step: Step) -> None:
        for f in self.applied.get(item.step, []):
            self.fm.revert(f)
            if f.t_reverted:
                self.record.event("fault_reverted", f.t_reverted, id=f.id, host=f.host, by=f.reverted_by,
                                  scheduled=item.t)

    def _act(self, item: schedule.Item, step: Step) -> None:
        record = self._action(step)
        record["t_scheduled"] = self._scheduled(item.step)
        record["step"] = item.step
        if record["kind"] in ("switchover", "takeover"):
            self.recorder.keep_around(record["t_sent"])
        self.record.actions.append(record)
        self.record.event("action", record["t_sent"], action=record["kind"], member=record.get("member"),
                          ok=record.get("ok"), candidate=record.get("candidate"))

    def step_instant(self, step_no: int) -> float | None:
        """When step `step_no` started (its action sent, its first fault in effect), None before it ran."""
        sent = [a["t_sent"] for a in self.record.actions if a.get("step") == step_no and a.get("t_sent")]
        if sent:
            return float(sent[0])
        applied = [f.t_effect or f.t_sent for f in self.applied.get(step_no, []) if f.t_effect or f.t_sent]
        return min(applied) if applied else None

    def _action(self, step: Step) -> dict[str, Any]:
        action = step.action
        assert action is not None
        if action.kind in DR_ACTIONS:
            assert self.dr is not None, "a disaster-recovery action without DrActions"
            record: dict[str, Any] = self.dr.act(action)
            return record
        if action.kind == "switchover":
            return self.ha.switchover(action.candidate).to_dict()
        if action.kind == "takeover":
            return self.ha.takeover(action.candidate).to_dict()
        assert action.target
        target = action.target
        if target.startswith("fault."):
            target = self._fault_host(target)
        if action.kind == "rejoin":
            if self.ha.rejoin_after_restart:  # the manager rejoins a running member by itself (DM)
                restart = self._restart(target)
                record = self.ha.rejoin(target).to_dict()
            else:
                record = self.ha.rejoin(target).to_dict()
                restart = self._restart(target)  # whatever of the member is still not running
            record["restart"] = restart
            return record
        t_sent = self.clock.now()
        res = self._restart(target)
        return {"kind": "restart", "ok": res["ok"], "t_sent": t_sent, "t_answered": self.clock.now(),
                "member": target, "answer": res["answer"]}

    def _restart(self, host: str) -> dict[str, Any]:
        """Start every configured process of the member that is not running (a kill's revert)."""
        member = next(m for m in self.inputs.cluster.members if m.host == host)
        scripts = restart_scripts(HostFacts(host=member.host, processes=dict(member.processes)))
        res = self.fm.pool.get(member.host).shell(
            journal.oneshot_script(scripts, scripts.revert, root=self.fm.journal_root), check=False, timeout=120)
        return {"ok": res.exited == 0, "answer": (res.stderr or res.stdout)[-300:]}
