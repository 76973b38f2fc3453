"""A JMeter client group (`load.groups[].tool: jmeter`): the user's plan run once, non-GUI, by the
user's JMeter, for the whole load; every sample read from its JTL as JMeter writes it.

Each JMeter thread is one client of the group: threads get the group's worker ids in the order
their first sample is read (a plan's thread count is known at validate: `tools.jmeter.plan_threads`
or the group's `workers`). A sample is one op: its start and elapsed time from the JTL, `ok` when
JMeter marked it a success, else classed by its SQLSTATE or its words (`tools.jmeter.error_class`);
a failed write whose connection broke may have committed (unknown), one the server refused did
not (failed), as chaoskit's own clients judge theirs. JMeter does not give up a thread whose
connection broke: the plan's next sample tries again (a JDBC pool validates or reconnects; the
shipped example plan reconnects itself), so no client is started again here. JMeter ending before
the load's stop (the plan ran out, or the JVM failed) is said as an event and not hidden: the
group has no load after it.

JMeter is a launcher script that runs java as its child (JMeter 5.x's bin/jmeter does not exec),
so it runs under a process-group guard (`lifeline.guarded_group`): the load's stop, or the
controller's death, ends the script and the JVM together. The connection reaches the plan as
JMeter properties on a pipe (`-q /dev/fd/N`): nothing from the inventory is on a command line,
the password is never written to disk. Kept under `tools/<group>/`: `results.jtl` (JMeter's
samples as it wrote them), `jmeter.log` (its own log) and `jmeter.out` (its console).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.lifeline import guarded_group
from chaoskit.recorder import FAIL, OK, Recorder
from chaoskit.tools import jmeter
from chaoskit.workload.outcomes import outcome_for
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import STOP_GRACE_S, ToolGroupBase

JDBC_DRIVER_CLASS = {"postgres": "org.postgresql.Driver", "mysql": "org.mariadb.jdbc.Driver"}


def connection_properties(driver: Driver, spec: LoadSpec, group: ClientGroup) -> dict[str, str]:
    """What the plan is given of its route, as JMeter properties (`${__P(chaoskit.jdbc.url)}` in a
    JDBC Connection Configuration, `props.get(...)` in a script)."""
    cluster = driver.cluster
    endpoints = driver.endpoints()
    props = {
        "chaoskit.jdbc.url": jmeter.jdbc_url(driver.family, endpoints, cluster.database or "", spec.connect_timeout,
                                             spec.op_timeout),
        "chaoskit.jdbc.driver": JDBC_DRIVER_CLASS[driver.family],
        "chaoskit.jdbc.user": cluster.user or "",
        "chaoskit.db.hosts": ",".join(f"{h}:{p}" for h, p in endpoints),
        "chaoskit.db.name": cluster.database or "",
        "chaoskit.group": group.name,
        jmeter.THREADS_PROPERTY: str(group.workers),
        "chaoskit.run_id": spec.run_id,
    }
    password = driver.password()
    if password is not None:
        props["chaoskit.jdbc.password"] = password
    return props


def book_sample(recorder: Recorder, worker: int, kind: str, s: jmeter.Sample, writes: bool,
                words: Callable[[str], ErrorClass | None]) -> None:
    """One sample as one op: ok as JMeter marked it; a failure classed by its SQLSTATE or words,
    unknown where a write's connection broke (it may have committed), failed where the server
    refused it or it never connected (the same rule as chaoskit's own clients' commits)."""
    if s.ok:
        recorder.record(worker, kind, s.t_start, s.t_end, OK)
        return
    cls = jmeter.error_class(s.code, s.message, words)
    outcome = outcome_for(cls, "commit", False) if writes else FAIL
    recorder.record(worker, kind, s.t_start, s.t_end, outcome, cls.value, f"{s.code} {s.message}".strip()[:200])


@dataclass(kw_only=True)
class JmeterGroup(ToolGroupBase):
    """The group's one JMeter, started at the first tick, read on every tick, stopped at the end."""

    driver: Driver

    def __post_init__(self) -> None:
        assert self.group.jmeter is not None
        self.settings = self.group.jmeter
        self.kind = "write" if self.settings.writes else "read"
        self.jtl = self.raw / "results.jtl"
        self.reader = jmeter.JtlReader(self.jtl)
        self.read_to = 0
        self.threads: dict[str, int] = {}
        self.free = list(self.group.worker_ids)
        self.dropped = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = False

    def _start(self, now: float) -> None:
        self.started = True
        props = jmeter.properties_text(connection_properties(self.driver, self.spec, self.group))
        r, w = os.pipe()
        try:
            os.write(w, props.encode("ascii"))  # escaped to ASCII; far below a pipe's 64 KiB
        finally:
            os.close(w)
        argv = jmeter.run_argv(self.settings.bin, self.settings.plan, str(self.jtl), str(self.raw / "jmeter.log"),
                               f"/dev/fd/{r}")
        with open(self.raw / "jmeter.out", "ab") as out:
            out.write(f"== started {now:.6f}\n".encode())
            out.flush()
            try:
                self.proc = subprocess.Popen(guarded_group(argv), stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, pass_fds=(r,), cwd=self.raw,
                                             start_new_session=True)
            finally:
                os.close(r)

    def _read(self) -> None:
        if not self.jtl.exists():
            return
        with open(self.jtl, "rb") as fh:
            fh.seek(self.read_to)
            data = fh.read()
        self.read_to += len(data)
        for sample in self.reader.feed(data):
            self._book(sample)

    def _book(self, s: jmeter.Sample) -> None:
        worker = self.threads.get(s.thread)
        if worker is None:
            if not self.free:
                self.dropped += 1
                if self.dropped == 1:
                    self.event("tool_samples_dropped", s.t_end, self.group.first_worker, thread=s.thread,
                               why=f"the plan runs more threads than the group's {self.group.workers} workers")
                return
            worker = self.threads[s.thread] = self.free.pop(0)
        book_sample(self.recorder, worker, self.kind, s, self.settings.writes, self.driver.classify_words)

    def _ended(self, now: float) -> None:
        assert self.proc is not None
        code = self.proc.returncode
        self._read()
        self.proc = None
        if not self.stopping:
            said = (self.raw / "jmeter.out").read_text(errors="replace").strip().splitlines()
            self.event("tool_ended", now, self.group.first_worker, exit=code,
                       why=(said[-1][:200] if said else "no output") + " (not started again: the group has no "
                       "load after this)")

    def tick(self, now: float) -> None:
        if not self.started:
            self._start(now)
            return
        if self.proc is None:
            return
        self._read()
        if self.proc.poll() is not None:
            self._ended(now)

    def stop(self) -> None:
        """SIGTERM to the guard ends JMeter's script and JVM (every finished sample is already in the
        JTL: it is flushed sample by sample); then the rest of the JTL is read."""
        self.stopping = True
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._ended(time.time())
        else:
            self._read()
        if self.dropped:
            self.event("tool_samples_dropped", time.time(), self.group.first_worker, samples=self.dropped,
                       why=f"the plan ran more threads than the group's {self.group.workers} workers")


def _driver(cluster: Cluster, inventory: Inventory, spec: LoadSpec, group: ClientGroup) -> Driver:
    return driver_for(cluster, inventory, connect_timeout=spec.connect_timeout, op_timeout=spec.op_timeout,
                      profile=group.client_profile())


def prepare(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
    """Nothing to make: a plan's tables are the plan's (a setUp thread group makes them)."""


def runner(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
           recorder: Recorder, rate_share: float | None) -> JmeterGroup:
    return JmeterGroup(group, spec, raw, recorder, rate_share, driver=_driver(cluster, inventory, spec, group))


def describe(group: ClientGroup, route: Cluster) -> list[str]:
    """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
    s = group.jmeter
    assert s is not None
    argv = jmeter.run_argv(s.bin, s.plan, f"tools/{group.name}/results.jtl", f"tools/{group.name}/jmeter.log",
                           "/dev/fd/<pipe>")
    return [" ".join(argv) + f"   (properties on the pipe: chaoskit.jdbc.url/.driver/.user/.password of cluster "
            f"{route.name}, chaoskit.db.hosts, chaoskit.db.name; the plan's {group.workers} threads, run once "
            "for the whole load)"]
