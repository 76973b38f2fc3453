"""MHA 0.58 (Debian `mha4mysql-manager` / `mha4mysql-node`) over MariaDB 10.11 asynchronous
replication: mha1 primary, mha2/mha3 replicas (binlog file and position: MHA 0.58 predates
MariaDB's GTID, it reads `Exec_Master_Log_Pos` and applies relay-log differences itself), and
`masterha_manager` as a daemon on the manager host mham, which also runs HAProxy with a writer
check (the second client route: clients either search the endpoint list for the writable node or
connect to HAProxy, which sends them to the one backend that is not read-only) and a read port
(the read route `mha-read`: the backends that are read-only, the replicas, a connection each in
turn).

MHA's manager SSHes to the nodes as root (the lab's controller key, the lab's known_hosts) to save
the dead primary's binlogs and to ship relay-log differences between replicas. `masterha_manager`
exits after a failover by design (it will not fail over twice unattended): the manager's `rejoin`
turns the old primary into a replica of the new one and starts the manager again.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.lab import daemons
from chaoskit.lab.procs import pid_file_alive
from chaoskit.lab.recipes import Build, haproxy_writer, service
from chaoskit.lab.recipes import mariadb as my
from chaoskit.lab.spec import MARIADB_DATABASE, MARIADB_PORT, MARIADB_USER, LabHost, LabSpec, Paths

NAME = "mha"
HOSTS = (LabHost("mham", 60, "mha-manager", NAME), *(LabHost(f"mha{i}", 60 + i, "mha", NAME) for i in (1, 2, 3)))
HAPROXY_PORT = 3306
HAPROXY_READ_PORT = 3307  # the read route: the replicas (read_only = 1), in turn
MHA_USER = "mha"


def hosts(spec: LabSpec) -> list[LabHost]:
    return spec.by_role("mha")


def manager_host(spec: LabSpec) -> LabHost:
    return spec.by_role("mha-manager")[0]


def conf(spec: LabSpec) -> Path:
    return manager_host(spec).dir / "mha.cnf"


def workdir(spec: LabSpec) -> Path:
    return manager_host(spec).dir / "mha"


def manager_log(spec: LabSpec) -> Path:
    return workdir(spec) / "manager.log"


def write_conf(spec: LabSpec, pw: dict[str, str]) -> Path:
    """The manager's application config: every node a candidate, pings each second."""
    ssh = f"-i {Paths.client_key} -o UserKnownHostsFile={Paths.known_hosts} -o StrictHostKeyChecking=yes"
    lines = ["[server default]", f"user={MHA_USER}", f"password={pw['mariadb_mha']}", "repl_user=repl",
             f"repl_password={pw['mariadb_repl']}", "ssh_user=root", f"ssh_options={ssh}",
             f"manager_workdir={workdir(spec)}", f"manager_log={manager_log(spec)}", "ping_interval=1",
             f"master_ip_online_change_script={online_change_script(spec)}",
             "client_bindir=/usr/bin", "client_libdir=/usr/lib", ""]
    for i, h in enumerate(hosts(spec), start=1):
        (h.dir / "mha-work").mkdir(parents=True, exist_ok=True)
        lines += [f"[server{i}]", f"hostname={h.address}", f"port={MARIADB_PORT}", "candidate_master=1",
                  "check_repl_delay=0", f"master_binlog_dir={h.dir / 'mysql'}",
                  f"remote_workdir={h.dir / 'mha-work'}", ""]
    path = conf(spec)
    workdir(spec).mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    path.chmod(0o600)
    return path


def online_change_script(spec: LabSpec) -> Path:
    """MHA's `master_ip_online_change_script` as its documentation asks of a deployment: before a
    planned switch, block writes on the old primary (read_only, its application connections
    killed), or clients that still reach it keep writing there after the switch; MHA itself
    makes the new primary writable. (Measured without it: a third of the switchover drill's
    acknowledged writes landed on the old primary after the switch.)"""
    path = manager_host(spec).dir / "online-change"
    secret = shlex.quote(str(Paths.secret("mariadb_mha")))
    path.write_text(f"""#!/bin/sh
cmd= ip= port=
for a in "$@"; do
  case "$a" in
    --command=*) cmd=${{a#*=}} ;;
    --orig_master_ip=*) ip=${{a#*=}} ;;
    --orig_master_port=*) port=${{a#*=}} ;;
  esac
done
[ "$cmd" = stop ] || exit 0
MYSQL_PWD=$(cat {secret}); export MYSQL_PWD
q() {{ mariadb -h "$ip" -P "$port" -u{MHA_USER} --connect-timeout=2 -N -B -e "$1"; }}
q "SET GLOBAL read_only=1" || exit 1
q "SELECT id FROM information_schema.processlist WHERE user NOT IN ('{MHA_USER}', 'repl', 'system user',
   'event_scheduler') AND command NOT IN ('Binlog Dump', 'Daemon') AND id <> CONNECTION_ID()" |
  while read -r id; do q "KILL $id" 2>/dev/null; done
exit 0
""")
    path.chmod(0o700)
    return path


