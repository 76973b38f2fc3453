"""One recipe per lab stack: how its daemons are set up and started, when it is healthy, and what
it contributes to `inventories/lab.yaml`. A new HA stack is one recipe module here, beside its
manager in `chaoskit/ha/` and its playbooks.

Every recipe module defines:
- `NAME` (the stack's name on the command line: `lab up --stack NAME`);
- `HOSTS`: its lab hosts (`LabHost(name, last octet, role, NAME)`); stacks are ordered by their
  lowest address, and `DEFAULT = True` puts a stack in `lab up` without `--stack`;
- `build(b: Build)`: bring the stack up (its hosts' namespaces and sshd already exist) and
  return once it is healthy or raise;
- `health(spec) -> (ok, why)`; optionally `repair(spec) -> [what was repaired]`;
- `clusters(spec) -> {name: cluster mapping}` for the lab inventory;
- optionally `host_services(spec) -> {host: {"processes": ..., "logs": ...}}`: the services of its
  hosts that are no cluster member's (etcd, HAProxy, a monitor, a manager), so faults can target
  them by host and process name;
- `postgres_data(spec) -> [data dirs]` (postmasters to stop and SysV segments to remove at down);
- optionally `loaders(spec) -> {hosts, python, spool}`: the lab inventory's `loaders:` section.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from chaoskit.errors import LabError
from chaoskit.lab.procs import run_launcher
from chaoskit.lab.spec import LabHost, LabSpec, Paths
from chaoskit.lifeline import process_start_time
from chaoskit.plugins import Plugins

RECIPES: Plugins[ModuleType] = Plugins(__name__, ModuleType, "NAME", "lab stack")


def discover() -> dict[str, ModuleType]:
    """Every recipe module of this package by NAME, base first, then by lowest host address."""
    return dict(sorted(RECIPES.all().items(), key=lambda kv: (kv[0] != "base", min(h.octet for h in kv[1].HOSTS))))


def lab_spec() -> LabSpec:
    """The whole lab: every host of every recipe."""
    return LabSpec(tuple(h for m in discover().values() for h in m.HOSTS))


def stack_names() -> tuple[str, ...]:
    """The stacks `lab up --stack` takes, in their fixed order."""
    return tuple(n for n in discover() if n != "base")


def default_stacks() -> tuple[str, ...]:
    """The stacks `lab up` brings without `--stack` (recipes with `DEFAULT = True`)."""
    return tuple(n for n, m in discover().items() if getattr(m, "DEFAULT", False))


def recipe(name: str) -> ModuleType:
    return discover()[name]


def recipes(stacks: set[str] | tuple[str, ...] | list[str]) -> list[ModuleType]:
    """Base first, then the requested stacks in their fixed order."""
    return [m for n, m in discover().items() if n == "base" or n in stacks]


def postgres_cluster(members: list[LabHost], port_of: Any, ha: dict[str, Any], agent: str,
                     agent_pid_file: Any, logs: Any) -> dict[str, Any]:
    """A PostgreSQL cluster of the lab inventory: each member with its data directory, its
    postmaster and its HA agent (pid file, started by its launcher), its log files (label -> path,
    kept for each run's window), a multi-host read-write DSN."""
    hosts = [{
        "host": h.name, "db_port": port_of(h), "data_dir": str(Paths.pg_data(h)),
        "processes": {
            "postgres": {"pid_file": str(Paths.pg_data(h) / "postmaster.pid"), "comm": "postgres"},
            agent: {"pid_file": str(agent_pid_file(h)), "comm": agent, "start": str(Paths.launcher(h, agent))},
        },
        "logs": {label: str(path) for label, path in logs(h).items()},
    } for h in members]
    addresses = ",".join(h.address for h in members)
    ports = ",".join(str(port_of(h)) for h in members)
    return {"engine": "postgres", "ha": ha, "members": hosts, "database": "postgres", "user": "postgres",
            "password": {"file": str(Paths.secret("pg_superuser"))},
            "dsn": f"host={addresses} port={ports} dbname=postgres target_session_attrs=read-write"}


@dataclass
class Build:
    spec: LabSpec
    flavour: str
    deadline: float
    secrets: dict[str, str]
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, key: str, script: Path, pid_file: Path) -> int:
        pid = run_launcher(script, pid_file)
        with self.lock:
            self.started[key] = {"pid": pid, "start": process_start_time(pid) or 0, "pid_file": str(pid_file),
                                "script": str(script)}
        return pid

    def left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def wait(self, check: Any, what: str, step: float = 0.2) -> None:
        """Until `check()` gives (True, _) or the deadline; the last answer names the problem."""
        why = "no answer"
        while time.monotonic() < self.deadline:
            ok, why = check()
            if ok:
                return
            time.sleep(step)
        raise LabError(f"{what} not ready in time: {why}")


PG_SOCKETS = "/var/run/postgresql"


