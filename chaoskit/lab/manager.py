"""`chaoskit lab up|down|status`: build, inspect and remove the local lab.

`up` is idempotent (a healthy lab is left as it is) and cleans the leftovers of a crashed run
first. `down` removes everything `up` made: daemons (by recorded pid, checked dead), anything
still running in the lab's namespaces, leaked SysV shared memory, namespaces, veths, bridge,
the lab user and sudoers entry, and the state directory (except cache/).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.faults.journal import JOURNAL_ROOT as FAULT_JOURNAL_ROOT
from chaoskit.faults.relay import RELAY_ROOT
from chaoskit.guard import routed_elsewhere
from chaoskit.ha.patroni import normalise_role
from chaoskit.lab import daemons, network
from chaoskit.lab.procs import alive, netns_pids, read_pid_file, run_launcher, sh, start_time, terminate
from chaoskit.lab.spec import (
    BRIDGE,
    MARIADB_DATABASE,
    MARIADB_PORT,
    MARIADB_USER,
    PATRONI_PORT,
    SPEC,
    SSH_USER,
    STATE_DIR,
    SUBNET_PREFIX,
    LabHost,
    LabSpec,
    Paths,
)

USER_COMMENT = "chaoskit lab"


@dataclass(frozen=True)
class UpResult:
    seconds: float
    already_up: bool
    cleaned_leftovers: bool


def require_root() -> None:
    if os.name != "posix" or not Path("/proc").exists():
        raise LabError("the lab needs Linux")
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, daemons as postgres/mysql)")
    missing = [b for b in ("ip", "sshd", "etcd", "mariadbd", "setpriv", "sudo")
               if not shutil.which(b) and not Path(f"/usr/sbin/{b}").exists()]
    if not daemons.DEBIAN_PATRONI.exists():
        missing.append("patroni")
    if not (daemons.PG_BIN / "postgres").exists():
        missing.append("postgresql-15")
    if missing:
        raise LabError(f"missing lab packages: {', '.join(missing)} (run .ci/run or install them with apt-get)")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(Paths.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _read_state() -> dict[str, Any] | None:
    try:
        return json.loads(Paths.state.read_text())
    except (OSError, ValueError):
        return None


def _daemons_alive(state: dict[str, Any]) -> bool:
    """Every daemon runs, judged by its pid file now (a drill may have restarted it)."""
    procs = state.get("daemons", {})
    for entry in procs.values():
        pid = read_pid_file(Path(entry["pid_file"])) if entry.get("pid_file") else entry["pid"]
        if not pid or not alive(pid):
            return False
    return bool(procs)


def has_leftovers(spec: LabSpec = SPEC) -> bool:
    return bool(network.existing_netns()) or network.link_exists("ckbr0") or Paths.state.exists() or \
        any((STATE_DIR / "hosts").glob("*"))


# -- up -------------------------------------------------------------------------------------
def up(flavour: str = "debian", spec: LabSpec = SPEC, timeout: float = 30.0,
       keep_on_failure: bool = False) -> UpResult:
    require_root()
    t0 = time.monotonic()
    with _locked():
        state = _read_state()
        if state and state.get("patroni") == flavour and _daemons_alive(state) and _healthy(spec):
            return UpResult(time.monotonic() - t0, True, False)
        cleaned = has_leftovers(spec)
        if cleaned:
            _down_locked(spec)
        clash = routed_elsewhere(f"{SUBNET_PREFIX}.0/24", BRIDGE)
        if clash:
            raise LabError(f"refusing to build the lab on {SUBNET_PREFIX}.0/24: {clash} (those addresses may be real "
                           "machines here)")
        try:
            _build(spec, flavour, timeout)
        except BaseException as exc:
            if not keep_on_failure:
                _down_locked(spec)
            if isinstance(exc, Exception) and not isinstance(exc, LabError):
                kept = "kept for inspection" if keep_on_failure else "everything removed again"
                raise LabError(f"lab up failed ({kept}): {exc}") from exc
            raise
        return UpResult(time.monotonic() - t0, False, cleaned)


def _build(spec: LabSpec, flavour: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    patroni_bin = daemons.ensure_pypi_patroni() if flavour == "pypi" else daemons.DEBIAN_PATRONI
    _prepare_dirs(spec)
    _ensure_user()
    pw = {name: _secret(name) for name in ("pg_superuser", "pg_replication", "mariadb_chaoskit",
                                            "mariadb_repl")}
    network.build(spec)
    launchers: dict[str, tuple[Path, Path]] = {}
    for host in spec.hosts:
        launchers[f"{host.name}/sshd"] = (daemons.sshd_setup(host), host.dir / "sshd.pid")
    dcs = spec.jump_host
    launchers[f"{dcs.name}/etcd"] = (daemons.etcd_setup(dcs), dcs.dir / "etcd.pid")
    launchers[f"{dcs.name}/postgres"] = (daemons.single_postgres_setup(dcs, pw["pg_superuser"]),
                                         dcs.dir / "pgsingle.launch.pid")
    started: dict[str, dict[str, int]] = {}

    def launch(key: str) -> None:
        script, pid_file = launchers[key]
        pid = run_launcher(script, pid_file)
        started[key] = {"pid": pid, "start": start_time(pid) or 0, "pid_file": str(pid_file)}

    with ThreadPoolExecutor(max_workers=8) as pool:
        mariadb_setup_job = pool.submit(_setup_mariadb_nodes, spec)
        list(pool.map(launch, list(launchers)))
        _wait_tcp(dcs.address, 2379, deadline, "etcd")
        for host in spec.by_role("pg"):
            launchers[f"{host.name}/patroni"] = (
                daemons.patroni_setup(host, dcs, flavour, pw["pg_superuser"], pw["pg_replication"]),
                Paths.patroni_pid(host))
        list(pool.map(launch, [f"{h.name}/patroni" for h in spec.by_role("pg")]))
        mariadb_setup_job.result()
        for host in spec.by_role("mariadb"):
            launchers[f"{host.name}/mariadb"] = (Paths.launcher(host, "mariadb"),
                                                 host.dir / "mariadb.launch.pid")
        list(pool.map(launch, [f"{h.name}/mariadb" for h in spec.by_role("mariadb")]))
        ssh_waits = [pool.submit(_wait_tcp, h.address, 22, deadline, f"sshd on {h.name}") for h in spec.hosts]
        mariadb_job = pool.submit(_configure_mariadb, spec, pw, deadline)
        _wait_patroni_healthy(spec, deadline)
        mariadb_job.result()
        for job in ssh_waits:
            job.result()
    _write_known_hosts(spec)
    wait_healthy(max(5.0, deadline - time.monotonic()), spec)  # replicas streaming, MariaDB replicating
    Paths.state.write_text(json.dumps({
        "patroni": flavour, "patroni_binary": str(patroni_bin), "created": time.time(),
        "daemons": started,
    }, indent=2))


def _setup_mariadb_nodes(spec: LabSpec) -> None:
    nodes = spec.by_role("mariadb")
    daemons.mariadb_setup(nodes[0], 1)
    for i, host in enumerate(nodes[1:], start=2):
        daemons.mariadb_setup(host, i, template=nodes[0].dir / "mysql")


def _prepare_dirs(spec: LabSpec) -> None:
    for d in (STATE_DIR, STATE_DIR / "hosts", Paths.ssh, Paths.cache, STATE_DIR / "home"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    Paths.secrets.mkdir(mode=0o700, exist_ok=True)
    for host in spec.hosts:
        host.dir.mkdir(parents=True, exist_ok=True)
        host.dir.chmod(0o755)
    if not Paths.client_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "chaoskit-lab",
                        "-f", str(Paths.client_key)], check=True, capture_output=True)
    shutil.copyfile(f"{Paths.client_key}.pub", Paths.authorized_keys)
    Paths.authorized_keys.chmod(0o644)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)


def _secret(name: str) -> str:
    path = Paths.secret(name)
    if not path.exists():
        path.write_text(secrets.token_urlsafe(18) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def _ensure_user() -> None:
    try:
        entry = pwd.getpwnam(SSH_USER)
        if entry.pw_gecos != USER_COMMENT:
            raise LabError(f"user {SSH_USER} exists and is not the lab's; refusing to touch it")
    except KeyError:
        sh(["useradd", "--system", "--no-create-home", "--home-dir", str(STATE_DIR / "home"),
            "--shell", "/bin/sh", "--comment", USER_COMMENT, SSH_USER])
    sh(["usermod", "-p", "*", SSH_USER])  # '*' = no password, but not a locked account for sshd
    Paths.sudoers.write_text(f"# {USER_COMMENT}: removed by `chaoskit lab down`\n"
                             f"{SSH_USER} ALL=(ALL) NOPASSWD: ALL\n")
    Paths.sudoers.chmod(0o440)


def _write_known_hosts(spec: LabSpec) -> None:
    lines = [f"{h.address} {daemons.host_public_key(h)}" for h in spec.hosts]
    Paths.known_hosts.write_text("\n".join(lines) + "\n")
    Paths.known_hosts.chmod(0o644)


def _wait_tcp(address: str, port: int, deadline: float, what: str) -> None:
    while True:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise LabError(f"{what} not listening on {address}:{port}: {exc}") from None
            time.sleep(0.05)


def _wait_patroni_healthy(spec: LabSpec, deadline: float) -> None:
    last = "no answer"
    while time.monotonic() < deadline:
        ok, last = _patroni_health(spec)
        if ok:
            return
        time.sleep(0.2)
    raise LabError(f"Patroni cluster not healthy in time: {last} (logs under {STATE_DIR}/hosts/pg*)")


def _patroni_health(spec: LabSpec) -> tuple[bool, str]:
    members = _patroni_members(spec)
    if not members:
        return False, "Patroni REST API not answering"
    leaders = [m for m in members if m["role"] == "leader"]
    streaming = [m for m in members if m["role"] == "replica" and m["state"] in ("running", "streaming")
                 and isinstance(m.get("lag_bytes"), int)]
    pg_hosts = len(spec.by_role("pg"))
    if len(leaders) == 1 and len(streaming) == pg_hosts - 1:
        return True, "ok"
    return False, ", ".join(f"{m['name']}={m['role']}/{m['state']}" for m in members)


def _rest(url: str, method: str = "GET", body: dict[str, Any] | None = None, timeout: float = 1.0) -> tuple[int, Any]:
    """The lab's own Patroni REST calls (no auth, no TLS): (status, JSON body or None)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, None


