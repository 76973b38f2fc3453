"""`run_drill` end to end without a lab: scripted hosts (ScriptedRemote), a fake load and a fake role
probe handed in through `DrillParts`. Each exit path of the lifecycle must heal first (revert every
staged or applied fault), then wait for recovery (skipped when aborted), then stop the load, then
the probe; and a preflight refusal must touch nothing. Drills here are 4 s long (real time)."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaoskit.drill.recovery import wait_recovery
from chaoskit.drill.runner import DrillParts, run_drill
from chaoskit.errors import PreflightError
from chaoskit.faults.registry import REGISTRY
from chaoskit.hostmetrics import HostSampler
from chaoskit.inventory import load_inventory
from chaoskit.inventory.capabilities import Capabilities
from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import Playbook
from chaoskit.playbook.record import DrillInputs, DrillRecord
from chaoskit.recorder import FAIL, OK, SEQUENCE, Recorder
from chaoskit.testing.clock import FakeClock
from chaoskit.testing.remote import Reply, ScriptedRemote, is_revert, is_stage, is_trigger
from chaoskit.timesource import SYSTEM_CLOCK
from chaoskit.topology.probe import ProbeLog
from chaoskit.workload.client_cpu import CpuWindow

EVERYTHING = Capabilities(have=frozenset().union(*(k.needs for k in REGISTRY.values())))


def inventory(tmp_path: Path) -> Inventory:
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent("""
        hosts:
          pg1: {address: 127.0.0.1}
          pg2: {address: 127.0.0.1}
        clusters:
          pg:
            engine: postgres
            user: postgres
            members:
              - {host: pg1, processes: {postgres: {pid_file: /run/pg/pid, comm: postgres}}}
              - {host: pg2, processes: {postgres: {pid_file: /run/pg/pid, comm: postgres}}}
        """).lstrip("\n"))
    return load_inventory(p)


def playbook(**changes: Any) -> Playbook:
    data = {"name": "unit", "cluster": "pg", "load": {"workload": "ledger", "workers": 1, "warmup": "0s"},
            "probes": {"interval": "100ms"}, "baseline": "1s",
            "steps": [{"at": "2s", "fault": {"kind": "pause", "target": "pg1", "duration": "1s"}}],
            "duration": "4s", "recovery": {"within": "3s", "hold": "1s"}, "checks": ["split_brain"]}
    return Playbook.model_validate({**data, **changes})


def now_line(word: str, *extra: str) -> Any:
    return lambda cmd: Reply(stdout=" ".join([word, *[f"{time.time():.6f}"] * (3 if word == "applied" else 1),
                                                *extra]))


class Lab:
    """The fakes of one drill and one ordered log of what happened to them."""

    def __init__(self, tmp_path: Path, failing_load: bool = False, clock: BookingClock | None = None) -> None:
        self.inv = inventory(tmp_path)
        self.log: list[str] = []
        self.failing_load = failing_load
        self.clock = clock  # a drill on a fake clock: the load's writes are booked as it moves
        self.hosts: dict[str, ScriptedRemote] = {}
        for name in ("pg1", "pg2"):
            r = ScriptedRemote(name, default=None)
            r.on(is_stage, self._logged(name, "stage", Reply(stdout=f"staged /var/lib/chaoskit/faults/{name} sh")))
            r.on(is_trigger, self._logged(name, "trigger", now_line("applied")))
            r.on(is_revert, self._logged(name, "revert", now_line("reverted", "controller")))
            self.hosts[name] = r
        self.pool_closed = False
        self.drivers: list[tuple[str, Any]] = []
        self.hooks: dict[str, Callable[[], None]] = {}  # "trigger pg1" -> what the cluster does then
        self.probe_log: ProbeLog | None = None
        self.sampled_hosts: list[str] = []

    def _logged(self, host: str, what: str, reply: Any) -> Any:
        def answer(cmd: str) -> Reply:
            self.log.append(f"{what} {host}")
            if f"{what} {host}" in self.hooks:
                self.hooks[f"{what} {host}"]()
            got = reply(cmd) if callable(reply) and not isinstance(reply, Reply) else reply
            if isinstance(got, BaseException):
                raise got
            return got
        return answer

    def parts(self, preflight: Any = None) -> DrillParts:
        lab = self

        class Pool(RemotePool):
            def close(self) -> None:
                lab.pool_closed = True
                lab.log.append("pool.close")
                super().close()

        def pool(inv: Inventory) -> RemotePool:
            return Pool(inv, factory=self.hosts.__getitem__)

        def ready(pb: Any, inv: Inventory, pool: RemotePool, ha: Any, fm: Any, allow: bool,
                  driver: Any = None) -> dict[str, Any]:
            self.drivers.append(("preflight", driver))
            for h in inv.hosts:
                fm.capabilities[h] = EVERYTHING
                fm.offsets[h] = ClockOffset(offset_s=0.0, uncertainty_s=0.0005, rtt_s=0.001, samples=7)
            return {"primary_before": "pg1", "production_targets": [], "warnings": [], "ha": {"manager": "none"}}

        return DrillParts(pool=pool, ha=lambda cluster, inv, pool: SimpleNamespace(kind="none"),
                          preflight=preflight or ready, load=self.load, probe=self.probe,
                          truth=self.truth, journal_root="/var/lib/chaoskit", logs=self.logs, metrics=self.metrics,
                          clock=self.clock or SYSTEM_CLOCK)

    def metrics(self, inv: Inventory, pool: RemotePool, hosts: list[str]) -> HostSampler:
        """A real sampler over scripted counter lines: each host's CPU counter (cgroup source) grows
        by half a core per second of host time."""
        lab = self
        self.sampled_hosts = hosts

        def lines(stop: Any) -> Any:
            t0 = time.time()
            for i in range(10_000):
                if stop():
                    return
                yield t0 + i * 0.05, 1000.0 + i, f"cgroup 2 {i * 1_000_000_000} 0 0 0 0"
                time.sleep(0.05)

        class Logged(HostSampler):
            def start(self) -> None:
                lab.log.append("metrics.start")
                super().start()

            def stop(self) -> Any:
                lab.log.append("metrics.stop")
                return super().stop()

        return Logged({h: ("cgroup:lab/" + h, lines) for h in hosts})

    def truth(self, inputs: DrillInputs, run_id: str, load: Any, driver: Any) -> dict[str, Any]:
        self.drivers.append(("truth", driver))
        return {}

    def logs(self, cluster: Any, ha: Any, pool: RemotePool, limit: int, hosts: tuple = ()) -> Any:
        lab = self

        class Window:
            def mark(self) -> None:
                lab.log.append(f"logs.mark {limit}")

            def collect(self, write: Any) -> list[dict[str, Any]]:
                lab.log.append("logs.collect")
                return [{"host": "pg1", "label": "postgres", "file": None}]

        return Window()

    def load(self, cluster: Any, inv: Inventory, spec: Any, recorder: Any, driver: Any = None, tool_dir: Any = None,
             on_event: Any = None) -> Any:
        lab = self
        self.drivers.append(("load", driver))

        class Load:
            lock = threading.Lock()
            workload = None

            def __init__(self) -> None:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._write, daemon=True)

            def setup(self) -> None:
                lab.log.append("load.setup")

            def cpu_window(self) -> CpuWindow:
                return CpuWindow([os.getpid()])  # the fake load writes from this process

            def _write(self) -> None:
                seq = 0
                while not self._stop.wait(0.02):
                    seq += 1
                    t = time.time()
                    with self.lock:
                        recorder.record(1, "write", t - 0.005, t, FAIL if lab.failing_load else OK,
                                        "connect_refused" if lab.failing_load else None, key=seq, keyed=SEQUENCE)
                        recorder.close_before(recorder.index(t))

            def start(self) -> float:
                lab.log.append("load.start")
                if lab.clock is not None:  # the clock books the writes as the drill moves it
                    lab.clock.book_into(recorder, failing=lab.failing_load)
                    return lab.clock.now()
                self._thread.start()
                return time.time()

            def stop(self) -> None:
                self._stop.set()
                if self._thread.is_alive():
                    self._thread.join()
                with self.lock:
                    recorder.finish()
                lab.log.append("load.stop")

        return Load()

    def probe(self, cluster: Any, inv: Inventory, ha: Any, interval: float, sink: Any = None,
              driver: Any = None) -> Any:
        lab = self
        self.drivers.append(("probe", driver))
        log = ProbeLog()
        t = time.time()
        log.samples += [(t, "pg1", "primary"), (t, "pg2", "replica")]
        log.events += [{"kind": "role", "t": t, "member": "pg1", "role": "primary", "previous": None},
                       {"kind": "role", "t": t, "member": "pg2", "role": "replica", "previous": None}]
        self.probe_log = log

        class Probe:
            def __init__(self) -> None:
                self.log = log

            def start(self) -> None:
                lab.log.append("probe.start")

            def stop(self) -> None:
                lab.log.append("probe.stop")

        return Probe()

    def drill(self, pb: Playbook | None = None, progress: Any = None, preflight: Any = None) -> DrillRecord:
        """One drill; its record (the result is kept in `self.result`)."""
        inputs = DrillInputs(pb or playbook(), self.inv, "pb.yaml", "inv.yaml")
        self.result = run_drill(inputs, out=Sink(self.log), progress=progress, parts=self.parts(preflight))
        return self.result.record


class Sink:
    """The run directory's place in the drill, logging the events that mark the way out."""

    MARKED = ("cluster_steady", "cluster_not_steady", "aborted")

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def event(self, ev: dict[str, Any]) -> None:
        if ev["kind"] in self.MARKED:
            self.log.append(f"event {ev['kind']}")

    def write_text(self, name: str, text: str) -> None:
        self.log.append(f"write {name}")

    def file(self, name: str) -> Path:
        return Path("/nonexistent/run") / name


