"""repmgr 5.3 (Debian `repmgr`, `postgresql-15-repmgr`): PostgreSQL 15 on rm1-rm3, one primary and
two standbys cloned with `repmgr standby clone`, `repmgrd` on every node with automatic failover
(reconnect 2 x 1 s, monitoring every second) and the postgres user able to SSH between the nodes
(repmgr's switchover and rejoin use it, with the lab's own key and known_hosts).

Lab specifics: the hosts share one file system, so each PostgreSQL has its own port (5451-5453)
under the default socket directory, and every start of a server passes its port on the command
line (clone, rewind and follow copy the configuration files between nodes).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.ha.repmgr import CLONE_SCRIPT, CURRENT_TIMELINE, REJOIN_SCRIPT
from chaoskit.lab import daemons, disks
from chaoskit.lab.recipes import PG_SOCKETS, Build, pg_socket_dir, postgres_cluster, postgres_key, psql, run_in
from chaoskit.lab.spec import SUBNET_PREFIX, LabHost, LabSpec, Paths

NAME = "repmgr"
HOSTS = tuple(LabHost(f"rm{i}", 40 + i, "repmgr", NAME) for i in (1, 2, 3))
SOCKETS = PG_SOCKETS


def hosts(spec: LabSpec) -> list[LabHost]:
    return spec.by_role("repmgr")


def port(host: LabHost) -> int:
    return 5450 + (host.octet - 40)


def node_id(host: LabHost) -> int:
    return host.octet - 40


def conf(host: LabHost) -> Path:
    return host.dir / "repmgr.conf"


def conninfo(host: LabHost) -> str:
    return f"host={host.address} port={port(host)} user=repmgr dbname=repmgr connect_timeout=2"


def _pg_ctl(host: LabHost, action: str) -> str:
    data = Paths.pg_data(host)
    return (f'{daemons.PG_BIN}/pg_ctl -D {data} -o "-p {port(host)}" -l {host.dir}/postgres.log -w -t 60 {action}'
            if action in ("start", "restart") else f"{daemons.PG_BIN}/pg_ctl -D {data} -w -t 60 -m fast {action}")


def write_conf(host: LabHost) -> None:
    c = conf(host)
    c.write_text("\n".join([
        f"node_id={node_id(host)}", f"node_name='{host.name}'", f"conninfo='{conninfo(host)}'",
        f"data_directory='{Paths.pg_data(host)}'", f"pg_bindir='{daemons.PG_BIN}'",
        "failover='automatic'", "use_replication_slots=yes", "location='default'",
        f"promote_command='/usr/bin/repmgr standby promote -f {c} --log-to-file'",
        f"follow_command='/usr/bin/repmgr standby follow -f {c} --log-to-file --upstream-node-id=%n'",
        "monitor_interval_secs=1", "reconnect_attempts=2", "reconnect_interval=1", "connection_check_type='ping'",
        "standby_disconnect_on_failover=false", "primary_visibility_consensus=false",
        f"log_file='{host.dir}/repmgrd.log'", f"repmgrd_pid_file='{host.dir}/repmgrd.pid'",
        f"service_start_command='{_pg_ctl(host, 'start')}'", f"service_stop_command='{_pg_ctl(host, 'stop')}'",
        f"service_restart_command='{_pg_ctl(host, 'restart')}'",
        f"service_reload_command='{daemons.PG_BIN}/pg_ctl -D {Paths.pg_data(host)} reload'",
        f"ssh_options='{' '.join(ssh_options())}'",
        "",
    ]))
    shutil.chown(c, "postgres", "postgres")


def _launchers(host: LabHost) -> None:
    for log in ("postgres.log", "repmgrd.log"):  # repmgr's own pg_ctl runs as postgres and appends to them
        (host.dir / log).touch()
        shutil.chown(host.dir / log, "postgres", "postgres")
    daemons.write_launcher(host, "postgres", f"{daemons.PG_BIN}/postgres -D {Paths.pg_data(host)} -p {port(host)}",
                           host.dir / "postgres.launch.pid", log=host.dir / "postgres.log", user="postgres")
    # repmgrd exits when its local server is down at start: a node restarted after a crash waits
    # for its server (started by a rejoin, which must not happen on its own: an old primary would
    # come back as a second primary), then becomes repmgrd (same pid)
    wait_then_run = (f"until {daemons.PG_BIN}/pg_isready -q -h {SOCKETS} -p {port(host)}; do sleep 0.5; done; "
                     f"exec /usr/bin/repmgrd -f {conf(host)} --daemonize=false")
    daemons.write_launcher(host, "repmgrd", f"sh -c {shlex.quote(wait_then_run)}", host.dir / "repmgrd.launch.pid",
                           log=host.dir / "repmgrd.out", user="postgres")


def build(b: Build) -> None:
    pg_socket_dir()
    nodes = hosts(b.spec)
    for host in nodes:
        host.dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(host.dir, "postgres", "postgres")
        write_conf(host)
        _launchers(host)
    primary = nodes[0]
    _init_primary(primary, b)
    run_in(primary, ["repmgr", "-f", str(conf(primary)), "primary", "register"], user="postgres")
    b.launch(f"{primary.name}/repmgrd", Paths.launcher(primary, "repmgrd"), primary.dir / "repmgrd.launch.pid")
    for host in nodes[1:]:
        run_in(host, ["repmgr", "-h", primary.address, "-p", str(port(primary)), "-U", "repmgr", "-d", "repmgr",
                      "-f", str(conf(host)), "standby", "clone", "--fast-checkpoint"], user="postgres",
               timeout=b.left())
        b.launch(f"{host.name}/postgres", Paths.launcher(host, "postgres"), Paths.pg_data(host) / "postmaster.pid")
        b.wait(lambda h=host: _answers(h), f"PostgreSQL on {host.name}")
        run_in(host, ["repmgr", "-f", str(conf(host)), "standby", "register"], user="postgres")
        b.launch(f"{host.name}/repmgrd", Paths.launcher(host, "repmgrd"), host.dir / "repmgrd.launch.pid")
    b.wait(lambda: health(b.spec), "the repmgr cluster")
    # a switchover needs it; fail the build rather than the first switchover drill
    run_in(nodes[-1], ["ssh", *ssh_options(), primary.address, "true"], user="postgres")


def ssh_options() -> list[str]:
    """How the nodes' postgres users reach each other (repmgr's switchover and rejoin)."""
    return ["-q", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={Paths.known_hosts}",
            "-i", str(postgres_key())]


def _init_primary(host: LabHost, b: Build) -> None:
    data = Paths.pg_data(host)
    data.mkdir(mode=0o700, exist_ok=True)
    shutil.chown(data, "postgres", "postgres")
    pwfile = host.dir / "pw"
    pwfile.write_text(b.secrets["pg_superuser"] + "\n")
    shutil.chown(pwfile, "postgres", "postgres")
    pwfile.chmod(0o600)
    run_in(host, [str(daemons.PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
                  "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"],
           user="postgres")
    pwfile.unlink()
    with open(data / "postgresql.conf", "a") as fh:
        fh.write("\n".join([
            "listen_addresses = '*'", "shared_preload_libraries = 'repmgr'", "wal_level = replica",
            "hot_standby = on", "wal_log_hints = on", "max_wal_senders = 10", "max_replication_slots = 10",
            *(f"{k} = '{v}'" for k, v in disks.BOUNDED_WAL.items()),
            "checkpoint_timeout = 30s", "max_connections = 200", "shared_buffers = 64MB",
            "dynamic_shared_memory_type = mmap", "wal_sender_timeout = 5s", "wal_receiver_timeout = 5s",
            "wal_retrieve_retry_interval = 1s", "archive_mode = off", ""]))
    with open(data / "pg_hba.conf", "a") as fh:
        fh.write("\n".join([f"host repmgr repmgr {SUBNET_PREFIX}.0/24 trust",
                            f"host replication repmgr {SUBNET_PREFIX}.0/24 trust",
                            f"host all all {SUBNET_PREFIX}.0/24 scram-sha-256", ""]))
    # judged alive by PostgreSQL's own pid file: repmgr (rejoin, switchover) restarts it with pg_ctl
    b.launch(f"{host.name}/postgres", Paths.launcher(host, "postgres"), Paths.pg_data(host) / "postmaster.pid")
    b.wait(lambda: _answers(host), f"PostgreSQL on {host.name}")
    psql(SOCKETS, port(host), "CREATE USER repmgr SUPERUSER")
    psql(SOCKETS, port(host), "CREATE DATABASE repmgr OWNER repmgr")


def _answers(host: LabHost) -> tuple[bool, str]:
    try:
        return psql(SOCKETS, port(host), "SELECT 1").strip() == "1", "ok"
    except LabError as exc:
        return False, str(exc)


def nodes_view(spec: LabSpec) -> list[tuple[str, str, bool, bool]]:
    """(host, registered type, active, in recovery) per node that answers."""
    return _poll(spec)[0]


def _poll(spec: LabSpec) -> tuple[list[tuple[str, str, bool, bool]], dict[str, str]]:
    """`nodes_view`, and what each node that did not answer said instead (one query per node)."""
    out, silent = [], {}
    for host in hosts(spec):
        try:
            rows = psql(SOCKETS, port(host), "SELECT pg_is_in_recovery()").strip()
        except LabError as exc:
            silent[host.name] = str(exc)
            continue
        out.append((host.name, "", True, rows == "t"))
    return out, silent


def health(spec: LabSpec) -> tuple[bool, str]:
    """One primary, every standby streaming from it, repmgr's metadata agreeing."""
    answering, silent = _poll(spec)
    primaries = [h for h, _, _, rec in answering if not rec]
    if len(answering) != len(hosts(spec)) or len(primaries) != 1:
        # what the server said (e.g. "the database system is starting up"), not psql's preamble
        said = "".join(f"; {name}: {(why.strip().splitlines() or [''])[-1].split('failed: ')[-1][:120]}"
                       for name, why in list(silent.items())[:2])
        return False, f"repmgr: {len(answering)} of {len(hosts(spec))} answer, primaries {primaries}{said}"
    primary = next(h for h in hosts(spec) if h.name == primaries[0])
    try:
        streaming = psql(SOCKETS, port(primary), "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        registered = psql(SOCKETS, port(primary), "SELECT node_name, type, active FROM repmgr.nodes",
                          database="repmgr")
    except LabError as exc:
        return False, f"repmgr: {exc}"
    if streaming.strip() != str(len(hosts(spec)) - 1):
        return False, f"repmgr: {streaming.strip()} standbys streaming from {primary.name}"
    view = {n: (t, a) for n, t, a in (line.split("|") for line in registered.splitlines() if line)}
    if view.get(primary.name) != ("primary", "t") or any(a != "t" for _, a in view.values()):
        return False, f"repmgr: metadata {view}"
    return True, "ok"


