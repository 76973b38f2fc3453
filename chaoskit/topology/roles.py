"""Which member is the writer: asked of each server (SQL) and of the HA manager. Both views are
reported; they can disagree during a failover."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.db.roles import observed, sql_roles
from chaoskit.inventory.models import Cluster, Inventory


@dataclass(frozen=True)
class MemberRole:
    member: str
    address: str
    sql_role: str  # primary | replica | down
    manager_role: str | None  # the HA manager's view: leader | replica | down | unknown; None: no manager
    manager_state: str | None
    lag_bytes: int | None
    error: str | None = None
    sync_standby: bool = False  # the HA manager names this member the synchronous standby

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def writer_roles(cluster: Cluster, inventory: Inventory) -> dict[str, str]:
    """Every member's role asked of the server, with only the one writer clients use left
    `primary` in a multi-writer cluster (Galera: every node of the quorum is writable)."""
    from chaoskit.ha.registry import is_multi_writer
    from chaoskit.topology.probe import first_writer

    cluster = observed(cluster, inventory)  # a managed service: its endpoints, as discover_roles
    roles = {m: r for m, (r, _) in sql_roles(cluster, inventory).items()}
    return first_writer(roles, [m.host for m in cluster.members]) if is_multi_writer(cluster) else roles


def discover_roles(cluster: Cluster, inventory: Inventory, manager: Any = None,
                   driver: Driver | None = None) -> list[MemberRole]:
    """Each member's role as its server says and as the manager says (a managed service: each
    endpoint's, as its server says)."""
    from chaoskit.ha.registry import manager_for

    cluster = observed(cluster, inventory)
    sql = sql_roles(cluster, inventory, driver)
    ha = manager or manager_for(cluster, inventory)
    views = {} if ha.kind == "none" else {v.member: v for v in ha.members()}
    out = []
    for member in cluster.members:
        role, error = sql[member.host]
        v = views.get(member.host)
        out.append(MemberRole(
            member=member.host, address=inventory.member_address(member), sql_role=role,
            manager_role=v.role if v else None, manager_state=v.state if v else None,
            lag_bytes=v.lag_bytes if v else None, error=error, sync_standby=bool(v and v.sync)))
    return out


def steady(roles: dict[str, str], members: int) -> bool:
    """The cluster a drill recovers to and a campaign waits for: every member answering, exactly
    one of them the writer (the roles as the clients meet them)."""
    values = list(roles.values())
    return len(values) == members and values.count("primary") == 1 and "down" not in values