def manager_launcher(spec: LabSpec) -> Path:
    m = manager_host(spec)
    # --ignore_last_failover: a drill fails the cluster over again minutes later, which MHA would
    # otherwise refuse for 8 hours
    return daemons.write_launcher(m, "masterha_manager",
                                  f"{Paths.tools}/masterha_manager --conf={conf(spec)} --ignore_last_failover",
                                  m.dir / "masterha_manager.pid", log=m.dir / "masterha_manager.out",
                                  env={"HOME": str(m.dir), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})


def haproxy_launcher(spec: LabSpec) -> Path:
    """HAProxy on the manager host: a writer listener, the nodes as servers, each checked by logging
    in and asking `@@read_only` (a check user that can only do that), so exactly the writable node
    is up (`check` with `mysql-check` only proves the server answers, not that it takes writes);
    and a read listener whose servers are up while they are read-only (the replicas)."""
    secret = shlex.quote(str(Paths.secret("mariadb_mha")))
    ask = (f"ro=$(MYSQL_PWD=$(cat {secret}) mariadb -h \"$3\" -P \"$4\" -u{MHA_USER} --connect-timeout=1 "
           "-N -B -e 'SELECT @@read_only' 2>/dev/null)\n")
    return haproxy_writer(manager_host(spec), HAPROXY_PORT, hosts(spec), MARIADB_PORT, ask + '[ "$ro" = "0" ]\n',
                          backups=False, reader=(HAPROXY_READ_PORT, ask + '[ "$ro" = "1" ]\n'))


MHA_TOOLS = ("masterha_manager", "masterha_check_status", "masterha_check_repl", "masterha_check_ssh",
             "masterha_master_switch", "masterha_stop", "apply_diff_relay_logs", "save_binary_logs",
             "purge_relay_logs", "filter_mysqlbinlog")
# MariaDB has no super_read_only; MHA 0.58 asks for it with RaiseError on every replica check and
# before applying binlogs, and stops. Unknown there means "not turned on", as MHA means it.
COMPAT_MODULE = """package ChaoskitMhaCompat;
use strict;
require MHA::SlaveUtil;
{
  no warnings 'redefine';
  my $orig = \\&MHA::SlaveUtil::check_if_super_read_only;
  *MHA::SlaveUtil::check_if_super_read_only = sub {
    my @r = eval { $orig->(@_) };
    return @r ? @r : (0, 0);
  };
}
1;
"""


def write_tools() -> None:
    """MHA 0.58 as Debian 12 ships it cannot monitor MariaDB 10.11; the lab runs each of its tools
    through a wrapper (first on PATH of the lab's SSH sessions, where the manager runs the node
    tools) that (1) disables Perl warnings (`perl -X`): the tools die under their own fatal
    warnings at the first version comparison ("Redundant argument in sprintf" for any version of
    three numbers), and (2) loads a module that treats MariaDB's missing super_read_only as off.
    docs/ha/mha.md says what a user on the same versions needs."""
    lib = Paths.tools / "perl"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "ChaoskitMhaCompat.pm").write_text(COMPAT_MODULE)
    for tool in MHA_TOOLS:
        wrapper = Paths.tools / tool
        wrapper.write_text(f'#!/bin/sh\nexec perl -X -I{lib} -MChaoskitMhaCompat /usr/bin/{tool} "$@"\n')
        wrapper.chmod(0o755)