def _patroni_members(spec: LabSpec) -> list[dict[str, Any]]:
    for host in spec.by_role("pg"):
        _, data = _rest(f"http://{host.address}:{PATRONI_PORT}/cluster")
        if not isinstance(data, dict) or "members" not in data:
            continue
        out = []
        for m in data.get("members", []):
            lag = m.get("lag")
            out.append({"name": m.get("name"), "role": normalise_role(m.get("role", "")),
                        "state": m.get("state"), "lag_bytes": lag if isinstance(lag, int) else None,
                        "timeline": m.get("timeline")})
        return sorted(out, key=lambda m: m["name"] or "")
    return []


def _mariadb_sql(host: LabHost, sql: str, vertical: bool = False) -> str:
    fmt = ["-E"] if vertical else ["-N", "-B"]
    res = sh(["mariadb", f"--socket={Paths.mariadb_socket(host)}", "-uroot", *fmt, "-e", sql],
             check=False, timeout=20)
    if res.returncode != 0:
        raise LabError(f"MariaDB on {host.name}: {res.stderr.strip()}")
    return res.stdout


def _configure_mariadb(spec: LabSpec, pw: dict[str, str], deadline: float) -> None:
    nodes = spec.by_role("mariadb")
    primary, replicas = nodes[0], nodes[1:]
    subnet = primary.address.rsplit(".", 1)[0] + ".%"
    for host in nodes:
        while True:
            try:
                _mariadb_sql(host, "SELECT 1")
                break
            except LabError:
                if time.monotonic() > deadline:
                    raise LabError(f"MariaDB on {host.name} did not start (see {host.dir}/error.log)") from None
                time.sleep(0.1)
        _mariadb_sql(host, (
            "SET sql_log_bin=0;"
            f"CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE};"
            f"CREATE OR REPLACE USER '{MARIADB_USER}'@'{subnet}' IDENTIFIED BY '{pw['mariadb_chaoskit']}';"
            f"GRANT ALL PRIVILEGES ON *.* TO '{MARIADB_USER}'@'{subnet}';"
            f"CREATE OR REPLACE USER 'repl'@'{subnet}' IDENTIFIED BY '{pw['mariadb_repl']}';"
            f"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'{subnet}';"
            "SET sql_log_bin=1;"))
    for host in replicas:
        _mariadb_sql(host, (
            f"CHANGE MASTER TO MASTER_HOST='{primary.address}', MASTER_PORT={MARIADB_PORT},"
            f" MASTER_USER='repl', MASTER_PASSWORD='{pw['mariadb_repl']}', MASTER_USE_GTID=slave_pos,"
            " MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1;"
            "SET GLOBAL read_only=1; START SLAVE;"))
    for host in replicas:
        while True:
            status = _mariadb_sql(host, "SHOW SLAVE STATUS", vertical=True)
            if "Slave_IO_Running: Yes" in status and "Slave_SQL_Running: Yes" in status:
                break
            if time.monotonic() > deadline:
                raise LabError(f"MariaDB replica {host.name} not replicating: {status.strip()[:300]}")
            time.sleep(0.1)


