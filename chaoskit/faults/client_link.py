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
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from chaoskit.db.base import driver_for
from chaoskit.faults import delay_proxy
from chaoskit.faults.models import FaultSpec, proxy_toxic_args
from chaoskit.inventory.models import Cluster, Inventory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ClientLink:
    """`with ClientLink(cluster, inventory, spec) as link:` run the load against `link.cluster`."""

    def __init__(self, cluster: Cluster, inventory: Inventory, spec: FaultSpec) -> None:
        self.source = cluster
        self.inventory = inventory
        self.spec = spec
        self.driver = driver_for(cluster, inventory)
        self.procs: list[subprocess.Popen] = []
        self.stats_dir = Path(tempfile.mkdtemp(prefix="chaoskit-link-"))
        self.cluster = cluster

    def __enter__(self) -> ClientLink:
        relays: list[tuple[str, int]] = []
        try:
            for i, (host, port) in enumerate(self.driver.endpoints()):
                lport = _free_port()
                cmd = [sys.executable, delay_proxy.__file__, "--listen", "127.0.0.1", "--port", str(lport),
                       "--upstream", host, "--upstream-port", str(port), *proxy_toxic_args(self.spec),
                       "--ttl", f"{self.spec.ttl:g}", "--parent-pid", str(os.getpid()),
                       "--stats", str(self.stats_dir / f"stats-{i}.json")]
                self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
                relays.append(("127.0.0.1", lport))
                self._wait_ready(self.procs[-1], lport)
        except BaseException:
            self.close()
            raise
        self.cluster = self.driver.through(relays)
        return self

    def _wait_ready(self, proc: subprocess.Popen, port: int) -> None:
        deadline = time.time() + 5
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"client link relay exited with {proc.returncode}")
            if self.spec.down:
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