def pg_socket_dir() -> str:
    """PostgreSQL's socket directory on this machine, shared by the lab hosts (one process table
    and file system): postgres-owned, group-writable, setgid."""
    sockets = Path(PG_SOCKETS)
    sockets.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.chown(sockets, "postgres", "postgres")
    sockets.chmod(0o2775)
    return PG_SOCKETS


def wait_tcp(address: str, port: int, deadline: float, what: str) -> None:
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LabError(f"{what} not listening on {address}:{port}: {exc}") from None
            time.sleep(0.05)


def run_in(host: LabHost, argv: list[str], *, user: str | None = None, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command inside a host's namespace, with its host name, as `user` (a setup step, in
    the foreground; daemons go through launchers). Raises with the output on failure."""
    inner = f"hostname {shlex.quote(host.name)}; exec "
    if env:
        inner += "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
    if user:
        inner += f"setpriv --reuid={user} --regid={user} --init-groups "
    inner += shlex.join(argv)
    res = subprocess.run(["ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c", inner],
                         capture_output=True, text=True, timeout=timeout, check=False, cwd="/")
    if res.returncode != 0:
        tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-6:])
        raise LabError(f"{host.name}: `{' '.join(argv[:3])} ...` failed ({res.returncode}): {tail}")
    return res


def psql(host_dir_or_socket: str, port: int, sql: str, *, database: str = "postgres",
         user: str = "postgres") -> str:
    """SQL through a server's unix socket (trusted locally), as the superuser."""
    res = subprocess.run(["psql", "-h", host_dir_or_socket, "-p", str(port), "-U", user, "-d", database, "-Atq",
                          "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=30,
                         check=False)
    if res.returncode != 0:
        raise LabError(f"psql {host_dir_or_socket}:{port}: {res.stderr.strip()[:300]}")
    return res.stdout


# the lab's HAProxy checks each backend every 500 ms and marks it down after 2 failures in a row
HAPROXY_CHECK_MS = 500
HAPROXY_FALL = 2


def haproxy_writer(proxy: LabHost, port: int, backends: list[LabHost], backend_port: int, check_body: str, *,
                   backups: bool, reader: tuple[int, str] | None = None) -> Path:
    """HAProxy on `proxy` with one TCP listener for writes and its launcher. Each backend is
    checked every 500 ms by an external script (`check_body`, a shell script body: HAProxy passes
    <proxy address> <proxy port> <server address> <server port>, exit 0 = up), two failures to go
    down, two successes to come back, a down server's sessions shut. With `backups`, the first
    backend takes every connection while it is up and the next one that is up takes over (the
    usual Galera deployment); without, every backend that passes its check takes connections.
    `reader` (port, check body) adds a read listener the same way: every backend that passes its
    own check (a replica's) takes connections in turn, a backend that stops passing it (promoted)
    has its sessions shut, and with none up a read finds no server."""
    from chaoskit.lab import daemons

    def servers(check: bool, backup: bool) -> str:
        return "\n".join(
            f"  server {h.name} {h.address}:{backend_port} check inter {HAPROXY_CHECK_MS} fall {HAPROXY_FALL} rise 2 "
            "on-marked-down shutdown-sessions" + (" backup" if backup and i else "")
            for i, h in enumerate(backends))

    cfg = proxy.dir / "haproxy.cfg"
    check = proxy.dir / "writer-check"
    read = ""
    if reader is not None:
        read_check = proxy.dir / "reader-check"
        read_check.write_text("#!/bin/sh\n" + reader[1])
        read_check.chmod(0o755)
        read = f"""listen reader
  bind {proxy.address}:{reader[0]}
  balance roundrobin
  option external-check
  external-check path "/usr/bin:/bin"
  external-check command {read_check}
{servers(True, False)}
"""
    cfg.write_text(f"""global
  maxconn 2000
  external-check
  insecure-fork-wanted
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
listen writer
  bind {proxy.address}:{port}
  option external-check
  external-check path "/usr/bin:/bin"
  external-check command {check}
{servers(True, backups)}
{read}""")
    check.write_text("#!/bin/sh\n" + check_body)
    check.chmod(0o755)
    return daemons.write_launcher(proxy, "haproxy", f"/usr/sbin/haproxy -db -f {cfg}", proxy.dir / "haproxy.pid",
                                  log=proxy.dir / "haproxy.out")


def service(pid_file: Path, comm: str, launcher: Path | None = None) -> dict[str, str]:
    """A host service's process as the lab inventory declares it: found by pid file, checked by
    comm, started again by its launcher."""
    return {"pid_file": str(pid_file), "comm": comm, **({"start": str(launcher)} if launcher else {})}


def postgres_key() -> Path:
    """The lab's SSH key of the postgres user (repmgr and MHA-style tools SSH between nodes)."""
    key = Paths.ssh / "postgres_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "chaoskit-lab-postgres", "-f", str(key)],
                       check=True, capture_output=True)
        subprocess.run(["chown", "postgres:postgres", str(key), f"{key}.pub"], check=True)
        key.chmod(0o600)
    return key