def _healthy(spec: LabSpec) -> bool:
    return _patroni_health(spec)[0]


def health(spec: LabSpec = SPEC) -> tuple[bool, str]:
    """The lab as built: 1 Patroni leader + every replica streaming; MariaDB my1 writable, the
    others read-only and replicating. Used to reset state between tests."""
    ok, why = _patroni_health(spec)
    if not ok:
        return False, f"patroni: {why}"
    leader = next((m for m in _patroni_members(spec) if m["role"] == "leader"), None)
    if leader is None:
        return False, "patroni: no leader"
    pg = spec.host(leader["name"])
    res = sh(["psql", "-h", str(pg.dir / "run"), "-U", "postgres", "-Atc",
              "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"], check=False, timeout=10)
    streaming = res.stdout.strip()
    if streaming != str(len(spec.by_role("pg")) - 1):
        return False, f"postgres: {streaming or res.stderr.strip()} streaming replicas"
    single = sh(["psql", "-h", str(spec.jump_host.dir / "pgsingle-run"), "-U", "postgres", "-Atc", "SELECT 1"],
                check=False, timeout=10)
    if single.stdout.strip() != "1":
        return False, f"single postgres: {single.stderr.strip() or 'not answering'}"
    nodes = spec.by_role("mariadb")
    try:
        if _mariadb_sql(nodes[0], "SELECT @@read_only").strip() != "0":
            return False, f"mariadb: {nodes[0].name} is read-only"
        for host in nodes[1:]:
            status = _mariadb_sql(host, "SHOW SLAVE STATUS", vertical=True)
            ro = _mariadb_sql(host, "SELECT @@read_only").strip()
            if ro != "1" or "Slave_IO_Running: Yes" not in status or "Slave_SQL_Running: Yes" not in status:
                return False, f"mariadb: {host.name} read_only={ro}, not replicating"
    except LabError as exc:
        return False, f"mariadb: {exc}"
    return True, "ok"


