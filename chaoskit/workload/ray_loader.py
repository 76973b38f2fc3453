"""Load agents placed, started and read through Ray (issue: load from several machines).

Each loader host a run uses gets one actor (`HostActor`), pinned to the Ray node at that host's
address (hard node affinity: an agent runs where its `where:` says or not at all). The actor is
the host's hands for the run: it runs the same host scripts `SshLoader` sends over SSH (so what
reaches the host is data checked the same way), reads the spool's bytes after an offset directly
(no base64, no shell), and reads its clock for the offset. The agent itself is started detached in
a session of its own by those scripts, so it outlives its actor, its node and the controller; it
ends at the planned end or when its lease runs out.

When the actor cannot be reached (its node cut from the head, or declared dead and gone), each
call falls back to the host's SSH, which stays open through a `control` cut: the controller goes
on reading the spool's tail there, and the run's records are whole. An actor that died is not
retried within the run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from typing import TYPE_CHECKING, Any

from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.models import Inventory, RayPlane
from chaoskit.inventory.remote import CommandResult, HostUnreachable, Remote, RemoteCommandError
from chaoskit.workload.agent import SPOOL, AgentOrder
from chaoskit.workload.ray_plane import RAY_VERSION, RayUnavailable, connect, node_of
from chaoskit.workload.spool import HEAD, MAGIC, Frame
from chaoskit.workload.ssh_loader import LoaderRefused, SshLoader

if TYPE_CHECKING:
    from collections.abc import Iterator

ACTOR_TIMEOUT_S = 5.0  # a call the actor does not answer within this goes over SSH instead
RETRY_ACTOR_S = 10.0  # and the calls after it, for this long
# a new actor is a new Python worker process on its node (Ray's and chaoskit's imports): beside a busy
# control node it took more than ACTOR_TIMEOUT_S to answer its first call (CI, two drills at once)
ACTOR_START_S = 60.0
READ_LIMIT = 16 << 20
POLL_S = 0.25


class HostActor:
    """Runs on a loader host's Ray node (decorated with `ray.remote` when used)."""

    def shell(self, script: str, timeout: float | None) -> tuple[int, str, str]:
        try:
            res = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                                 stdin=subprocess.DEVNULL, cwd="/")
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {timeout} s"
        return res.returncode, res.stdout, res.stderr

    def read(self, path: str, offset: int, limit: int) -> tuple[int, bytes]:
        """The file's size and its bytes from `offset` (at most `limit`); (-1, b"") when absent."""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(offset)
                return size, f.read(max(0, min(limit, READ_LIMIT)))
        except FileNotFoundError:
            return -1, b""

    def now(self) -> float:
        return time.time()

    def pid(self) -> int:
        return os.getpid()


