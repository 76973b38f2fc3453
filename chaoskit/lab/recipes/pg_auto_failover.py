"""pg_auto_failover 2.0 (Debian `pg-auto-failover-cli`, `postgresql-15-auto-failover`): a monitor
on afm and a keeper (`pg_autoctl`) with PostgreSQL 15 on af1-af3.

Lab specifics: the hosts share one file system, so each PostgreSQL has its own port (monitor 5440,
keepers 5441-5443) under the default socket directory, and each keeper its own HOME / XDG
directories. The monitor's health checks are shortened (period 1 s, unhealthy after 4 s, demote
timeout 5 s) so a failover takes seconds; the manager reads them back into the evidence.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.lab import daemons, disks
from chaoskit.lab.procs import netns_pids, pid_file_alive, read_pid_file, terminate
from chaoskit.lab.recipes import PG_SOCKETS, Build, pg_socket_dir, postgres_cluster, psql, run_in, service
from chaoskit.lab.spec import SUBNET_PREFIX, LabHost, LabSpec, Paths

NAME = "pg_auto_failover"
HOSTS = (LabHost("afm", 30, "pgaf-monitor", NAME),
         *(LabHost(f"af{i}", 30 + i, "pgaf", NAME) for i in (1, 2, 3)))
SOCKETS = PG_SOCKETS
MONITOR_PORT = 5440
MONITOR_SETTINGS = {"health_check_period": 1000, "health_check_timeout": 1000, "health_check_max_retries": 1,
                    "health_check_retry_delay": 500, "node_considered_unhealthy_timeout": 4000,
                    "primary_demote_timeout": 5000, "startup_grace_period": 3000}


def monitor(spec: LabSpec) -> LabHost:
    return spec.by_role("pgaf-monitor")[0]


def keepers(spec: LabSpec) -> list[LabHost]:
    return spec.by_role("pgaf")


def port(host: LabHost) -> int:
    return MONITOR_PORT + (host.octet - 30)


def env(host: LabHost) -> dict[str, str]:
    home = host.dir / "home"
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_RUNTIME_DIR": str(host.dir / "xdg"), "PATH": f"{daemons.PG_BIN}:/usr/bin:/bin",
            "PGPORT": str(port(host))}


def monitor_uri(spec: LabSpec) -> str:
    m = monitor(spec)
    return f"postgres://autoctl_node@{m.address}:{MONITOR_PORT}/pg_auto_failover?sslmode=disable"


def _dirs(host: LabHost) -> None:
    import shutil

    for d in (host.dir, host.dir / "home", host.dir / "xdg"):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "postgres", "postgres")
    (host.dir / "xdg").chmod(0o700)


def _keeper_launcher(host: LabHost) -> Path:
    return daemons.write_launcher(host, "pg_autoctl", f"pg_autoctl run --pgdata {Paths.pg_data(host)}",
                                  host.dir / "pg_autoctl.pid", log=host.dir / "pg_autoctl.log", user="postgres",
                                  env=env(host))


def build(b: Build) -> None:
    pg_socket_dir()
    mon = monitor(b.spec)
    _dirs(mon)
    run_in(mon, ["pg_autoctl", "create", "monitor", "--pgdata", str(Paths.pg_data(mon)), "--pgport", str(MONITOR_PORT),
                 "--hostname", mon.address, "--auth", "trust", "--no-ssl"], user="postgres", env=env(mon))
    with open(Paths.pg_data(mon) / "postgresql.conf", "a") as fh:
        fh.write("".join(f"pgautofailover.{k} = {v}\n" for k, v in MONITOR_SETTINGS.items()))
    b.launch(f"{mon.name}/pg_autoctl", _keeper_launcher(mon), mon.dir / "pg_autoctl.pid")
    b.wait(lambda: _answers(mon), "the pg_auto_failover monitor")
    for i, host in enumerate(keepers(b.spec)):
        _dirs(host)
        run_in(host, ["pg_autoctl", "create", "postgres", "--pgdata", str(Paths.pg_data(host)), "--pgport",
                      str(port(host)), "--hostname", host.address, "--name", host.name, "--auth", "trust", "--no-ssl",
                      "--monitor", monitor_uri(b.spec)], user="postgres", env=env(host), timeout=b.left())
        if i == 0:
            with open(Paths.pg_data(host) / "pg_hba.conf", "a") as fh:  # copied to the standbys; pg_autoctl
                fh.write(f"host all postgres {SUBNET_PREFIX}.0/24 scram-sha-256\n")  # adds its own rules after
        b.launch(f"{host.name}/pg_autoctl", _keeper_launcher(host), host.dir / "pg_autoctl.pid")
        if i == 0:
            b.wait(lambda h=host: _state_is(b.spec, h.name, {"single", "primary"}), f"{host.name} as the first node")
            # the keeper may still restart its server once: retry until it answers
            b.wait(lambda h=host: _set_password(h, b.secrets["pg_superuser"]), f"the password on {host.name}")
            b.wait(lambda h=host: _bound_wal(h), f"the WAL bounds on {host.name}")
    b.wait(lambda: health(b.spec), "the pg_auto_failover formation")


def _set_password(host: LabHost, password: str) -> tuple[bool, str]:
    try:
        psql(SOCKETS, port(host), f"ALTER USER postgres PASSWORD '{password}'")
        return True, "ok"
    except LabError as exc:
        return False, str(exc)


def _bound_wal(host: LabHost) -> tuple[bool, str]:
    """The lab's WAL bounds instead of pg_autoctl's machine-sized ones (its wal_keep_size is 8 GB
    on this machine, four times a member's disk), set on the first node before any standby
    exists: pg_basebackup copies postgresql.auto.conf to each standby."""
    try:
        for name, value in disks.BOUNDED_WAL.items():  # ALTER SYSTEM: one statement per call
            psql(SOCKETS, port(host), f"ALTER SYSTEM SET {name} = '{value}'")
        psql(SOCKETS, port(host), "SELECT pg_reload_conf()")
        return True, "ok"
    except LabError as exc:
        return False, str(exc)


def _answers(host: LabHost) -> tuple[bool, str]:
    try:
        return psql(SOCKETS, port(host), "SELECT 1", database="pg_auto_failover").strip() == "1", "ok"
    except LabError as exc:
        return False, str(exc)


def states(spec: LabSpec) -> list[tuple[str, str, str, int]]:
    """(node name, reported state, goal state, health) as the monitor sees them."""
    out = psql(SOCKETS, MONITOR_PORT, "SELECT nodename, reportedstate, goalstate, health FROM pgautofailover.node "
                                      "ORDER BY nodename", database="pg_auto_failover")
    return [(n, r, g, int(h)) for n, r, g, h in (line.split("|") for line in out.splitlines() if line)]


def _state_is(spec: LabSpec, name: str, wanted: set[str]) -> tuple[bool, str]:
    try:
        found = {n: (r, g) for n, r, g, _ in states(spec)}
    except LabError as exc:
        return False, str(exc)
    r, g = found.get(name, ("absent", "absent"))
    return (r in wanted and r == g), f"{name} reports {r}, assigned {g}"


def orphans(spec: LabSpec) -> list[int]:
    """pg_autoctl services left running by a supervisor that was killed alone (a drill's `kill` of
    its pid): reparented to init, they keep restarting PostgreSQL and fight the next keeper."""
    out = []
    for host in [monitor(spec), *keepers(spec)]:
        keeper = read_pid_file(host.dir / "pg_autoctl.pid")
        for pid in netns_pids(host.netns):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if cmdline.startswith(b"pg_autoctl") and pid != keeper and ppid != keeper:
                out.append(pid)
    return out


def revive(spec: LabSpec) -> list[str]:
    """Called when every lab daemon was killed at once, before the lab restarts them: a killed
    pg_autoctl supervisor leaves its services running, and a keeper restarted beside them fights
    them over the pid file (seen on the lab: a secondary left unhealthy past the revive's 45 s).
    They are ended first (by pid, in the lab's namespaces), with SIGKILL: their PostgreSQL servers
    keep running and the restarted supervisors take them over. Ended with SIGTERM, the services
    stopped PostgreSQL too; the monitor came back before the nodes did, saw the primary's
    PostgreSQL down and began a failover of a cluster that had merely restarted (every such revive
    here), and in 1 of 4 that failover ran into a crash loop of the monitor (its log: "server
    process ... was terminated by signal 11: Segmentation fault", "Failed process was running:
    SELECT * FROM pgautofailover.node_active(...)", pg_auto_failover 2.0 with a node in report_lsn
    assigned demote_timeout) that no in-place revive recovers: 8 of 8 revives after a partition
    drill came back with no failover at all this way."""
    stray = orphans(spec)
    terminate(stray, grace=0.0, sig=signal.SIGKILL)
    return [f"orphaned pg_autoctl service {p} ended" for p in stray]


def repair(spec: LabSpec) -> list[str]:
    """Orphaned keeper services ended (`revive`); the keeper itself is started again where it is
    not running; pg_auto_failover then heals the cluster by itself."""
    done = revive(spec)
    for host in [monitor(spec), *keepers(spec)]:
        if not pid_file_alive(host.dir / "pg_autoctl.pid"):
            subprocess.run(["sh", str(Paths.launcher(host, "pg_autoctl"))], check=False, timeout=30)
            done.append(f"pg_autoctl of {host.name} started")
    return done


def health(spec: LabSpec) -> tuple[bool, str]:
    stray = orphans(spec)
    if stray:
        return False, f"pg_auto_failover: orphaned pg_autoctl services {stray}"
    try:
        nodes = states(spec)
    except LabError as exc:
        return False, f"pg_auto_failover: {exc}"
    primaries = [n for n, r, g, _ in nodes if r == g == "primary"]
    secondaries = [n for n, r, g, h in nodes if r == g == "secondary" and h == 1]
    ok = len(primaries) == 1 and len(secondaries) == len(keepers(spec)) - 1
    return ok, "ok" if ok else "pg_auto_failover: " + ", ".join(f"{n}={r}>{g} (health {h})" for n, r, g, h in nodes)


def clusters(spec: LabSpec) -> dict[str, Any]:
    ha = {"kind": "pg_auto_failover", "monitor": f"{monitor(spec).address}:{MONITOR_PORT}"}
    return {"pgaf": postgres_cluster(keepers(spec), port, ha, "pg_autoctl", lambda h: h.dir / "pg_autoctl.pid",
                                     lambda h: {"pg_autoctl": h.dir / "pg_autoctl.log"})}


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.pg_data(h) for h in [monitor(spec), *keepers(spec)]]



def host_services(spec: LabSpec) -> dict[str, Any]:
    """The monitor: its pg_autoctl and the PostgreSQL that holds the formation's state."""
    m = monitor(spec)
    return {m.name: {"tags": {"component": "pgaf-monitor"}, "processes": {
        "pg_autoctl": service(m.dir / "pg_autoctl.pid", "pg_autoctl", Paths.launcher(m, "pg_autoctl")),
        "postgres": service(Paths.pg_data(m) / "postmaster.pid", "postgres")},
        "logs": {"pg_autoctl": str(m.dir / "pg_autoctl.log")}}}
