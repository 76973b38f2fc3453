"""A sysbench client group (`load.groups[].tool: sysbench`): one sysbench for the group's threads.

sysbench 1.0.20 reports rates, never single transactions: one line per second (`--report-interval=1`),
read here from its output as it is written (sysbench flushes each line) and stamped with the
instant it was read. Each report's transactions are counted in the interval that ends then, with
no latency (none is known per transaction), and the group's one client (the sysbench process, on
the group's first worker id) is acknowledged at that instant. So the group's outage edges and RTO
have a resolution of one report interval: the real first transaction after the outage happened
within the second before the report that counted it, never after it. RPO is not available:
sysbench does not say which writes it had acknowledged.

sysbench 1.0.20 does not survive a lost connection: with MySQL it ends at the first one (FATAL),
with `--mysql-ignore-errors` or with PostgreSQL it crashes (tests/fixtures/tools/SOURCE.md). This
runner starts it again (backoff 50 ms doubling to 250 ms while it cannot connect), each time against
the writer the load's own writer search finds then (sysbench spreads its threads over a host
list, so it is given one host). The end of a run is booked when its first FATAL line was read, or
when its exit was seen; a run that never started its threads is a failed start.

Kept under `tools/<group>/`: `sysbench.out` (everything sysbench wrote, with `== run N` lines for
each start), `reports.tsv` (each report line with the instant it was read and its run number: the
instants the group's figures rest on) and `prepare.out`.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.recorder import FAIL, INFO, Recorder
from chaoskit.tools import MEASURES, sysbench
from chaoskit.workload.outcomes import connect_error_class
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import STOP_GRACE_S, ToolGroupBase, run_setup, with_parent_death

RTO_RESOLUTION_S = MEASURES["sysbench"].rto_resolution_s  # its --report-interval


def _driver(cluster: Cluster, inventory: Inventory, spec: LoadSpec, group: ClientGroup) -> Driver:
    return driver_for(cluster, inventory, connect_timeout=spec.connect_timeout, op_timeout=spec.op_timeout,
                      profile=group.client_profile())


def _connection(driver: Driver) -> tuple[str, str | None, str, dict[str, str]]:
    """sysbench's driver name, user, database, and the environment holding the password."""
    name = sysbench.DRIVERS[driver.family]
    password = driver.password()
    env = {sysbench.PASSWORD_ENV[name]: password} if password is not None else {}
    return name, driver.cluster.user, driver.cluster.database, env