class ActorRemote:
    """A `Remote` whose shell is the host's actor, falling back to the host's SSH when the actor
    does not answer (`via` says which one answered last)."""

    def __init__(self, ray: Any, actor: Any, ssh: Remote) -> None:
        self.ray = ray
        self.actor = actor
        self.ssh = ssh
        self.name = ssh.name
        self.dead: str | None = None  # why the actor is not used any more
        self.via = "ray"
        self.fallbacks = 0
        self._ssh_until = 0.0

    def _call(self, method: str, *args: Any, timeout: float) -> Any:
        if self.dead is not None:
            raise HostUnreachable(self.name, f"its actor is gone ({self.dead})")
        if time.monotonic() < self._ssh_until:
            raise HostUnreachable(self.name, "its actor did not answer a moment ago")
        try:
            return self.ray.get(getattr(self.actor, method).remote(*args), timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            self._ssh_until = time.monotonic() + RETRY_ACTOR_S
            raise HostUnreachable(self.name, f"its actor did not answer {method} within {timeout:g} s") from None
        except self.ray.exceptions.RayError as exc:  # RayActorError: its node left the cluster
            self.dead = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            raise HostUnreachable(self.name, f"its actor is gone ({self.dead})") from None

    def started(self, timeout: float) -> None:
        """The actor's first answer, within `timeout` (its worker process starting); later calls are
        answered within ACTOR_TIMEOUT_S or go over SSH."""
        self._call("now", timeout=timeout)

    def fell_back(self) -> None:
        self.via, self.fallbacks = "ssh", self.fallbacks + 1

    def shell(self, command: str, *, timeout: float | None = 30.0, check: bool = True) -> CommandResult:
        started = time.time()
        # an agent's start may take its script's time; anything else answers at once
        wait = (timeout or 60.0) + ACTOR_TIMEOUT_S if "setsid" in command else ACTOR_TIMEOUT_S
        try:
            exited, out, err = self._call("shell", command, timeout, timeout=wait)
        except HostUnreachable:
            self.fell_back()
            return self.ssh.shell(command, timeout=timeout, check=check)
        self.via = "ray"
        result = CommandResult(self.name, command, exited, out, err, started, time.time())
        if check and not result.ok:
            raise RemoteCommandError(self.name, command, result)
        return result

    def run(self, command: str, *, sudo: bool = False, timeout: float | None = 60.0,
            check: bool = True) -> CommandResult:
        return self.ssh.run(command, sudo=sudo, timeout=timeout, check=check)

    def stream(self, command: str, *, stop: Any, sudo: bool = False) -> Iterator[str]:
        return self.ssh.stream(command, stop=stop, sudo=sudo)

    def read(self, path: str, offset: int, limit: int) -> tuple[int, bytes]:
        return self._call("read", path, offset, limit, timeout=ACTOR_TIMEOUT_S)

    def offset(self, samples: int = 7) -> ClockOffset:
        """The host's clock against this one through the actor (bracketed round trips)."""
        self._call("now", timeout=ACTOR_TIMEOUT_S)
        best: tuple[float, float, float] | None = None
        for _ in range(samples):
            t0 = time.time()
            remote_ts = self._call("now", timeout=ACTOR_TIMEOUT_S)
            t1 = time.time()
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, remote_ts, (t0 + t1) / 2)
        assert best is not None
        rtt, remote_ts, mid = best
        return ClockOffset(offset_s=remote_ts - mid, uncertainty_s=rtt / 2, rtt_s=rtt, samples=samples)

    def close(self) -> None:
        return None


