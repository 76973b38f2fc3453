"""Resolve a fault target to hosts, from live topology at staging time.

`pg1` -> that host (a cluster member, or any inventory host: etcd, a proxy, an HA monitor).
`role:primary` / `role:replica` / `role:sync_standby` / `role:any` -> members of the cluster with
that role right now; `tag:KEY=VALUE` -> the inventory hosts carrying that tag (a fixed fact of the
inventory, never a live role). Then a count: `@one` (the first in inventory order,
deterministic; a role's default), `@all`, `@minority` (a tag target always writes it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaoskit.errors import InputError
from chaoskit.faults.spec import ALL_HOSTS, CLIENT, CONTROL, STEP_TARGET, TAG_TARGET, FaultBase
from chaoskit.ha.registry import is_multi_writer
from chaoskit.inventory.models import Cluster, Inventory, Member
from chaoskit.topology.probe import first_writer

RoleView = dict[str, str]  # member host -> primary | replica | down (and sync_standby flags below)


def split_target(target: str) -> tuple[str, str]:
    base, _, count = target.partition("@")
    return base, count or "one"


def live_target(base: str) -> bool:
    """A target known only at the instant: a live role, or the host an earlier step's fault hit."""
    return base.startswith("role:") or STEP_TARGET.match(base) is not None


def validate_target(spec: FaultBase, inventory: Inventory, source: str = "command line",
                    field: str = "--target") -> None:
    """Static checks against the inventory (no host touched): names exist, the cluster is known."""
    base, _ = split_target(spec.target)
    if base == CLIENT:
        return
    if spec.cluster is not None and spec.cluster not in inventory.clusters:
        raise InputError(f"unknown cluster {spec.cluster!r}; inventory has: {', '.join(sorted(inventory.clusters))}",
                         source=source, field="--cluster" if source == "command line" else "cluster")
    if live_target(base):
        if spec.cluster is None:
            raise InputError("a role target needs a cluster", source=source, field=field)
    elif base.startswith("tag:"):
        tagged_hosts(spec.target, inventory, source, field)
    elif base not in inventory.hosts:
        raise InputError(f"unknown host {base!r}; inventory has: {', '.join(sorted(inventory.hosts))}",
                         source=source, field=field)
    if CONTROL in spec.peers_wanted:
        control_peer(spec, inventory, source)
    for peer in spec.peers_wanted:
        if peer == CONTROL:
            continue
        if peer.startswith("role:") and spec.cluster is None:
            raise InputError("a role peer needs a cluster", source=source, field="peers")
        if peer.startswith("tag:"):
            tagged_hosts(peer, inventory, source, "peers")
        elif peer != ALL_HOSTS and not peer.startswith("role:") and peer not in inventory.hosts:
            raise InputError(f"unknown peer host {peer!r}", source=source, field="peers")


def control_peer(spec: FaultBase, inventory: Inventory, source: str) -> None:
    """`control` as a peer names the control node by the address a host sees chaoskit's SSH come
    from: refused where that word could mean an inventory host, and on a host reached through a
    jump host (its SSH comes from the jump host, whose other traffic the cut would take too)."""
    if CONTROL in inventory.hosts:
        raise InputError("peer control is ambiguous: the inventory has a host named control (the word means "
                         "the control node)", source=source, field="peers")
    for host in named_hosts(spec.target, inventory) or candidate_hosts(spec, inventory):
        control_known_on(host, inventory, source)


def control_known_on(host: str, inventory: Inventory, source: str) -> None:
    """Refused: `control` on a host reached through a jump host (its SSH comes from the jump host)."""
    if inventory.hosts[host].jump:
        raise InputError(f"peer control on {host}, which is reached through a jump host: its SSH comes from "
                         f"the jump host, so the control node's own address is not known there",
                         source=source, field="peers")


def candidate_hosts(spec: FaultBase, inventory: Inventory) -> list[str]:
    """Every host a live target could land on: its cluster's members (all hosts without one)."""
    if spec.cluster is not None and spec.cluster in inventory.clusters:
        return [m.host for m in inventory.clusters[spec.cluster].members]
    return list(inventory.hosts)


def tagged_hosts(target: str, inventory: Inventory, source: str = "command line", field: str = "--target") -> list[str]:
    """The hosts a `tag:KEY=VALUE@count` target names, in inventory order (none: refused)."""
    m = TAG_TARGET.match(target)
    if m is None:
        raise InputError(f"not a tag target: {target[:60]!r}", source=source, field=field)
    key, value, count = m.groups()
    hosts = inventory.hosts_tagged(key, value)
    if not hosts:
        raise InputError(f"no host of the inventory carries tag {key}={value}", source=source, field=field)
    return _counted(hosts, count, len(hosts))


def named_hosts(target: str, inventory: Inventory) -> list[str]:
    """The hosts a target names before the run: itself for a host, the tagged hosts for a tag
    target; none for a live role or the client link (known only at the instant)."""
    base, _ = split_target(target)
    if base == CLIENT or live_target(base):
        return []
    if base.startswith("tag:"):
        return tagged_hosts(target, inventory, source=inventory.source, field="target")
    return [base]


def fault_hosts(steps: tuple[Any, ...], inventory: Inventory) -> list[str]:
    """The hosts a playbook's faults name before the run (host and tag targets), in step order,
    each once."""
    return list(dict.fromkeys(h for step in steps for spec in step.specs
                              for h in named_hosts(spec.target, inventory)))


def _counted(chosen: list[str], count: str, of: int) -> list[str]:
    if count == "one":
        return chosen[:1]
    if count == "minority":
        return chosen[: max(1, (of - 1) // 2)]
    return chosen


def members_with_role(role: str, roles: RoleView, sync: set[str] | None = None) -> list[str]:
    if role == "any":
        return [m for m, r in roles.items() if r != "down"]
    if role == "sync_standby":
        return [m for m in roles if m in (sync or set())]
    return [m for m, r in roles.items() if r == role]


def resolve_hosts(target: str, cluster: Cluster | None, roles: Callable[[], tuple[RoleView, set[str]]],
                  inventory: Inventory | None = None) -> list[str]:
    """Hosts for a target; `roles()` gives the live view (member -> role, sync standbys) in
    inventory order, asked only for a role target; a tag target needs the inventory."""
    base, count = split_target(target)
    if base.startswith("tag:"):
        if inventory is None:
            raise InputError("a tag target needs the inventory", source="topology", field="target")
        return tagged_hosts(target, inventory, source=inventory.source, field="target")
    if STEP_TARGET.match(base):
        raise InputError(f"{base} names the host of a playbook step's fault: a target in a playbook only",
                         source="command line", field="--target")
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
    return _counted(chosen, count, len(cluster.members))


def member_of(cluster: Cluster | None, host: str) -> Member | None:
    if cluster is None:
        return None
    return next((m for m in cluster.members if m.host == host), None)