def kinds(ctx: DrillRecord) -> list[str]:
    return [e["kind"] for e in ctx.events]


def test_a_clean_drill_reverts_on_schedule_then_waits_then_stops(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    ctx = lab.drill()
    assert ctx.aborted is None and ctx.refused is None
    # the logs' window opens before the load and closes after everything else stopped
    assert lab.log == ["logs.mark 262144", "load.setup", "probe.start", "metrics.start", "load.start", "stage pg1",
                       "trigger pg1", "revert pg1", "event cluster_steady", "load.stop", "metrics.stop", "probe.stop",
                       "logs.collect", "pool.close"]
    assert ctx.logs == [{"host": "pg1", "label": "postgres", "file": None}]
    # the members' hosts sampled from before the load to after it: 1 s of CPU per 1 s of host time
    # on 2 cores is 50 % busy, in every sample
    assert lab.sampled_hosts == ["pg1", "pg2"] and sorted(ctx.host_metrics) == ["pg1", "pg2"]
    for series in ctx.host_metrics.values():
        assert series.samples and {v["cpu_busy_pct"] for _, v in series.samples} == {50.0}
    [fault] = ctx.faults
    # staged from 1.5 s ahead, triggered from t0 + 2 s, reverted by the schedule from its effect
    # + 1 s (how late each came after its instant is this machine's doing, not asserted)
    assert fault.t_staged is not None and ctx.t0 + 0.5 <= fault.t_staged < fault.t_sent
    assert fault.t_scheduled == ctx.t0 + 2.0 <= fault.t_sent
    [reverted] = [e for e in ctx.events if e["kind"] == "fault_reverted"]
    assert reverted["scheduled"] == fault.t_effect + 1.0 <= fault.t_reverted  # the schedule's revert, not the heal's
    assert fault.reverted_by == "controller"
    assert ctx.heal == {"reverted": [fault.id], "not_verified": []}
    assert [k for k in kinds(ctx) if k.startswith(("fault_", "cluster_"))] == [
        "fault_staged", "fault_injected", "fault_reverted", "cluster_steady"]
    assert lab.pool_closed and lab.result.results["verdict"] is True
    # one driver for the drill, handed to every purpose
    assert [p for p, _ in lab.drivers] == ["preflight", "load", "probe", "truth"]
    assert len({id(d) for _, d in lab.drivers}) == 1 and lab.drivers[0][1] is not None


def test_the_way_out_is_heal_then_recovery_wait_then_load_then_probe_then_logs_then_hosts(tmp_path: Path) -> None:
    """A fault without a planned end is reverted by the heal: the heal runs before the recovery
    wait, which runs while the load still runs; then the load stops, then the probe, then the
    logs' window is kept, and the SSH pool closes last."""
    lab = Lab(tmp_path)
    ctx = lab.drill(playbook(steps=[{"at": "2s", "fault": {"kind": "pause", "target": "pg1"}}]))
    assert ctx.aborted is None
    assert lab.log[5:] == ["stage pg1", "trigger pg1", "revert pg1", "event cluster_steady", "load.stop",
                           "metrics.stop", "probe.stop", "logs.collect", "pool.close"]
    [fault] = ctx.faults
    assert fault.revert_verified and ctx.heal == {"reverted": [fault.id], "not_verified": []}
    # reverted by the heal at the end of the schedule (t0 + 4 s), not before
    assert fault.t_reverted - ctx.t0 >= 4.0


def test_a_preflight_refusal_touches_nothing(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    before = signal.getsignal(signal.SIGTERM)

    def refuse(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise PreflightError("pg1: a pause fault needs setsid, which this host lacks")

    with pytest.raises(PreflightError, match="lacks"):
        lab.drill(preflight=refuse)
    assert lab.log == ["pool.close"] and all(r.calls == [] for r in lab.hosts.values())
    assert lab.pool_closed and signal.getsignal(signal.SIGTERM) is before


def test_an_error_mid_drill_is_recorded_healed_and_the_load_stopped(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    lab.hosts["pg1"].rules[1].reply = lab._logged("pg1", "trigger", Reply(exited=3, stderr="pid 7 is not postgres"))
    ctx = lab.drill()
    assert ctx.aborted is not None and ctx.aborted.startswith("error: RemoteCommandError: pg1: `inject pause (")
    # the trigger script reverts on the host itself; nothing is left for the heal; no recovery wait
    assert lab.log == ["logs.mark 262144", "load.setup", "probe.start", "metrics.start", "load.start", "stage pg1",
                       "trigger pg1", "event aborted", "load.stop", "metrics.stop", "probe.stop", "logs.collect",
                       "pool.close"]
    assert "cluster_steady" not in kinds(ctx) and "aborted" in kinds(ctx)
    assert lab.result.results["verdict"] == "aborted"


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupt_after_the_fault_heals_first(tmp_path: Path, how: str) -> None:
    lab = Lab(tmp_path)
    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    mine = signal.getsignal(signal.SIGTERM)

    def progress(record: DrillRecord, roles: dict[str, str], window: dict) -> None:
        if "trigger pg1" in lab.log:
            if how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                raise KeyboardInterrupt

    # the fault would last 60 s: healed within that is healed by the interrupt, however slowly this
    # machine runs the test (the log's order says the same)
    long = playbook(steps=[{"at": "2s", "fault": {"kind": "pause", "target": "pg1", "duration": "60s"}}],
                    duration="70s")
    try:
        ctx = lab.drill(long, progress=progress)
        assert signal.getsignal(signal.SIGTERM) is mine  # the drill's handler is gone again
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ctx.aborted == "interrupted (Ctrl-C or SIGTERM)"
    assert lab.log[5:] == ["stage pg1", "trigger pg1", "event aborted", "revert pg1", "load.stop", "metrics.stop",
                           "probe.stop", "logs.collect", "pool.close"]
    [fault] = ctx.faults
    assert fault.revert_verified and fault.t_reverted - fault.t_effect < 60.0  # before its planned end
    assert lab.result.results["verdict"] == "aborted"


class BookingClock(FakeClock):
    """A fake clock for a whole drill: as the drill sleeps, the load's writes of the time passed
    are booked (50 writes/s, one every 0.02 s) and closed, as the live recorder would have them
    delivered; nothing depends on how fast this machine runs the test."""

    def __init__(self) -> None:
        super().__init__(time.time())
        self.rec: Recorder | None = None
        self.failing = False
        self.booked_until = 0.0

    def book_into(self, recorder: Recorder, failing: bool) -> None:
        self.rec, self.failing, self.booked_until = recorder, failing, self.now()

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.rec is None:
            return
        t, now = self.booked_until, self.now()
        while t + 0.02 <= now:
            t += 0.02
            self.rec.record(1, "write", t - 0.005, t, FAIL if self.failing else OK,
                            "connect_refused" if self.failing else None)
        self.booked_until = t
        self.rec.close_before(self.rec.index(now))


def test_the_abort_rule_unjournals_a_staged_fault(tmp_path: Path) -> None:
    """Every write fails from the start; the rule (over 50 % for 4 s of delivered time) stops the
    drill after the fault was staged (at 3.5 s) and before its instant (5 s): the staged entry is
    reverted. On a fake clock that books the writes as it moves, so the rule fires at 4.x s of
    drill time however slowly this machine runs the test."""
    lab = Lab(tmp_path, failing_load=True, clock=BookingClock())
    pb = playbook(steps=[{"at": "5s", "fault": {"kind": "pause", "target": "pg1"}}],
                  abort={"error_rate_above": 0.5, "for": "4s"}, duration="7s")
    ctx = lab.drill(pb)
    assert ctx.aborted == "error rate above 50% for 4s"
    assert 4.0 <= ctx.abort_rule["fired"]["t"] - ctx.t0 < 5.0
    assert lab.log[5:] == ["stage pg1", "event aborted", "revert pg1", "load.stop", "metrics.stop", "probe.stop",
                           "logs.collect", "pool.close"]
    assert ctx.faults == [] and ctx.heal == {"reverted": [], "not_verified": []}
    stage, revert = lab.hosts["pg1"].calls
    assert stage.split("ID=")[1][:12] == revert.split("ID=")[1][:12]


def test_a_revert_that_fails_verification_is_in_the_heal_record(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    lab.hosts["pg1"].rules[2].reply = lab._logged("pg1", "revert", Reply(exited=1, stderr="still frozen: 4242"))
    ctx = lab.drill()
    [fault] = ctx.faults
    assert ctx.heal["reverted"] == []
    assert ctx.heal["not_verified"] == [{"id": fault.id, "host": "pg1",
                                         "error": "still in effect after its revert: still frozen: 4242"}]
    # tried on schedule and again at the heal: the dead-man and `recover` remain
    assert lab.log.count("revert pg1") == 2



def test_a_step_held_back_by_a_slow_revert_is_said_late_with_what_held_it(tmp_path: Path) -> None:
    """Steps run one after the other: step 0's revert (due at its effect + 0.5 s) takes 2.5 s, so
    step 1's trigger, planned at +3 s, starts no earlier than +2.5 + 2.5 s: at least 2 s late. The
    drill says so (`step_late`, with the revert that held it and how long that took) and the
    narrative reads it; the revert itself, started on time, is not said late."""
    from chaoskit.report.narrative import _line

    lab = Lab(tmp_path)
    lab.hooks["revert pg1"] = lambda: time.sleep(2.5)
    pb = playbook(steps=[{"at": "2s", "fault": {"kind": "pause", "target": "pg1", "duration": "500ms"}},
                         {"at": "3s", "fault": {"kind": "pause", "target": "pg2", "duration": "500ms"}}],
                  duration="6s")
    ctx = lab.drill(pb)
    late = [e for e in ctx.events if e["kind"] == "step_late"]
    [trigger] = [e for e in late if e["step"] == 1 and e["what"] == "trigger"]
    assert trigger["planned"] == ctx.t0 + 3.0 and trigger["late_s"] >= 2.0 - 0.01
    assert trigger["held_by"]["step"] == 0 and trigger["held_by"]["what"] == "revert"
    assert trigger["held_by"]["took_s"] >= 2.5
    assert not [e for e in late if e["step"] == 0]
    text = _line(trigger)
    assert text is not None and text.startswith("steps[1]'s trigger started ") and "steps[0]'s revert" in text

def test_no_logs_are_kept_when_the_playbook_says_zero(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    ctx = lab.drill(playbook(evidence={"log_bytes_per_file": 0}))
    assert not any(e.startswith("logs.") for e in lab.log) and ctx.logs == []


class _Roles:
    """The role probe's view as a function of the (fake) clock."""

    def __init__(self, clock: Any, healthy_from: float | None) -> None:
        self.clock, self.healthy_from = clock, healthy_from

    def current_roles(self) -> dict[str, str]:
        if self.healthy_from is not None and self.clock.now() >= self.healthy_from - 1e-9:
            return {"pg1": "replica", "pg2": "primary"}
        return {"pg1": "down", "pg2": "replica"}


class Recovery:
    """`wait_recovery` on a fake clock: a two-member cluster whose roles follow the clock, a
    playbook with the given bound, and the events it recorded as (kind, t)."""

    def __init__(self, clock: Any, healthy_from: float | None, within: float = 3.0, recorder: Any = None,
                 faults: tuple[float, ...] = ()) -> None:
        self.clock = clock
        self.roles = _Roles(clock, healthy_from)
        self.pb = playbook(recovery={"within": f"{within}s", "tps_fraction": 0.9, "hold": "3s"},
                           load={"workload": "ledger", "workers": 1, "warmup": "0s"}, baseline="10s",
                           steps=[{"at": "12s", "fault": {"kind": "pause", "target": "pg1"}}], duration="20s")
        self.cluster = Cluster.model_validate({"name": "pg", "engine": "postgres", "user": "postgres",
                                               "members": [{"host": "pg1"}, {"host": "pg2"}]})
        self.recorder = recorder or Recorder(0.0)
        self.record = DrillRecord(started=0.0, t0=0.0, faults=[SimpleNamespace(t_effect=t) for t in faults])

    def wait(self) -> list[tuple[str, float]]:
        wait_recovery(self.record, self.pb, self.cluster, self.roles.current_roles, self.recorder, self.clock)
        return [(e["kind"], round(e["t"], 6)) for e in self.record.events]


class LoadClock(FakeClock):
    """A fake clock that books the load's writes as it moves: `rate(t)` writes/s, in 0.1 s
    intervals (each interval's writes at its middle), closed up to now, as the live recorder is."""

    def __init__(self, start: float, rate: Any) -> None:
        super().__init__(start)
        self.rec, self.rate = Recorder(0.0), rate
        self._book(0.0, start)

    def _book(self, t_from: float, t_to: float) -> None:
        for idx in range(round(t_from * 10), round(t_to * 10)):
            mid = idx / 10 + 0.05
            for _ in range(round(self.rate(mid) / 10)):
                self.rec.record(1, "write", mid - 0.001, mid, OK)
        self.rec.close_before(round(t_to * 10))

    def sleep(self, seconds: float) -> None:
        before = self.now()
        super().sleep(seconds)
        self._book(before, self.now())


def test_the_recovery_wait_keeps_the_load_until_throughput_is_back() -> None:
    """Baseline 100 writes/s (threshold 90/s for 3 s), a fault at 12 s, the heal at 20 s.
    Worked by hand on the 1 s rolling window, ten 0.1 s intervals: """

    # 0/s from the fault, 40/s from 15 s, 100/s from 20 s. The window ending 20.9 s holds one
    # interval at 40/s: 4 + 9 x 10 = 94 >= 90; ending 20.8 s: 8 + 80 = 88 < 90. So the stretch
    # starts at 20.9 and is held once the window ending 23.9 s is closed: the wait ends at the
    # first of its 0.5 s checks at or after 23.9 s.
    def rate(t: float) -> float:
        return 100 if t < 12 else 0 if t < 15 else 40 if t < 20 else 100

    clock = LoadClock(20.0, rate)
    assert Recovery(clock, healthy_from=20.0, within=30.0, recorder=clock.rec, faults=(12.0,)).wait() == [
        ("cluster_steady", 20.0), ("throughput_recovered", 20.9)]
    assert 23.9 <= clock.now() < 24.4 and clock.sleeps[-1] == 0.5

    # still 40/s after the heal: the load runs to the bound (20 + 6 s), then says so
    clock = LoadClock(20.0, lambda t: 100 if t < 12 else 40)
    assert Recovery(clock, healthy_from=20.0, within=6.0, recorder=clock.rec, faults=(12.0,)).wait() == [
        ("cluster_steady", 20.0), ("throughput_not_recovered", 26.0)]

    # back before the heal (30/s from the fault, 100/s from 15 s: the window ending 15.9 s holds
    # 3 + 90 = 93, ending 15.8 s 6 + 80 = 86): nothing more to wait for
    clock = LoadClock(20.0, lambda t: 100 if t < 12 else 30 if t < 15 else 100)
    assert Recovery(clock, healthy_from=20.0, within=30.0, recorder=clock.rec, faults=(12.0,)).wait() == [
        ("cluster_steady", 20.0), ("throughput_recovered", 15.9)]
    assert 0.5 not in clock.sleeps  # the roles' 0.2 s polls only


def test_the_recovery_wait_on_a_fake_clock() -> None:
    # steady from the start: held for 1 s (five 0.2 s polls), stamped when it became steady
    clock = FakeClock(0.0)
    assert Recovery(clock, healthy_from=0.0).wait() == [("cluster_steady", 0.0)] and clock.sleeps == [0.2] * 5
    # a primary from 2.1 s: the first poll that sees it is at 2.2 s; held until 3.2 s, past the 3 s bound
    # for waiting, but the hold started inside it
    clock = FakeClock(0.0)
    assert Recovery(clock, healthy_from=2.1, within=4.0).wait() == [("cluster_steady", 2.2)]
    assert round(clock.now(), 6) == 3.2
    # never steady: after the 3 s bound (15 polls), the roles as last seen
    clock = FakeClock(0.0)
    assert Recovery(clock, healthy_from=None).wait() == [("cluster_not_steady", 3.0)] and len(clock.sleeps) == 15
    # (an aborted drill does not wait at all: test_an_error_mid_drill_is_recorded_healed_and_the_load_stopped)


def test_a_step_after_an_event_fires_on_it_and_one_whose_event_never_comes_is_skipped(tmp_path: Path) -> None:
    """Step 0 pauses pg1 at +2 s; when its trigger is sent, the probe sees pg2 become the primary.
    Step 1 waits for `promoted` (+0.3 s): it is staged and triggered on pg2 after that event.
    Step 2 waits 0.5 s for pg1 to go down, which never happens: skipped, recorded, nothing staged."""
    lab = Lab(tmp_path)

    def promote_pg2() -> None:
        assert lab.probe_log is not None
        with lab.probe_log.lock:
            lab.probe_log.emit({"kind": "role", "t": time.time(), "member": "pg2", "role": "primary",
                                "previous": "replica"})

    lab.hooks["trigger pg1"] = promote_pg2
    ctx = lab.drill(playbook(steps=[
        {"at": "2s", "fault": {"kind": "pause", "target": "pg1", "duration": "0.5s"}},
        {"after": {"event": "promoted", "delay": "0.3s", "within": "1.5s"},
         "fault": {"kind": "pause", "target": "pg2", "duration": "0.3s"}},
        {"after": {"event": "member_down", "member": "pg1", "within": "0.5s"},
         "fault": {"kind": "pause", "target": "pg1", "duration": "0.3s"}}]))
    assert ctx.aborted is None
    assert [e for e in lab.log if e.split()[0] in ("stage", "trigger")] == [
        "stage pg1", "trigger pg1", "stage pg2", "trigger pg2"]
    fired, skipped = ctx.triggered
    assert (fired["fired"], fired["step"], fired["event"], fired["member"], fired["source"]) == (
        True, 1, "promoted", "pg2", "role-probe")
    assert fired["planned"] == fired["t_event"] + 0.3
    first, second = ctx.faults
    assert first.host == "pg1" and second.host == "pg2" and second.step == 1
    assert second.t_sent >= fired["planned"] and second.t_scheduled == fired["planned"]
    assert (skipped["fired"], skipped["step"], skipped["reason"]) == (
        False, 2, "no member_down of pg1 within 0.5s of arming")
    assert skipped["armed_at"] >= second.t_sent  # armed once step 1 had started
    assert [k for k in kinds(ctx) if k.startswith("step_")] == ["step_triggered", "step_skipped"]


def test_several_faults_of_one_step_start_together_and_end_together(tmp_path: Path) -> None:
    """`faults:` pauses pg1 and pg2 at +2 s for 1 s. Both are staged ahead; at the instant each host
    gets its trigger on its own channel at once: pg1's host answers only once pg2's trigger has
    arrived, which one after the other would never happen. Both carry the step's planned instant
    and are reverted by the schedule at the last effect + 1 s."""
    lab = Lab(tmp_path)
    pg2_sent = threading.Event()
    lab.hooks["trigger pg2"] = pg2_sent.set
    waited: list[bool] = []
    # pg1's host answers only once pg2's trigger has come (or after 30 s): one after the other,
    # pg2's would only be sent after pg1's answer
    lab.hooks["trigger pg1"] = lambda: waited.append(pg2_sent.wait(30.0))
    ctx = lab.drill(playbook(steps=[{"at": "2s", "faults": [
        {"kind": "pause", "target": "pg1", "duration": "1s"},
        {"kind": "pause", "target": "pg2", "duration": "1s"}]}]))
    assert ctx.aborted is None
    staged = [e for e in lab.log if e.startswith(("stage", "trigger", "revert"))]
    assert sorted(staged[:2]) == ["stage pg1", "stage pg2"] and sorted(staged[2:4]) == ["trigger pg1", "trigger pg2"]
    assert sorted(staged[4:]) == ["revert pg1", "revert pg2"]
    one, two = sorted(ctx.faults, key=lambda f: f.host)  # the manager's record is in order of answer
    assert (one.host, two.host, one.step, two.step) == ("pg1", "pg2", 0, 0)
    assert one.t_scheduled == two.t_scheduled == ctx.t0 + 2.0
    assert waited == [True]  # pg2's trigger was sent while pg1's host had not answered yet
    last = max(one.t_effect, two.t_effect)
    reverts = [e for e in ctx.events if e["kind"] == "fault_reverted"]
    assert len(reverts) == 2 and {e["scheduled"] for e in reverts} == {last + 1.0}  # both by the schedule
    for f in (one, two):
        assert f.reverted_by == "controller" and f.t_reverted >= last + 1.0


@pytest.mark.parametrize(("faults", "message"), [
    ([{"kind": "pause", "target": "pg1"}], "2 to 8 faults"),
    ([{"kind": "pause", "target": "pg1", "duration": "1s"}, {"kind": "pause", "target": "pg2", "duration": "2s"}],
     "share their duration"),
    ([{"kind": "pause", "target": "pg1"}, {"kind": "latency", "target": "client", "delay_ms": 5}],
     "target client goes in a step of its own"),
])
def test_several_faults_in_one_step_are_refused_where_they_cannot_go_together(faults: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        playbook(steps=[{"at": "2s", "faults": faults}])
    with pytest.raises(ValueError, match="exactly one of fault, faults"):
        playbook(steps=[{"at": "2s", "fault": faults[0], "faults": faults}])