def clusters(spec: LabSpec) -> dict[str, Any]:
    ha = {"kind": "repmgr", "config_file": f"{Paths.root}/hosts/{{host}}/repmgr.conf"}
    return {"repmgr": postgres_cluster(hosts(spec), port, ha, "repmgrd", lambda h: h.dir / "repmgrd.launch.pid",
                                       # repmgrd's own log is found by the manager in repmgr.conf
                                       lambda h: {"postgres": h.dir / "postgres.log"})}


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.pg_data(h) for h in hosts(spec)]


def _streams_from(primary: LabHost, host: LabHost, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(LabError):
            names = psql(SOCKETS, port(primary), "SELECT application_name FROM pg_stat_replication "
                                                 "WHERE state = 'streaming'").split()
            if host.name in names:
                return True
        time.sleep(0.5)
    return False


def repair(spec: LabSpec) -> list[str]:
    """A node that is down or still registered as an (inactive) primary is rejoined to the current
    primary the way an operator would (rewound where needed), registered again as a standby, and
    its repmgrd started: the lab's reset between tests."""
    answering = {h: rec for h, _, _, rec in nodes_view(spec)}
    primaries = [h for h, rec in answering.items() if not rec]
    if not primaries:
        return []
    # two primaries (an old one isolated, then healed): the one on the newest timeline stays
    primary = max((h for h in hosts(spec) if h.name in primaries),
                  key=lambda h: int(psql(SOCKETS, port(h), f"SELECT {CURRENT_TIMELINE}").strip() or 0))
    try:
        streaming = set(psql(SOCKETS, port(primary), "SELECT application_name FROM pg_stat_replication "
                                                     "WHERE state = 'streaming'").split())
    except LabError:
        return []
    done = []
    for host in hosts(spec):
        if host.name == primary.name or host.name in streaming:
            continue
        target = f"host={primary.address} port={port(primary)} user=repmgr dbname=repmgr connect_timeout=2"
        try:  # the same rejoin (and clone where it fails) as a drill's rejoin action
            run_in(host, ["bash", "-c", REJOIN_SCRIPT, "rejoin", str(conf(host)), str(Paths.pg_data(host)), target],
                   user="postgres", timeout=180)
            rejoined = _streams_from(primary, host)
        except LabError:
            rejoined = False
        if not rejoined:
            try:
                run_in(host, ["bash", "-c", CLONE_SCRIPT, "clone", str(conf(host)), primary.address, str(port(primary)),
                              "repmgr", "repmgr"], user="postgres", timeout=300)
            except LabError:
                continue
            subprocess.run(["sh", str(Paths.launcher(host, "repmgrd"))], check=False, timeout=30)
            done.append(host.name)
            continue
        try:
            run_in(host, ["repmgr", "-f", str(conf(host)), "standby", "register", "--force", "--wait-start=60"],
                   user="postgres")
        except LabError:
            continue
        subprocess.run(["sh", str(Paths.launcher(host, "repmgrd"))], check=False, timeout=30)
        done.append(host.name)
    return done
