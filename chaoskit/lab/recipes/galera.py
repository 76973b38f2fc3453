"""A three-node MariaDB 10.11 Galera cluster (galera-4, wsrep) on galera1-galera3, with HAProxy on
gproxy in front as it is commonly deployed: one writer backend (galera1) and the others as
backups, each checked the way `clustercheck` does it (the node answers and its wsrep state is
Synced), so all writes go to one node at a time and move to the first backup when it fails.

Every node takes writes while it is in the Primary Component; a node cut off into a minority
refuses them (wsrep_ready OFF) until it is back. Nodes join by rsync state transfer (SST) from a
donor; the first node bootstraps the cluster once, at `lab up`, with its own launcher: the
node's ordinary launcher (the one a drill restarts it with) only ever joins, so a restarted node
can never found a second cluster beside the first. Only when no node runs at all (the lab's revive
or repair) is the cluster founded again, by its most advanced node (`cold_start`).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.lab import daemons
from chaoskit.lab.procs import pid_file_alive, run_launcher
from chaoskit.lab.recipes import Build, haproxy_writer, service
from chaoskit.lab.recipes import mariadb as my
from chaoskit.lab.spec import MARIADB_DATABASE, MARIADB_PORT, MARIADB_USER, LabHost, LabSpec, Paths

NAME = "galera"
HOSTS = (LabHost("gproxy", 70, "galera-proxy", NAME),
         *(LabHost(f"galera{i}", 70 + i, "galera", NAME) for i in (1, 2, 3)))
HAPROXY_PORT = 3306
CHECK_USER = "clustercheck"
PROVIDER = "/usr/lib/galera/libgalera_smm.so"
WSREP_STATUS = ("wsrep_local_state_comment", "wsrep_cluster_status", "wsrep_cluster_size", "wsrep_ready")


def hosts(spec: LabSpec) -> list[LabHost]:
    return spec.by_role("galera")


def proxy_host(spec: LabSpec) -> LabHost:
    return spec.by_role("galera-proxy")[0]


def bootstrap_launcher(host: LabHost) -> Path:
    """galera1's first start, founding the cluster (`--wsrep-new-cluster`); same pid file as its
    ordinary launcher, so that one sees it running."""
    cnf = Paths.mariadb_cnf(host)
    return daemons.write_launcher(host, "mariadb-bootstrap",
                                  f"/usr/sbin/mariadbd --defaults-file={cnf} --user=mysql --wsrep-new-cluster",
                                  host.dir / "mariadb.launch.pid", log=host.dir / "mariadbd.out")


def write_cnf(host: LabHost, nodes: list[LabHost]) -> None:
    """wsrep settings on top of the lab's MariaDB my.cnf: every node may take writes (no
    read-only), row-based binlog, interleaved auto-increment locks (Galera's requirements)."""
    cnf = Paths.mariadb_cnf(host)
    text = cnf.read_text().replace("read-only=1\n", "")
    members = ",".join(h.address for h in nodes)
    text += "\n".join([
        "gtid-strict-mode=0", "innodb-autoinc-lock-mode=2", "default-storage-engine=InnoDB",
        "wsrep-on=ON", f"wsrep-provider={PROVIDER}", "wsrep-cluster-name=chaoskit-lab",
        f"wsrep-cluster-address=gcomm://{members}", f"wsrep-node-address={host.address}",
        f"wsrep-node-name={host.name}", "wsrep-sst-method=rsync", "wsrep-slave-threads=2",
        "wsrep-provider-options=gcache.size=64M", ""])
    cnf.write_text(text)


def build(b: Build) -> None:
    nodes = hosts(b.spec)
    daemons.mariadb_setup(nodes[0], 1)
    for i, host in enumerate(nodes[1:], start=2):
        daemons.mariadb_setup(host, i, template=nodes[0].dir / "mysql")
    for host in nodes:
        write_cnf(host, nodes)
    first = nodes[0]
    b.launch(f"{first.name}/mariadb", bootstrap_launcher(first), first.dir / "mariadb.launch.pid")
    users(first, b.secrets, b.deadline)
    b.wait(lambda: node_ok(first, 1), f"{first.name} (bootstrap)")
    for host in nodes[1:]:  # one joiner at a time: each takes a state transfer from a donor
        b.launch(f"{host.name}/mariadb", Paths.launcher(host, "mariadb"), host.dir / "mariadb.launch.pid")
        b.wait(lambda h=host: node_ok(h, None), f"{host.name} joining")
    p = proxy_host(b.spec)
    b.launch(f"{p.name}/haproxy", haproxy_launcher(b.spec), p.dir / "haproxy.pid")
    b.wait(lambda: health(b.spec), "the Galera cluster")


def users(first: LabHost, pw: dict[str, str], deadline: float) -> None:
    """The application's user, and the check user HAProxy logs in with (it can only log in and
    read status); replicated to every node by Galera itself (and copied by each joiner's SST)."""
    my.wait_sql(first, deadline)
    subnet = first.address.rsplit(".", 1)[0] + ".%"
    my.sql(first, (
        f"CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE};"
        f"CREATE OR REPLACE USER '{MARIADB_USER}'@'{subnet}' IDENTIFIED BY '{pw['mariadb_chaoskit']}';"
        f"GRANT ALL PRIVILEGES ON {MARIADB_DATABASE}.* TO '{MARIADB_USER}'@'{subnet}';"
        f"GRANT REPLICATION CLIENT, SLAVE MONITOR ON *.* TO '{MARIADB_USER}'@'{subnet}';"
        f"CREATE OR REPLACE USER '{CHECK_USER}'@'{subnet}' IDENTIFIED BY '{pw['mariadb_check']}';"))


def status(host: LabHost) -> dict[str, str]:
    """The node's wsrep status words (SHOW STATUS is answered in a non-Primary component too)."""
    names = ",".join(f"'{n}'" for n in WSREP_STATUS)
    out = my.sql(host, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
    return dict(line.split("\t", 1) for line in out.strip().splitlines() if "\t" in line)


def node_ok(host: LabHost, size: int | None) -> tuple[bool, str]:
    try:
        st = status(host)
    except LabError as exc:
        return False, str(exc)
    good = (st.get("wsrep_local_state_comment") == "Synced" and st.get("wsrep_cluster_status") == "Primary"
            and st.get("wsrep_ready") == "ON" and (size is None or st.get("wsrep_cluster_size") == str(size)))
    return good, f"{host.name}: {st}"


def haproxy_launcher(spec: LabSpec) -> Path:
    """HAProxy on gproxy: galera1 the writer backend, galera2 and galera3 backups (the first one
    that is up takes over), each checked like `clustercheck` (logs in, wsrep state Synced)."""
    secret = shlex.quote(str(Paths.secret("mariadb_check")))
    body = (f"st=$(MYSQL_PWD=$(cat {secret}) mariadb -h \"$3\" -P \"$4\" -u{CHECK_USER} --connect-timeout=1 "
            "-N -B -e \"SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'\" 2>/dev/null)\n"
            '[ "${st#*\t}" = "Synced" ]\n')
    return haproxy_writer(proxy_host(spec), HAPROXY_PORT, hosts(spec), MARIADB_PORT, body, backups=True)


def running(host: LabHost) -> bool:
    return pid_file_alive(Paths.mariadb_pid(host))


def health(spec: LabSpec) -> tuple[bool, str]:
    nodes = hosts(spec)
    for h in nodes:
        ok, why = node_ok(h, len(nodes))
        if not ok:
            return False, f"galera: {why}"
    if not pid_file_alive(proxy_host(spec).dir / "haproxy.pid"):
        return False, "galera: HAProxy is not running"
    return True, "ok"


def repair(spec: LabSpec) -> list[str]:
    """A node a drill left stopped is started again (it joins by IST/SST); when no node is left
    running, the cluster is cold-started (`cold_start`)."""
    nodes = hosts(spec)
    up = [h for h in nodes if running(h)]
    if not up:
        return cold_start(spec)
    done = []
    for h in nodes:
        if h not in up:
            subprocess.run(["sh", str(Paths.launcher(h, "mariadb"))], check=False, timeout=30)
            done.append(f"{h.name} started (joins the cluster)")
    return done


def revive(spec: LabSpec) -> list[str]:
    """Called when every lab daemon died at once (the lab crashed, not a drill): no node can join a
    cluster that no node runs, so the cluster is cold-started before the lab restarts the rest."""
    return [] if any(running(h) for h in hosts(spec)) else cold_start(spec)


def cold_start(spec: LabSpec) -> list[str]:
    """Every node down: as a DBA does it, each node's last committed seqno is found (grastate.dat
    after a clean stop, InnoDB recovery after a crash), the most advanced node founds the cluster
    (the one Galera marked safe to bootstrap, if any: the last to leave), and the others join. A
    joiner whose recovered seqno is the cluster's needs no state transfer; without the recovery
    a crashed node's grastate says seqno -1 and it would take a full SST."""
    nodes = hosts(spec)
    with ThreadPoolExecutor(len(nodes)) as pool:
        seqnos = dict(zip([h.name for h in nodes], pool.map(recover_position, nodes), strict=True))
    first = next((h for h in nodes if "safe_to_bootstrap: 1" in _grastate(h)),
                 max(nodes, key=lambda h: seqnos[h.name]))  # max keeps the first of equals
    grastate = first.dir / "mysql" / "grastate.dat"
    with contextlib.suppress(OSError):
        grastate.write_text(grastate.read_text().replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1"))
    run_launcher(bootstrap_launcher(first), first.dir / "mariadb.launch.pid")
    done = [f"{first.name} (seqno {seqnos[first.name]}) bootstrapped the cluster again"]
    for h in nodes:
        if h is not first:
            subprocess.run(["sh", str(Paths.launcher(h, "mariadb"))], check=False, timeout=30)
            done.append(f"{h.name} (seqno {seqnos[h.name]}) started (joins the cluster)")
    return done


RECOVERED = re.compile(r"WSREP: Recovered position: ([0-9a-f-]{36}):(-?\d+)")


def recover_position(host: LabHost) -> int:
    """The node's last committed seqno. grastate.dat has it after a clean stop; after a crash it
    says -1 and InnoDB's recovery tells it (`mariadbd --wsrep-recover`, in the node's namespace:
    it opens its listening socket before it exits); the seqno is then written back to
    grastate.dat, which is what the node's next start reads. -1 when neither knows."""
    state = _grastate(host)
    found = re.search(r"^seqno:\s*(-?\d+)", state, re.M)
    if found and int(found.group(1)) >= 0:
        return int(found.group(1))
    log = host.dir / "wsrep-recover.log"
    log.unlink(missing_ok=True)
    subprocess.run(["ip", "netns", "exec", host.netns, "/usr/sbin/mariadbd",
                    f"--defaults-file={Paths.mariadb_cnf(host)}", "--user=mysql", "--wsrep-recover",
                    f"--log-error={log}"], capture_output=True, timeout=120, check=False)
    with contextlib.suppress(OSError):
        recovered = RECOVERED.findall(log.read_text())
        if recovered and state:
            uuid, seqno = recovered[-1]
            (host.dir / "mysql" / "grastate.dat").write_text(
                re.sub(r"^seqno:.*$", f"seqno:   {seqno}",
                       re.sub(r"^uuid:.*$", f"uuid:    {uuid}", state, flags=re.M), flags=re.M))
            return int(seqno)
    return -1


def _grastate(host: LabHost) -> str:
    try:
        return (host.dir / "mysql" / "grastate.dat").read_text()
    except OSError:
        return ""


def clusters(spec: LabSpec) -> dict[str, Any]:
    p = proxy_host(spec)
    members = [my.member(h) for h in hosts(spec)]
    base = {"engine": "mysql", "members": members, "port": MARIADB_PORT, "database": MARIADB_DATABASE,
            "user": MARIADB_USER, "password": {"file": str(Paths.secret("mariadb_chaoskit"))},
            "ha": {"kind": "galera"}}
    return {
        # clients searching the list for the first node that takes writes
        "galera": {**base, "endpoints": [f"{h.address}:{MARIADB_PORT}" for h in hosts(spec)]},
        # the same cluster through HAProxy's single writer backend
        "galera-haproxy": {**base, "endpoints": [f"{p.address}:{HAPROXY_PORT}"]},
        # an application pinned to the third node (the one a minority partition cuts off)
        "galera-node3": {**base, "endpoints": [f"{hosts(spec)[2].address}:{MARIADB_PORT}"]},
    }


def postgres_data(spec: LabSpec) -> list[Path]:
    return []


def host_services(spec: LabSpec) -> dict[str, Any]:
    """HAProxy in front of the nodes, a fault target of its own."""
    p = proxy_host(spec)
    return {p.name: {"tags": {"component": "proxy"},
                     "processes": {"haproxy": service(p.dir / "haproxy.pid", "haproxy", Paths.launcher(p, "haproxy"))},
                     "logs": {"haproxy": str(p.dir / "haproxy.out")}}}
