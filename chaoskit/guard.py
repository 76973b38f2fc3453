"""Refusals made before any packet leaves: production targets, and a lab subnet that is taken.

- Every command that changes anything (`run`, `fault inject`, `experiment run`, `load` with a
  writing workload, actions) passes every host it may touch through `refuse_production`; a host
  or cluster tagged `env: production` (or prod / prd / live, any case) is refused unless
  `--allow-production`, which the evidence records.
- The lab's subnet must be free before the lab takes it (`routed_elsewhere`); a lab inventory used
  while the lab is down is refused by `chaoskit.inventory.reach`, at every command and again in the
  SSH transport.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterable

from chaoskit.errors import PreflightError
from chaoskit.inventory.models import Inventory


def production_targets(inv: Inventory, hosts: Iterable[str], clusters: Iterable[str] = ()) -> list[str]:
    out = [f"host {h}" for h in sorted(set(hosts)) if h in inv.hosts and inv.hosts[h].is_production]
    out += [f"cluster {c}" for c in sorted(set(clusters)) if c in inv.clusters and inv.clusters[c].is_production]
    return out


def environment(inv: Inventory, cluster: str) -> dict[str, str]:
    """What kind of system a drill ran against, for the evidence's headline: `lab` when the
    inventory is the lab's, `production` when the production guard calls the cluster or one of
    its hosts production, else the hosts' and cluster's own `env`/`environment` tag, else "not
    stated" (never guessed)."""
    from chaoskit.inventory.tags import PRODUCTION_KEYS

    if inv.lab is not None:
        return {"name": "lab", "from": "the inventory is the one chaoskit lab up wrote"}
    hosts = cluster_hosts(inv, cluster)
    found = production_targets(inv, hosts, [cluster])
    if found:
        return {"name": "production", "from": f"production tags on {', '.join(found)}"}
    tagged = [inv.clusters[cluster].tags, *(inv.hosts[h].tags for h in hosts if h in inv.hosts)]
    names = sorted({str(t[k]) for t in tagged for k in PRODUCTION_KEYS if t.get(k)})
    if names:
        return {"name": ", ".join(names), "from": "the env tags of the cluster and its hosts"}
    return {"name": "not stated", "from": "no env tag on the cluster or its hosts"}


def refuse_production(inv: Inventory, hosts: Iterable[str], clusters: Iterable[str] = (), *,
                      allow: bool) -> list[str]:
    """The production-tagged targets among these (empty if none); raises unless `allow`."""
    found = production_targets(inv, hosts, clusters)
    if found and not allow:
        raise PreflightError(f"refusing production-tagged targets ({', '.join(found)}); pass --allow-production "
                             "to drill them (recorded in the evidence)")
    return found


def cluster_hosts(inv: Inventory, cluster: str) -> list[str]:
    return [m.host for m in inv.clusters[cluster].members]


def routed_elsewhere(subnet: str, bridge: str) -> str | None:
    """Why `subnet` must not be used for the lab: a route or an address of another interface
    already covers it (None when free)."""
    net = ipaddress.ip_network(subnet, strict=False)
    res = subprocess.run(["ip", "-j", "route", "show", "table", "all"], capture_output=True, text=True, check=False)
    try:
        routes = json.loads(res.stdout or "[]")
    except ValueError:
        routes = []
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("dev") == bridge or r.get("type") in ("broadcast", "local"):
            continue
        try:
            rnet = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
        except ValueError:
            continue
        if rnet.version == net.version and rnet.overlaps(net):
            return f"route {dst} via {r.get('dev')} already covers {subnet}"
    res = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=False)
    try:
        links = json.loads(res.stdout or "[]")
    except ValueError:
        links = []
    for link in links:
        if link.get("ifname") == bridge:
            continue
        for a in link.get("addr_info", []):
            try:
                iface = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}")
            except (KeyError, ValueError):
                continue
            if iface.version == net.version and iface.network.overlaps(net):
                return f"{link.get('ifname')} has {iface} in {subnet}"
    return None