def reinitialize_diverged(spec: LabSpec = SPEC) -> list[str]:
    """Patroni replicas that do not stream (e.g. a diverged old primary that was not rewound)
    are rebuilt from the leader through Patroni's REST API (POST /reinitialize)."""
    members = _patroni_members(spec)
    leader = next((m for m in members if m["role"] == "leader"), None)
    if leader is None:
        return []
    streaming = set(sh(["psql", "-h", str(spec.host(leader["name"]).dir / "run"), "-U", "postgres", "-Atc",
                        "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"],
                       check=False, timeout=10).stdout.split())
    done = []
    for m in members:
        if m["role"] == "replica" and m["name"] not in streaming and m["state"] in ("running", "streaming"):
            status, _ = _rest(f"http://{spec.host(m['name']).address}:{PATRONI_PORT}/reinitialize", "POST",
                              {"force": True}, timeout=10)
            if status == 200:
                done.append(m["name"])
    return done


def wait_healthy(timeout: float = 90.0, spec: LabSpec = SPEC) -> None:
    """Wait for the lab as built; a replica still not streaming after 15 s is reinitialised."""
    start = time.monotonic()
    deadline = start + timeout
    repaired = False
    ok, why = health(spec)
    while not ok and time.monotonic() < deadline:
        time.sleep(0.3)
        ok, why = health(spec)
        if not ok and not repaired and time.monotonic() - start > 15 and why.startswith("postgres:"):
            repaired = bool(reinitialize_diverged(spec))
    if not ok:
        raise LabError(f"lab not healthy after {timeout:g}s: {why}")


