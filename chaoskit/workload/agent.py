"""A load agent: one share of a client group run by a process of its own, detached from the
controller, that writes every delivery into its spool before anything else sees it (issue: load
from several machines). Started as `python3 -m chaoskit.workload.agent DIR`, where DIR holds:

- `order.json` (written by the controller before the start, checked here as `AgentOrder`): the
  cluster and inventory, the load spec, the group, the worker ids, the run's clock base;
- `lease`: the instant (control clock, seconds) until which the agent may load; the controller
  rewrites it (`renew`); past it the agent stops by itself, its final batch spooled: a controller
  that died leaves no load running longer than its lease;
- `go`: the start instant, written when every agent is ready;
- `offset`: its host's clock offset (host minus control, seconds) as the controller measured it,
  written before the start and again after each re-measurement: the agent stamps every op, and
  reads the lease and the start, on the control clock (`chaoskit.workload.stamp`);
- `stop`: present once the controller ends the load;
- `controller.json`: the controller that started it (host, user, pid, start time) and the loader
  host it was started on (`loader`), for `chaoskit recover`, which leaves the agents of a
  controller still running alone and ends an agent only through its own host;
- `tools/`: what a tool group's tool wrote (pgbench's per-transaction logs, sysbench's report),
  kept on the loader host;
- `agent.pid` (the agent's, with its start time as the kernel counts it, one line each), `spool.frames`
  (its deliveries, `chaoskit.workload.spool` and `.wire`), `agent.log` (its stderr).

The control files are read as numbers and nothing else: a value that is not one is ignored and
said in the log (the lease then ends the agent), never run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from chaoskit.lifeline import process_start_time
from chaoskit.workload import stamp
from chaoskit.workload.engine import engine
from chaoskit.workload.framed import LEASE_S, FramedSource, Loader
from chaoskit.workload.source import LoadSource
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.spool import Frame, SpoolReader, SpoolWriter
from chaoskit.workload.wire import encode_delivery

if TYPE_CHECKING:
    from chaoskit.workload.runner import LoadRunner

ORDER, LEASE, GO, STOP, PID, SPOOL, LOG = "order.json", "lease", "go", "stop", "agent.pid", "spool.frames", "agent.log"
OFFSET = "offset"  # the host's clock offset the controller measured (seconds, host minus control)
TOOLS = "tools"  # a tool group's output (its logs), kept on the loader host
CONTROLLER = "controller.json"  # who started it (host, pid, start time): `recover` spares a live one's agents
POLL_S = 0.05


class AgentOrder(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_json: str
    inventory_json: str
    spec_json: str
    group_json: str
    worker_ids: list[int] = Field(min_length=1)
    base: float
    rate_share: float | None = None

    @classmethod
    def of(cls, cluster_json: str, inventory_json: str, spec: LoadSpec, group: ClientGroup, worker_ids: list[int],
           base: float, rate_share: float | None) -> AgentOrder:
        return cls(cluster_json=cluster_json, inventory_json=inventory_json,
                   spec_json=TypeAdapter(LoadSpec).dump_json(spec).decode(),
                   group_json=TypeAdapter(ClientGroup).dump_json(group).decode(), worker_ids=worker_ids, base=base,
                   rate_share=rate_share)

    def spec(self) -> LoadSpec:
        return TypeAdapter(LoadSpec).validate_json(self.spec_json)

    def group(self) -> ClientGroup:
        """The group as the controller had it (a tool's settings back as its settings model)."""
        group = TypeAdapter(ClientGroup).validate_json(self.group_json)
        settings = engine(group.tool).settings
        if settings is not None and isinstance(group.settings, dict):
            group = replace(group, settings=settings.model_validate(group.settings))
        return group


def read_instant(path: Path) -> float | None:
    """A control file's instant, or None (absent, or not a finite number)."""
    try:
        text = path.read_text()[:64].strip()
    except OSError:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def write_instant(path: Path, value: float) -> None:
    """Replaced in one step (a reader never sees half a number)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(repr(float(value)))
    os.replace(tmp, path)


class _Spooled:
    """The worker loop's `out`: each (kind, pid[, payload]) a frame of the spool."""

    def __init__(self, writer: SpoolWriter) -> None:
        self.writer = writer
        self.lock = threading.Lock()

    def put(self, word: tuple[Any, ...]) -> None:
        kind, _pid, *rest = word
        with self.lock:
            self.writer.append(encode_delivery(kind, stamp.now(), rest[0] if rest else None))


class _Instant:
    def __init__(self) -> None:
        self.value = 0.0


class _Control:
    """The control files, watched: `go` and `stop` as events, the lease enforced."""

    def __init__(self, directory: Path, log: Any, clock: stamp.StampClock = stamp.CLOCK) -> None:
        self.dir = directory
        self.log = log
        self.clock = clock
        self.go = threading.Event()
        self.stop = threading.Event()
        self.start_at = _Instant()
        self.lease_ended = False
        self.clock_offset = 0.0
        self.clock_taken = False  # the first offset is applied at once, a later one slewed in

    def take_clock(self) -> None:
        """The offset in the `offset` file, when it changed (absent or not a number: as it was)."""
        offset = read_instant(self.dir / OFFSET)
        if offset is not None and offset != self.clock_offset:
            self.clock.set_offset(offset, slew=self.clock_taken)
            self.clock_offset, self.clock_taken = offset, True
            print(f"agent: clock offset {offset:+.6f} s", file=self.log, flush=True)

    def watch(self) -> None:
        said_bad = False
        while not self.stop.is_set():
            self.take_clock()
            now = self.clock.now()
            lease = read_instant(self.dir / LEASE)
            if lease is None and not said_bad:
                said_bad = True
                print(f"agent: {LEASE} is not a number: the lease is taken as ended", file=self.log, flush=True)
            if lease is None or now > lease:
                self.lease_ended = True
                print(f"agent: the lease ended at {lease}; stopping", file=self.log, flush=True)
                self.stop.set()
                self.go.set()  # a start never given: the loop returns at once
                return
            if not self.go.is_set():
                t = read_instant(self.dir / GO)
                if t is not None:
                    self.start_at.value = t
                    self.go.set()
            if (self.dir / STOP).exists():
                self.stop.set()
                return
            time.sleep(POLL_S)


def main(directory: Path) -> int:
    from chaoskit.workload.runner import run_share
    from chaoskit.workload.tool_group import run_tool

    log = (directory / LOG).open("a")  # its stdout and stderr go there too (the loader's redirection)
    pid = os.getpid()
    fd = os.open(directory / PID, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{pid}\n{process_start_time(pid)}\n")
    order = AgentOrder.model_validate_json((directory / ORDER).read_bytes())
    control = _Control(directory, log)
    control.take_clock()  # before anything is stamped or the lease is read
    threading.Thread(target=control.watch, name="agent-control", daemon=True).start()
    with SpoolWriter(directory / SPOOL) as writer:
        out = _Spooled(writer)
        group = order.group()
        try:
            if engine(group.tool).external():  # its tool's output stays here, in tools/
                (directory / TOOLS).mkdir(exist_ok=True)
                run_tool(order.cluster_json, order.inventory_json, order.spec(), group, str(directory / TOOLS),
                         order.base, order.rate_share, out, control.go, control.start_at, control.stop)
            else:
                run_share(order.cluster_json, order.inventory_json, order.spec(), group, order.worker_ids,
                          order.base, order.rate_share, out, control.go, control.start_at, control.stop)
        except Exception as exc:  # said in its spool as an event, then in its log; no final batch
            out.put(("event", pid, {"kind": "agent_failed", "t": stamp.now(),
                                    "error": f"{type(exc).__name__}: {exc}"[:300]}))
            raise
    print(json.dumps({"agent": "ended", "lease_ended": control.lease_ended}), file=log, flush=True)
    return 0



class ProcessLoader(Loader):
    """An agent as a process of the control node (detached in a session of its own, so a signal
    to the controller's process group does not reach it: its lease is what ends it), read from
    its spool file directly. Loaders on other hosts start the same agent their own way."""

    def __init__(self, name: str, directory: Path, order: AgentOrder, python: str = sys.executable) -> None:
        self.name = name
        self.dir = directory
        self.order = order
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.reader = SpoolReader(directory / SPOOL)

    def start(self, lease_until: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=False, mode=0o700)
        fd = os.open(self.dir / ORDER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.order.model_dump_json())
        write_instant(self.dir / LEASE, lease_until)
        if self.clock_offset_s:  # an agent whose clock is not the controller's (a test's faked one)
            write_instant(self.dir / OFFSET, self.clock_offset_s)
        import chaoskit

        home = str(Path(chaoskit.__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (home, os.environ.get("PYTHONPATH")) if p)}
        with (self.dir / LOG).open("ab") as log:
            self.proc = subprocess.Popen([self.python, "-m", "chaoskit.workload.agent", str(self.dir)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True, close_fds=True)

    def go(self, t_start: float) -> None:
        write_instant(self.dir / GO, t_start)

    def set_clock(self, offset_s: float) -> None:
        write_instant(self.dir / OFFSET, offset_s)

    def renew(self, lease_until: float) -> None:
        write_instant(self.dir / LEASE, lease_until)

    def stop(self) -> None:
        (self.dir / STOP).touch()

    def pid(self) -> int | None:
        """The agent's pid from its pid file, when that process is still the one that wrote it."""
        try:
            pid, start = (int(x) for x in (self.dir / PID).read_text().split()[:2])
        except (OSError, ValueError):
            return None
        return pid if process_start_time(pid) == start else None

    def kill(self) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)

    def wait(self, timeout: float) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def running(self) -> bool | None:
        if self.proc is None:
            return False
        return self.proc.poll() is None

    def fetch(self, after: int) -> list[Frame]:
        return self.reader.read(after=after)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def describe(self) -> dict[str, Any]:
        return {"where": "agent on the control node", "dir": str(self.dir)}


def agent_sources(directory: Path, lease_s: float = LEASE_S, python: str = sys.executable
                  ) -> Callable[[LoadRunner], list[LoadSource]]:
    """For `LoadRunner(make_sources=...)`: each share of chaoskit's own clients as a load agent on
    the control node (run by `python`), spooling in `<directory>/<group>-<first worker>/`, read
    back through `FramedSource`."""

    def make(runner: LoadRunner) -> list[LoadSource]:
        spec = runner.spec
        if runner.tool_groups(spec):
            raise ValueError("a tool group cannot run as a load agent yet: chaoskit's own clients only")
        inventory_json = runner.inventory.model_dump_json()
        out: list[LoadSource] = []
        for group, share in runner.shares():
            rate_share = spec.rate * len(share) / spec.workers if spec.rate else None
            order = AgentOrder.of(runner.route(group).model_dump_json(), inventory_json, spec, group, share,
                                  runner.recorder.base, rate_share)
            loader = ProcessLoader(f"{group.name}/{share[0]}", directory / f"{group.name}-{share[0]}", order, python)
            out.append(FramedSource(loader, tuple(share), lease_s=lease_s))
        return out

    return make


if __name__ == "__main__":  # pragma: no cover - run as a process by the loaders
    sys.exit(main(Path(sys.argv[1])))
