"""Toxics on the client -> database link, run on the control node: the only place a latency,
bandwidth, reset or down fault can live when the database is a managed service (PolarDB, RDS)
with no SSH host, and the way to add cross-AZ latency to the application's side only.

One relay per client endpoint on 127.0.0.1; the load is pointed at the relays with the same
writer search (libpq multi-host, the MySQL endpoint list). The same guarantees as a host-side
fault, by other means: the relays are this controller's children, end themselves at their TTL and
when the controller is gone (`--parent-pid`), and are stopped on exit whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.faults import delay_proxy
from chaoskit.faults.spec import FaultBase, ProxySpec, proxy_toxic_args
from chaoskit.inventory.models import Cluster, Inventory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ClientLink:
    """`with ClientLink(cluster, inventory, spec) as link:` run the load against `link.cluster`.
    Without a spec the relays start clean, and `apply(spec)` / `clear()` change their toxics
    while the load runs (a drill's client-link fault), returning the instant they took effect."""

    def __init__(self, cluster: Cluster, inventory: Inventory, spec: FaultBase | None = None,
                 ttl: float | None = None, driver: Driver | None = None) -> None:
        self.source = cluster
        self.inventory = inventory
        self.toxics = proxy_toxic_args(spec) if spec is not None else []  # type: ignore[arg-type]
        self.down = isinstance(spec, ProxySpec) and spec.down
        self.ttl = ttl if ttl is not None else (spec.ttl if spec is not None else 3600.0)
        self.driver = driver or driver_for(cluster, inventory)
        self.procs: list[subprocess.Popen] = []
        self.stats_dir = Path(tempfile.mkdtemp(prefix="chaoskit-link-"))
        self.cluster = cluster
        self.active = spec is not None

    def __enter__(self) -> ClientLink:
        relays: list[tuple[str, int]] = []
        try:
            for i, (host, port) in enumerate(self.driver.endpoints()):
                lport = _free_port()
                cmd = [sys.executable, delay_proxy.__file__, "--listen", "127.0.0.1", "--port", str(lport),
                       "--upstream", host, "--upstream-port", str(port), *self.toxics,
                       "--ttl", f"{self.ttl:g}", "--parent-pid", str(os.getpid()),
                       "--stats", str(self.stats_dir / f"stats-{i}.json"),
                       "--control", str(self.stats_dir / f"control-{i}.json")]
                self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
                relays.append(("127.0.0.1", lport))
                self._wait_ready(self.procs[-1], lport, i)
        except BaseException:
            self.close()
            raise
        self.cluster = self.driver.through(relays)
        return self

    def _wait_ready(self, proc: subprocess.Popen, port: int, i: int) -> None:
        deadline = time.time() + 5
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"client link relay exited with {proc.returncode}")
            if self._relay_stats(i) is None:
                time.sleep(0.05)
                continue
            if self.down:
                time.sleep(0.3)
                if proc.poll() is None:
                    return  # a down relay listens nowhere: it is up once it has survived its start
                continue
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("client link relay did not start listening")

    def apply(self, spec: FaultBase) -> float:
        t = self._set(proxy_toxic_args(spec))  # type: ignore[arg-type]
        self.active = True
        return t

    def clear(self) -> float:
        t = self._set([])
        self.active = False
        return t

    def _set(self, toxics: list[str]) -> float:
        """Hand every relay new toxics (control file + SIGHUP); the latest instant they took effect."""
        before = {}
        for i, proc in enumerate(self.procs):
            before[i] = (self._relay_stats(i) or {}).get("generation", 0)
            tmp = self.stats_dir / f"control-{i}.json.tmp"
            tmp.write_text(json.dumps(toxics))
            os.replace(tmp, self.stats_dir / f"control-{i}.json")
            proc.send_signal(signal.SIGHUP)
        applied = []
        deadline = time.time() + 5
        for i in range(len(self.procs)):
            while True:
                stats = self._relay_stats(i) or {}
                if stats.get("generation", 0) > before[i]:
                    applied.append(float(stats["applied_at"]))
                    break
                if time.time() > deadline:
                    raise RuntimeError("a client link relay did not acknowledge its new toxics")
                time.sleep(0.005)
        return max(applied, default=time.time())

    def _relay_stats(self, i: int) -> dict[str, Any] | None:
        try:
            return json.loads((self.stats_dir / f"stats-{i}.json").read_text())
        except (OSError, ValueError):
            return None

    def stats(self) -> list[dict[str, Any]]:
        out = []
        for f in sorted(self.stats_dir.glob("stats-*.json")):
            try:
                out.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs = []

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
        for f in self.stats_dir.glob("*"):
            f.unlink(missing_ok=True)
        self.stats_dir.rmdir()
