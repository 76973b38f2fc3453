"""The lab's network: one bridge in the root namespace, one namespace + veth per host.

Only names with the lab's prefixes are ever created or deleted here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from chaoskit.lab.procs import sh
from chaoskit.lab.spec import BRIDGE, BRIDGE_ADDRESS, NETNS_PREFIX, LabHost, LabSpec

NETNS_ETC = Path("/etc/netns")


def existing_netns() -> list[str]:
    res = sh(["ip", "-o", "netns", "list"], check=False)
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(NETNS_PREFIX)]


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def build(hosts: list[LabHost], spec: LabSpec) -> None:
    """The bridge (if missing) and a namespace + veth for each of these hosts (added beside any
    the lab already has)."""
    if not link_exists(BRIDGE):
        sh(["ip", "link", "add", BRIDGE, "type", "bridge"])
    sh(["ip", "addr", "replace", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE])
    sh(["ip", "link", "set", BRIDGE, "up"])
    root_batch: list[str] = []
    for host in hosts:
        sh(["ip", "netns", "add", host.netns])
        root_batch += [
            f"link add {host.veth} type veth peer name eth0 netns {host.netns}",
            f"link set {host.veth} master {BRIDGE}",
            f"link set {host.veth} up",
        ]
    _ip_batch(root_batch)
    _etc_hosts(spec)
    for host in hosts:
        _ip_batch([f"addr add {host.address}/24 dev eth0", "link set eth0 up", "link set lo up"],
                  netns=host.netns)
    _forget_neighbours(hosts)


def _forget_neighbours(hosts: list[LabHost]) -> None:
    """A host added again (a stack brought back) has its old address on a new veth: the neighbour
    entries the other namespaces and the root one kept for that address name the old MAC, and the
    first connection to it waited until they went stale (35.9 s measured after `down --stack
    mariadb` and `up` again). Forgotten here, they are resolved afresh."""
    mine = {h.netns for h in hosts}
    flush = [f"neigh flush to {h.address}" for h in hosts]
    _ip_batch(flush)
    for netns in existing_netns():
        if netns not in mine:
            _ip_batch(flush, netns=netns)


def _etc_hosts(spec: LabSpec) -> None:
    """Per-host /etc/hosts (ip netns exec bind-mounts /etc/netns/NS/*), so sudo resolves its name."""
    names = "".join(f"{h.address} {h.name}\n" for h in spec.hosts)
    for host in spec.hosts:
        d = NETNS_ETC / host.netns
        d.mkdir(parents=True, exist_ok=True)
        (d / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {host.name}\n{names}")


def _ip_batch(lines: list[str], netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    proc = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"ip -batch failed: {proc.stderr.strip()}")


def destroy_hosts(hosts: list[LabHost]) -> None:
    """These hosts' namespaces and veths (the bridge and the other hosts stay)."""
    have = set(existing_netns())
    for host in hosts:
        if host.netns in have:
            sh(["ip", "netns", "del", host.netns], check=False)
        if link_exists(host.veth):
            sh(["ip", "link", "del", host.veth], check=False)
        shutil.rmtree(NETNS_ETC / host.netns, ignore_errors=True)


def destroy(spec: LabSpec) -> None:
    for ns in existing_netns():
        sh(["ip", "netns", "del", ns], check=False)
    for host in spec.hosts:
        if link_exists(host.veth):
            sh(["ip", "link", "del", host.veth], check=False)
    if link_exists(BRIDGE):
        sh(["ip", "link", "del", BRIDGE], check=False)
    for host in spec.hosts:
        shutil.rmtree(NETNS_ETC / host.netns, ignore_errors=True)
