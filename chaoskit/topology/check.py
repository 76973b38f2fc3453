"""`chaoskit inventory check`: is every host reachable, what is its clock offset, what can it do,
and what role does every cluster member play right now. Unreachable hosts are reported."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from chaoskit.inventory.capabilities import probe_capabilities
from chaoskit.inventory.clock import measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.inventory.remote import Remote
from chaoskit.topology.roles import discover_roles


def _host_facts(remote: Remote) -> dict[str, Any]:
    remote.run("true", timeout=10)  # connect (and authenticate) outside the timing
    t0 = time.monotonic()
    remote.run("true", timeout=10)
    rtt = time.monotonic() - t0
    clock = measure_offset(remote)
    caps = probe_capabilities(remote)
    return {"ssh_rtt_ms": round(rtt * 1000, 2), "clock": asdict(clock), "capabilities": caps.to_dict()}


def check_inventory(inventory: Inventory, pool: RemotePool | None = None) -> dict[str, Any]:
    own_pool = pool is None
    pool = pool or RemotePool(inventory)
    try:
        results = fan_out_pool(pool, _host_facts)
    finally:
        if own_pool:
            pool.close()
    hosts = []
    for name, res in results.items():
        host = inventory.hosts[name]
        entry: dict[str, Any] = {"name": name, "address": host.address, "user": host.user,
                                 "become": host.become, "jump": host.jump}
        if isinstance(res, BaseException):
            entry.update({"reachable": False, "error": str(res)})
        else:
            entry.update({"reachable": True, **res})
        hosts.append(entry)
    # every cluster at once: a cluster whose members do not answer costs its connect timeouts
    # (3-7 s on the lab), which one after another made 36 s of a 15-cluster inventory
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(inventory.clusters))),
                            thread_name_prefix="check-cluster") as ex:
        found = {cname: ex.submit(_cluster_roles, cluster, inventory) for cname, cluster in inventory.clusters.items()}
    return {"inventory": inventory.source, "hosts": hosts,
            "clusters": {cname: fut.result() for cname, fut in found.items()}}


def _cluster_roles(cluster: Cluster, inventory: Inventory) -> dict[str, Any]:
    kind = f"{cluster.engine}, ha: {cluster.ha.kind}"
    try:
        return {"kind": kind, "members": [asdict(r) for r in discover_roles(cluster, inventory)]}
    except Exception as exc:  # e.g. a password reference that does not resolve
        return {"kind": kind, "error": str(exc), "members": []}


def render_check(report: dict[str, Any], console: Console) -> None:
    table = Table(title=f"hosts ({report['inventory']})")
    for col in ("host", "address", "reachable", "ssh rtt", "clock offset", "netem", "iptables/nft"):
        table.add_column(col)
    problems = []
    for h in report["hosts"]:
        if not h["reachable"]:
            table.add_row(h["name"], h["address"], "[red]no[/red]", "", "", "", "")
            problems.append(f"{h['name']}: {h['error']}")
            continue
        c, caps = h["clock"], h["capabilities"]
        netem = "yes" if caps["netem"] else f"[yellow]no[/yellow] ({caps['netem_reason'][:60]})"
        fw = "/".join(x for x, ok in (("iptables", caps["iptables"]), ("nft", caps["nft"])) if ok) or "none"
        table.add_row(h["name"], h["address"], "yes", f"{h['ssh_rtt_ms']:.1f} ms",
                      f"{c['offset_s'] * 1000:+.2f} ± {c['uncertainty_s'] * 1000:.2f} ms", netem, fw)
    console.print(table)
    for line in problems:
        console.print(f"[red]unreachable[/red] {line}", highlight=False, soft_wrap=True)
    for cname, cl in report["clusters"].items():
        ct = Table(title=f"cluster {cname} ({cl['kind']})")
        for col in ("member", "address", "sql role", "manager role", "state", "lag bytes"):
            ct.add_column(col)
        if cl.get("error"):
            console.print(f"[red]cluster {cname}:[/red] {cl['error']}", highlight=False, soft_wrap=True)
            continue
        for m in cl["members"]:
            ct.add_row(m["member"], m["address"], m["sql_role"] + (f" ({m['error']})" if m["error"] else ""),
                       str(m["manager_role"] or "-"), str(m["manager_state"] or "-"), str(m["lag_bytes"]))
        console.print(ct)