# -- down -----------------------------------------------------------------------------------
def down(spec: LabSpec = SPEC) -> float:
    require_root()
    t0 = time.monotonic()
    with _locked():
        _down_locked(spec)
    return time.monotonic() - t0


def _down_locked(spec: LabSpec) -> None:
    state = _read_state() or {}
    recorded = [p["pid"] for p in state.get("daemons", {}).values() if alive(p["pid"], p.get("start"))]
    data_dirs = [Paths.pg_data(h) for h in spec.by_role("pg")] + [Paths.single_pg_data(spec.jump_host)]
    postmasters = [pid for d in data_dirs if (pid := read_pid_file(d / "postmaster.pid"))
                   and alive(pid) and _in_lab_netns(pid, spec)]
    in_netns = sorted({pid for ns in network.existing_netns() for pid in netns_pids(ns)})
    # Graceful first (Patroni stops PostgreSQL, MariaDB flushes), then anything left in our namespaces.
    terminate(sorted(set(recorded + postmasters)), grace=4.0)
    left = terminate(sorted({pid for ns in network.existing_netns() for pid in netns_pids(ns)} | set(in_netns)),
                     grace=1.0)
    if left:
        raise LabError(f"processes would not die: {left}")
    _remove_shared_memory(spec)
    network.destroy(spec)
    for host in spec.hosts:  # fault journals of lab hosts (their dead-men died with the namespaces)
        journal_dir = Path(FAULT_JOURNAL_ROOT) / host.name
        for entry in journal_dir.glob("*.json"):  # and the relay directories of their faults
            shutil.rmtree(Path(RELAY_ROOT) / entry.stem, ignore_errors=True)
        shutil.rmtree(journal_dir, ignore_errors=True)
    _remove_user()
    for child in STATE_DIR.glob("*"):
        if child.name in (Paths.cache.name, Paths.lock.name):
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _in_lab_netns(pid: int, spec: LabSpec) -> bool:
    res = sh(["ip", "netns", "identify", str(pid)], check=False)
    return res.stdout.strip() in {h.netns for h in spec.hosts}


def _remove_shared_memory(spec: LabSpec) -> None:
    """PostgreSQL killed with SIGKILL leaves its SysV segment (key on line 7 of postmaster.pid)."""
    for data in [Paths.pg_data(h) for h in spec.by_role("pg")] + [Paths.single_pg_data(spec.jump_host)]:
        try:
            lines = (data / "postmaster.pid").read_text().splitlines()
        except OSError:
            continue
        if len(lines) >= 7 and lines[6].split():
            key = lines[6].split()[0]
            sh(["ipcrm", "-M", key], check=False)


def _remove_user() -> None:
    Paths.sudoers.unlink(missing_ok=True)
    try:
        if pwd.getpwnam(SSH_USER).pw_gecos == USER_COMMENT:
            sh(["userdel", SSH_USER], check=False)
    except KeyError:
        pass


# -- status ---------------------------------------------------------------------------------
def status(spec: LabSpec = SPEC) -> dict[str, Any]:
    """Roles normalised: Patroni `leader|replica`, MariaDB `primary|replica`."""
    hosts = []
    ssh_ok = _ssh_reachable(spec)
    for h in spec.hosts:
        hosts.append({"name": h.name, "address": h.address, "ssh": ssh_ok.get(h.name, False)})
    return {"hosts": hosts, "postgres": _patroni_members(spec) if network.existing_netns() else [],
            "mariadb": _mariadb_roles(spec)}


def _ssh_reachable(spec: LabSpec) -> dict[str, bool]:
    if not Paths.known_hosts.exists():
        return {}
    from chaoskit.inventory.fanout import fan_out
    from chaoskit.lab.inventory_file import lab_inventory

    inv = lab_inventory()
    results = fan_out(inv, lambda remote: remote.run("true", timeout=5))
    return {name: not isinstance(res, BaseException) for name, res in results.items()}


def _mariadb_roles(spec: LabSpec) -> list[dict[str, str]]:
    out = []
    for host in spec.by_role("mariadb"):
        role = "down"
        if Paths.mariadb_socket(host).exists():
            try:
                ro, slave = _mariadb_sql(host, "SELECT @@read_only; SHOW SLAVE STATUS;").split("\n", 1)
                role = "replica" if ro.strip() == "1" or slave.strip() else "primary"
            except LabError:
                role = "down"
        out.append({"name": host.name, "role": role})
    return out