def plain_version() -> str:
    """MariaDB's version as MHA 0.58 can parse it: three numbers. MHA formats every number of the
    version string into a three-field sprintf under fatal warnings, so Debian's
    "10.11.19-MariaDB-0+deb12u1-log" stops the manager at its first check ("Redundant argument in
    sprintf"); the server reports this string instead (`version` in my.cnf, a MariaDB option)."""
    out = subprocess.run(["/usr/sbin/mariadbd", "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Ver (\d+\.\d+\.\d+)", out)
    if not m:
        raise LabError(f"cannot read MariaDB's version from {out.strip()!r}")
    return f"{m.group(1)}-MariaDB-log"


def build(b: Build) -> None:
    nodes = hosts(b.spec)
    write_tools()
    version = plain_version()
    daemons.mariadb_setup(nodes[0], 1)
    for i, host in enumerate(nodes[1:], start=2):
        daemons.mariadb_setup(host, i, template=nodes[0].dir / "mysql")
    for host in nodes:
        cnf = Paths.mariadb_cnf(host)
        # every node read-only when it starts (an old primary restarted after a failover must not
        # take writes); the primary is made writable at runtime, as MHA does with the new one
        # MHA moves replicas by binlog file and position; GTID strict mode would stop the SQL thread
        # of a replica that MHA points at a new primary whose GTID sequence it has already passed
        cnf.write_text(cnf.read_text() + f"version={version}\nrelay-log-purge=0\nread-only=1\ngtid-strict-mode=0\n")
    for host in nodes:
        b.launch(f"{host.name}/mariadb", Paths.launcher(host, "mariadb"), host.dir / "mariadb.launch.pid")
    my.configure(nodes, b.secrets, b.deadline, gtid=False,
                 extra_users=((MHA_USER, b.secrets["mariadb_mha"], "ALL PRIVILEGES ON *.*"),))
    my.sql(nodes[0], "SET GLOBAL read_only=0")
    b.wait(lambda: replication_health(b.spec), "the MHA replication")
    write_conf(b.spec, b.secrets)
    m = manager_host(b.spec)
    b.launch(f"{m.name}/haproxy", haproxy_launcher(b.spec), m.dir / "haproxy.pid")
    b.launch(f"{m.name}/masterha_manager", manager_launcher(b.spec), m.dir / "masterha_manager.pid")
    b.wait(lambda: health(b.spec), "MHA")


def topology(spec: LabSpec) -> tuple[LabHost | None, list[str]]:
    """The one writable node, and what is wrong with the others (not read-only, not replicating
    from it)."""
    nodes = hosts(spec)
    writable, problems = [], []
    for h in nodes:
        try:
            if my.sql(h, "SELECT @@read_only").strip() == "0":
                writable.append(h)
        except LabError as exc:
            problems.append(f"{h.name}: {exc}")
    if len(writable) != 1:
        return None, [*problems, f"writable: {[h.name for h in writable] or 'none'}"]
    primary = writable[0]
    for h in nodes:
        if h is primary:
            continue
        with contextlib.suppress(LabError):
            status = my.sql(h, "SHOW SLAVE STATUS", vertical=True)
            if (f"Master_Host: {primary.address}" not in status or "Slave_IO_Running: Yes" not in status
                    or "Slave_SQL_Running: Yes" not in status):
                problems.append(f"{h.name}: not replicating from {primary.name}")
    return primary, problems


def replication_health(spec: LabSpec) -> tuple[bool, str]:
    primary, problems = topology(spec)
    return (primary is not None and not problems), "; ".join(problems) or "ok"


def manager_running(spec: LabSpec) -> bool:
    return pid_file_alive(manager_host(spec).dir / "masterha_manager.pid")


def health(spec: LabSpec) -> tuple[bool, str]:
    ok, why = replication_health(spec)
    if not ok:
        return False, f"mha: {why}"
    if not manager_running(spec):
        return False, "mha: masterha_manager is not running"
    res = subprocess.run([str(Paths.tools / "masterha_check_status"), f"--conf={conf(spec)}"], capture_output=True,
                         text=True,
                         timeout=20, check=False)
    if "PING_OK" not in res.stdout:
        return False, f"mha: masterha_check_status: {(res.stdout + res.stderr).strip()[:200]}"
    return True, "ok"


def restarted_primary(spec: LabSpec) -> LabHost | None:
    """The primary after a crash of every node: all come back read-only (my.cnf says so, MHA makes
    the primary writable at runtime), so it is the node that replicates from no one and that every
    other node replicates from. None when the nodes do not say so unambiguously."""
    nodes = hosts(spec)
    sources: dict[str, str] = {}
    for h in nodes:
        try:
            status = my.sql(h, "SHOW SLAVE STATUS", vertical=True)
        except LabError:
            return None
        found = re.search(r"^\s*Master_Host: (\S+)", status, re.M)
        sources[h.name] = found.group(1) if found else ""
    roots = [h for h in nodes if not sources[h.name]]
    if len(roots) != 1 or any(sources[h.name] != roots[0].address for h in nodes if h is not roots[0]):
        return None
    return roots[0]


def repair(spec: LabSpec) -> list[str]:
    """A node left behind by a drill (the old primary after a failover, not yet a replica) is
    turned into a replica of the current primary; a primary that restarted read-only (every node
    crashed) is made writable again, as MHA made it at its promotion; the manager is started
    again."""
    done = []
    primary, problems = topology(spec)
    if primary is None and (root := restarted_primary(spec)) is not None:
        my.sql(root, "SET GLOBAL read_only=0")
        done.append(f"{root.name} (restarted read-only, every other node follows it) made writable")
        primary, problems = topology(spec)
    if primary is not None and problems:
        file, pos = my.sql(primary, "SHOW MASTER STATUS").split()[:2]
        for h in hosts(spec):
            if h is primary or not any(p.startswith(h.name) for p in problems):
                continue
            with contextlib.suppress(LabError):
                my.sql(h, "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=1;"
                          f"CHANGE MASTER TO MASTER_HOST='{primary.address}', MASTER_PORT={MARIADB_PORT},"
                          f" MASTER_USER='repl', MASTER_PASSWORD='{Paths.secret('mariadb_repl').read_text().strip()}',"
                          f" MASTER_LOG_FILE='{file}', MASTER_LOG_POS={int(pos)}, MASTER_CONNECT_RETRY=1,"
                          " MASTER_HEARTBEAT_PERIOD=1; START SLAVE;")
                done.append(f"{h.name} follows {primary.name}")
    if not manager_running(spec):
        subprocess.run(["sh", str(Paths.launcher(manager_host(spec), "masterha_manager"))], check=False, timeout=30)
        done.append("masterha_manager started")
    return done


def clusters(spec: LabSpec) -> dict[str, Any]:
    m = manager_host(spec)
    members = [my.member(h) for h in hosts(spec)]
    base = {"engine": "mysql", "members": members, "port": MARIADB_PORT, "database": MARIADB_DATABASE,
            "user": MARIADB_USER, "password": {"file": str(Paths.secret("mariadb_chaoskit"))},
            "ha": {"kind": "mha", "manager_host": m.name, "conf": str(conf(spec)), "log": str(manager_log(spec)),
                   "start": str(Paths.launcher(m, "masterha_manager")),
                   "pid_file": str(m.dir / "masterha_manager.pid"), "tools_dir": str(Paths.tools)}}
    return {
        "mha": {**base, "endpoints": [f"{h.address}:{MARIADB_PORT}" for h in hosts(spec)]},
        # the same cluster reached through HAProxy's writer check: one endpoint, HAProxy's
        "mha-haproxy": {**base, "endpoints": [f"{m.address}:{HAPROXY_PORT}"]},
        # and HAProxy's read port: the nodes that are read-only (the replicas), a connection each in
        # turn; a replica MHA promotes leaves it, its sessions shut (the usual read/write split)
        "mha-read": {**base, "read_route": True, "endpoints": [f"{m.address}:{HAPROXY_READ_PORT}"]},
    }


def postgres_data(spec: LabSpec) -> list[Path]:
    return []


def host_services(spec: LabSpec) -> dict[str, Any]:
    """The manager host's HAProxy and masterha_manager, fault targets of their own (the lab runs
    the manager through a wrapper that execs perl with its compatibility module: its comm is
    `perl`, and the pid file is what tells it from any other perl)."""
    m = manager_host(spec)
    return {m.name: {"tags": {"component": "mha-manager"}, "processes": {
        "haproxy": service(m.dir / "haproxy.pid", "haproxy", Paths.launcher(m, "haproxy")),
        "masterha_manager": service(m.dir / "masterha_manager.pid", "perl",
                                    Paths.launcher(m, "masterha_manager"))},
        "logs": {"haproxy": str(m.dir / "haproxy.out"), "masterha_manager": str(manager_log(spec))}}}
