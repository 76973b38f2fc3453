"""Resolve a fault target to hosts, from live topology at injection time.

`pg1` -> that host. `role:primary` / `role:replica` / `role:sync_standby` / `role:any` -> members
of the cluster with that role right now (SQL view; sync_standby from Patroni), then a count:
`@one` (default: the first in inventory order, deterministic), `@all`, `@minority`.
"""

from __future__ import annotations

from chaoskit.errors import InputError
from chaoskit.faults.models import PROXY_KINDS, FaultSpec
from chaoskit.inventory.models import Cluster, Inventory, Member
from chaoskit.topology.roles import MemberRole, discover_roles

ROLES = {"primary", "replica", "sync_standby", "any"}
ALL_HOSTS = "all-hosts"  # as a peer: every other host of the inventory (not the controller)
COUNTS = {"one", "all", "minority"}
CLIENT = "client"  # as a target: the load's own link to the database, through relays on the control node


def split_target(target: str) -> tuple[str, str]:
    base, _, count = target.partition("@")
    return base, count or "one"


def validate_target(spec: FaultSpec, inventory: Inventory, source: str = "command line",
                    field: str = "--target") -> None:
    """Static checks (no host touched): names exist, roles and counts are known."""
    base, count = split_target(spec.target)
    if base == CLIENT:
        if spec.kind not in PROXY_KINDS:
            raise InputError(f"target client is the load's own link: it takes latency or proxy faults, not "
                             f"{spec.kind}", source=source, field=field)
        return
    if count not in COUNTS:
        raise InputError(f"unknown count {count!r} (expected one, all or minority)", source=source, field=field)
    if spec.cluster is not None and spec.cluster not in inventory.clusters:
        raise InputError(f"unknown cluster {spec.cluster!r}; inventory has: {', '.join(sorted(inventory.clusters))}",
                         source=source, field="--cluster" if source == "command line" else "cluster")
    if base.startswith("role:"):
        role = base[5:]
        if role not in ROLES:
            raise InputError(f"unknown role {role!r} (expected {', '.join(sorted(ROLES))})", source=source,
                             field=field)
    elif base not in inventory.hosts:
        raise InputError(f"unknown host {base!r}; inventory has: {', '.join(sorted(inventory.hosts))}",
                         source=source, field=field)
    for peer in spec.peers:
        if peer != ALL_HOSTS and not peer.startswith("role:") and peer not in inventory.hosts:
            raise InputError(f"unknown peer host {peer!r}", source=source, field="--peers")


def _members_with_role(role: str, roles: list[MemberRole]) -> list[str]:
    if role == "any":
        return [r.member for r in roles if r.sql_role != "down"]
    if role == "sync_standby":
        return [r.member for r in roles if r.sync_standby]
    return [r.member for r in roles if r.sql_role == role]


def resolve_hosts(target: str, cluster: Cluster | None, inventory: Inventory,
                  roles: list[MemberRole] | None = None) -> list[str]:
    base, count = split_target(target)
    if not base.startswith("role:"):
        return [base]
    assert cluster is not None
    roles = roles if roles is not None else discover_roles(cluster, inventory)
    chosen = _members_with_role(base[5:], roles)
    if not chosen:
        seen = ", ".join(f"{r.member}={r.sql_role}" for r in roles)
        raise InputError(f"no member of cluster {cluster.name} has role {base[5:]} now ({seen})",
                         source="topology", field="target")
    if count == "one":
        return chosen[:1]
    if count == "minority":
        return chosen[: max(1, (len(cluster.members) - 1) // 2)]
    return chosen


def member_of(cluster: Cluster | None, host: str) -> Member | None:
    if cluster is None:
        return None
    return next((m for m in cluster.members if m.host == host), None)
