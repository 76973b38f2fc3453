"""Resolve a fault target to hosts, from live topology at staging time.

`pg1` -> that host. `role:primary` / `role:replica` / `role:sync_standby` / `role:any` -> members
of the cluster with that role right now, then a count: `@one` (default: the first in inventory
order, deterministic), `@all`, `@minority`.
"""

from __future__ import annotations

from collections.abc import Callable

from chaoskit.errors import InputError
from chaoskit.faults.spec import ALL_HOSTS, CLIENT, FaultBase
from chaoskit.ha.registry import is_multi_writer
from chaoskit.inventory.models import Cluster, Inventory, Member
from chaoskit.topology.probe import first_writer

RoleView = dict[str, str]  # member host -> primary | replica | down (and sync_standby flags below)


def split_target(target: str) -> tuple[str, str]:
    base, _, count = target.partition("@")
    return base, count or "one"


def validate_target(spec: FaultBase, inventory: Inventory, source: str = "command line",
                    field: str = "--target") -> None:
    """Static checks against the inventory (no host touched): names exist, the cluster is known."""
    base, _ = split_target(spec.target)
    if base == CLIENT:
        return
    if spec.cluster is not None and spec.cluster not in inventory.clusters:
        raise InputError(f"unknown cluster {spec.cluster!r}; inventory has: {', '.join(sorted(inventory.clusters))}",
                         source=source, field="--cluster" if source == "command line" else "cluster")
    if base.startswith("role:"):
        if spec.cluster is None:
            raise InputError("a role target needs a cluster", source=source, field=field)
    elif base not in inventory.hosts:
        raise InputError(f"unknown host {base!r}; inventory has: {', '.join(sorted(inventory.hosts))}",
                         source=source, field=field)
    for peer in spec.peers_wanted:
        if peer.startswith("role:") and spec.cluster is None:
            raise InputError("a role peer needs a cluster", source=source, field="peers")
        if peer != ALL_HOSTS and not peer.startswith("role:") and peer not in inventory.hosts:
            raise InputError(f"unknown peer host {peer!r}", source=source, field="peers")


def members_with_role(role: str, roles: RoleView, sync: set[str] | None = None) -> list[str]:
    if role == "any":
        return [m for m, r in roles.items() if r != "down"]
    if role == "sync_standby":
        return [m for m in roles if m in (sync or set())]
    return [m for m, r in roles.items() if r == role]


def resolve_hosts(target: str, cluster: Cluster | None, roles: Callable[[], tuple[RoleView, set[str]]]) -> list[str]:
    """Hosts for a target; `roles()` gives the live view (member -> role, sync standbys) in
    inventory order, asked only for a role target."""
    base, count = split_target(target)
    if not base.startswith("role:"):
        return [base]
    assert cluster is not None
    view, sync = roles()
    order = [m.host for m in cluster.members]
    if is_multi_writer(cluster):  # role:primary is the one writer clients use, never every node
        view = first_writer(view, order)
    chosen = sorted(members_with_role(base[5:], view, sync), key=lambda h: order.index(h) if h in order else 99)
    if not chosen:
        seen = ", ".join(f"{m}={r}" for m, r in view.items())
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