class RayLoader(SshLoader):
    """An `SshLoader` whose host scripts run through the host's actor, and whose spool is read by
    the actor (over SSH once the actor is gone)."""

    remote: ActorRemote

    def __init__(self, name: str, remote: ActorRemote, directory: str, order: AgentOrder, python: str,
                 version: str, hosts: RayHosts | None = None) -> None:
        # a read of its spool every POLL_S: an actor call costs the controller about 2 ms of CPU in
        # Ray's own threads (measured on the lab: 2.0 ms per call at 10 calls a second), its
        # frames are no less whole for waiting a quarter second, and a frame is late only past LATE_S
        super().__init__(name, remote, directory, order, python, version, poll_s=POLL_S)
        self.ray_offset: ClockOffset | None = None
        self.hosts = hosts

    def wait(self, timeout: float) -> None:
        super().wait(timeout)
        if self.hosts is not None:  # its actor ends with the host's last agent
            self.hosts.release(self.remote.name)
            self.hosts = None

    ray = RAY_VERSION

    def ssh(self) -> Remote:
        return self.remote.ssh

    def check(self) -> None:
        """As over SSH (the host's chaoskit and Ray versions and its clock, read over SSH), then
        the clock read again through the actor: the two must agree within their uncertainties
        and 1 ms."""
        super().check()
        assert self.offset is not None
        try:
            self.ray_offset = self.remote.offset()
        except HostUnreachable as exc:
            raise LoaderRefused(f"loader host {self.remote.name}: its actor does not answer ({exc})") from None
        apart = abs(self.ray_offset.offset_s - self.offset.offset_s)
        if apart > self.ray_offset.uncertainty_s + self.offset.uncertainty_s + 0.001:
            raise LoaderRefused(f"loader host {self.remote.name}: its clock reads {apart * 1000:.1f} ms apart "
                                "through Ray and through SSH: a clock that is being stepped?")

    def measure_clock(self) -> ClockOffset:
        """Through the actor (as `check` read it), over SSH while the actor does not answer."""
        try:
            off = self.remote.offset()
        except HostUnreachable:
            self.remote.fell_back()
            return super().measure_clock()
        self.remote.via = "ray"
        return off

    def _tail(self, after: int, limit: int) -> tuple[list[Frame], int]:
        if self.remote.dead is not None:
            return super()._tail(after, limit)
        offset = self.cursor.offset
        try:
            size, data = self.remote.read(f"{self.dir}/{SPOOL}", offset, limit)
        except HostUnreachable:
            self.remote.fell_back()
            return super()._tail(after, limit)
        self.remote.via = "ray"
        if size < 0:
            return [], 0
        frames = self.cursor.take(data, offset + len(data) >= size, after)
        need = HEAD.size + HEAD.unpack_from(data)[2] if len(data) >= HEAD.size and data[:4] == MAGIC else 0
        return frames, need

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "via": "ray", "actor_gone": self.remote.dead,
               "ssh_fallbacks": self.remote.fallbacks}
        for word, off in (("clock_ssh", self.offset), ("clock_ray", self.ray_offset)):
            if off is not None:
                out[word] = {"offset_s": round(off.offset_s, 6), "uncertainty_s": round(off.uncertainty_s, 6)}
        return out


class RayHosts:
    """The actors of one run, one per loader host, made on first use; ended with the run (they
    are owned by this driver, so they also end when the controller dies)."""

    def __init__(self, plane: RayPlane, inv: Inventory, run_id: str) -> None:
        self.plane = plane
        self.inv = inv
        self.run_id = run_id
        self.ray = connect(plane)
        self._actors: dict[str, ActorRemote] = {}
        self._users: dict[str, int] = {}

    def remote(self, host: str, ssh: Remote) -> ActorRemote:
        self._users[host] = self._users.get(host, 0) + 1
        if host in self._actors:
            return self._actors[host]
        node = node_of(self.plane, self.inv, host)
        if node is None:
            raise LoaderRefused(f"loader host {host} ({self.inv.hosts[host].address}) is not a live node of the "
                                f"Ray cluster at {self.plane.gcs}: start it with chaoskit loaders up")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cls = self.ray.remote(HostActor)
        actor = cls.options(name=f"ck-{self.run_id}-{host}"[:120], num_cpus=0, max_restarts=0,
                            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote()
        remote = ActorRemote(self.ray, actor, ssh)
        try:
            remote.started(ACTOR_START_S)
        except HostUnreachable as exc:
            with contextlib.suppress(Exception):
                self.ray.kill(actor)
            raise LoaderRefused(f"loader host {host}: its actor did not start ({exc})") from None
        self._actors[host] = remote
        return remote

    def release(self, host: str) -> None:
        self._users[host] = self._users.get(host, 1) - 1
        remote = self._actors.get(host)
        if remote is not None and self._users[host] <= 0:
            with contextlib.suppress(Exception):
                self.ray.kill(remote.actor)
            del self._actors[host]

    def close(self) -> None:
        for remote in self._actors.values():
            with contextlib.suppress(Exception):
                self.ray.kill(remote.actor)
        self._actors.clear()


def ray_hosts(plane: RayPlane, inv: Inventory, run_id: str) -> RayHosts:
    try:
        return RayHosts(plane, inv, run_id)
    except RayUnavailable as exc:
        raise LoaderRefused(str(exc)) from None