@dataclass(kw_only=True)
class SysbenchGroup(ToolGroupBase):
    """The group's one sysbench, started against the writer found then, read and restarted."""

    driver: Driver

    def __post_init__(self) -> None:
        self.settings = self.group.sysbench or sysbench.Settings()
        self.kind = "write" if self.settings.writes else "read"
        self.worker = self.group.first_worker
        self.name, self.user, self.db, self.env = _connection(self.driver)
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = open(self.raw / "sysbench.out", "ab")  # noqa: SIM115 - held for the group's life
        # each report line with the instant it was read: the instants the group's figures rest on
        self.reports = open(self.raw / "reports.tsv", "a", encoding="utf-8")  # noqa: SIM115
        self.buffer = b""
        self.runs = 0
        self.started = 0.0
        self.threads_started = False
        self.said: list[str] = []  # this run's words other than its reports (how it ends is read from them)
        self.first_fatal: float | None = None
        self.last_report_s = 0.0
        self.last_ok: float | None = None
        self.back_at: float | None = None
        self.down_since: float | None = None
        self.failed_starts = 0
        self.backoff = self.spec.backoff_min
        self.next_start = 0.0

    def _start(self, now: float) -> None:
        self.runs += 1
        self.started = now
        try:
            host, port = self.driver.writer_endpoint()
        except Exception as exc:  # no writer answered: a failed start, as a builtin client's failed connect
            cls = connect_error_class(self.driver, exc)
            said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            self.out.write(f"== run {self.runs} not started {now:.6f}: no writer found ({said})\n".encode())
            self._failed_start(now, cls.value, f"no writer found: {said}")
            return
        argv = sysbench.run_argv(self.settings, self.name, host, port, self.user, self.db, self.group.workers,
                                 rate=self.rate_share)
        self.out.write(f"== run {self.runs} started {now:.6f} against {host}:{port}\n".encode())
        self.out.flush()
        self.proc = subprocess.Popen(with_parent_death(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env={**os.environ, **self.env}, cwd=self.raw)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.threads_started, self.said, self.first_fatal = False, [], None
        self.last_report_s, self.buffer, self.back_at = 0.0, b"", None

    def _failed_start(self, now: float, cls: str, message: str) -> None:
        self.recorder.record(self.worker, self.kind, self.started or now, now, FAIL, cls, message)
        self.failed_starts += 1
        self.down_since = self.down_since or now
        self.backoff = min(self.spec.backoff_max, self.backoff * 2)
        self.next_start = now + self.backoff

    def _read(self, now: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            data = self.proc.stdout.read()
        except BlockingIOError:
            data = None
        if not data:
            return
        self.out.write(data)
        self.out.flush()
        lines = (self.buffer + data).split(b"\n")
        self.buffer = lines.pop()
        for raw in lines:
            self._line(raw.decode("utf-8", "replace"), now)

    def _line(self, line: str, now: float) -> None:
        report = sysbench.parse(line).intervals
        if not report:
            self.said.append(line)
            if line.startswith("Threads started!"):
                self.threads_started = True
            elif line.startswith("FATAL: ") and self.first_fatal is None:
                self.first_fatal = now
            return
        (iv,) = report
        self.reports.write(f"{now:.6f}\t{self.runs}\t{line}\n")
        self.reports.flush()
        span = iv.t_s - self.last_report_s
        self.last_report_s = iv.t_s
        done = round(iv.tps * span)
        if done <= 0:
            return
        self.recorder.record_rate(self.worker, self.kind, now, done)
        self.last_ok = now
        if self.back_at is None:
            self.back_at = now
            if self.down_since is not None:
                self.event("tool_client_back", now, self.worker, runs=self.runs, failed_starts=self.failed_starts,
                           down_s=round(now - self.down_since, 6), resolution_s=RTO_RESOLUTION_S)
                self.down_since, self.failed_starts = None, 0

    def _ended(self, now: float) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), True)
        rest = proc.stdout.read() or b""
        self.out.write(rest)
        for raw in (self.buffer + rest).split(b"\n"):
            if raw:
                self._line(raw.decode("utf-8", "replace"), now)
        self.buffer = b""
        proc.stdout.close()
        self.proc = None
        end = sysbench.ending("\n".join(self.said), proc.returncode if proc.returncode is not None else 0,
                              self.driver.classify_words)
        self.out.write(f"== run {self.runs} ended {now:.6f}, exit {proc.returncode}\n".encode())
        self.out.flush()
        if self.stopping and (end is None or proc.returncode in (-15, 143)):
            return
        if end is None:
            end = sysbench.Ending(self.threads_started, f"sysbench ended (exit {proc.returncode})",
                                  ErrorClass.connection_lost)
        t_end = max(self.first_fatal or now, self.last_ok or 0.0)
        if not end.started:
            self.started = min(self.started, t_end)
            self._failed_start(t_end, end.error_class.value, end.message)
            return
        # one op per thread: a thread that said it failed in its COMMIT may have committed (info),
        # in an earlier statement it did not (fail); one that said nothing (a crash) is unknown
        said = list(end.failed_in[:self.group.workers])
        lost = end.error_class == ErrorClass.connection_lost
        for i in range(self.group.workers):
            committing = sysbench.may_have_committed(said[i]) if i < len(said) else True
            outcome = INFO if self.settings.writes and lost and committing else FAIL
            self.recorder.record(self.worker, self.kind, self.last_ok or self.started, t_end, outcome,
                                 end.error_class.value, f"in {said[i][:60]!r}: {end.message}" if i < len(said)
                                 else end.message)
        self.down_since = t_end
        self.backoff = self.spec.backoff_min
        self.next_start = now
        self.event("tool_client_aborted", t_end, self.worker, exit=proc.returncode, why=end.message)

    def tick(self, now: float) -> None:
        if self.proc is None:
            if not self.stopping and now >= self.next_start:
                self._start(now)
            return
        self._read(now)
        if self.proc.poll() is not None:
            self._ended(now)

    def stop(self) -> None:
        """sysbench reports as it goes: the load's stop ends it with SIGTERM (its final summary
        is not needed); one still running after the grace is killed."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self._read(time.time())
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._ended(time.time())
        self.out.close()
        self.reports.close()


def prepare(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
    """Before the load: sysbench's tables dropped and made again on the writer (cleanup, prepare)."""
    settings = group.sysbench or sysbench.Settings()
    if not settings.prepare:
        return
    driver = _driver(cluster, inventory, spec, group)
    name, user, db, env = _connection(driver)
    host, port = driver.writer_endpoint()
    commands = sysbench.prepare_argvs(settings, name, host, port, user, db)
    run_setup([(f"sysbench {settings.test} {argv[-1]} against {host}:{port}", argv) for argv in commands],
              raw / "prepare.out", env, group.name, timeout=900)


def runner(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
           recorder: Recorder, rate_share: float | None) -> SysbenchGroup:
    return SysbenchGroup(group, spec, raw, recorder, rate_share, driver=_driver(cluster, inventory, spec, group))


def describe(group: ClientGroup, route: Cluster) -> list[str]:
    """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
    s = group.sysbench or sysbench.Settings()
    name, host, db = sysbench.DRIVERS[route.engine], "<writer>", route.database
    out = [" ".join(argv) for argv in sysbench.prepare_argvs(s, name, host, 0, route.user, db)] if s.prepare else []
    out.append(" ".join(sysbench.run_argv(s, name, host, 0, route.user, db, group.workers))
               + f"   (the writer of cluster {route.name} found before each start, its port for 0; password in "
               f"{sysbench.PASSWORD_ENV[name]}; started again when it ends)")
    return out
