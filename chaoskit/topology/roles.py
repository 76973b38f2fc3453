"""Which member is the writer: asked of each server (SQL) and, where there is one, of the HA
manager (Patroni REST). Both views are reported; they can disagree during a failover."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from chaoskit.db.base import Driver, driver_for
from chaoskit.inventory.models import Cluster, Inventory, Member
from chaoskit.topology.patroni import fetch_cluster, normalise_patroni_role


@dataclass(frozen=True)
class MemberRole:
    member: str
    address: str
    sql_role: str  # primary | replica | down
    manager_role: str | None  # Patroni: leader | replica | ...; None where no manager API
    manager_state: str | None
    lag_bytes: int | None
    error: str | None = None
    sync_standby: bool = False  # the HA manager names this member the synchronous standby


def sql_role(driver: Driver, member: Member) -> tuple[str, str | None]:
    conn = None
    try:
        conn = driver.connect_member(member)
        return ("primary" if driver.is_writable(conn) else "replica"), None
    except Exception as exc:  # a member that cannot answer is reported down, with why
        return "down", f"{driver.classify(exc)}: {str(exc).strip().splitlines()[0] if str(exc) else exc!r}"
    finally:
        Driver.close_quietly(conn)


def patroni_view(cluster: Cluster, inventory: Inventory) -> dict[str, dict]:
    api = cluster.patroni
    if api is None:
        return {}
    for member in cluster.members:
        url = f"{api.scheme}://{inventory.member_address(member)}:{api.port}"
        data = fetch_cluster(url, timeout=1.0, verify=api.verify)
        if data is not None:
            return {m.get("name"): m for m in data.get("members", [])}
    return {}


def discover_roles(cluster: Cluster, inventory: Inventory) -> list[MemberRole]:
    driver = driver_for(cluster, inventory, connect_timeout=2.0, op_timeout=3.0)
    driver.password()  # an unresolvable reference is the cluster's error, not every member's
    with ThreadPoolExecutor(max_workers=max(1, len(cluster.members))) as ex:
        sql = list(ex.map(lambda m: sql_role(driver, m), cluster.members))
    manager = patroni_view(cluster, inventory) if cluster.role_probe == "patroni" else {}
    out = []
    for member, (role, error) in zip(cluster.members, sql, strict=True):
        m = manager.get(member.host, {})
        lag = m.get("lag")
        out.append(MemberRole(
            member=member.host, address=inventory.member_address(member), sql_role=role,
            manager_role=normalise_patroni_role(m["role"]) if "role" in m else None,
            manager_state=m.get("state"), lag_bytes=lag if isinstance(lag, int) else None, error=error,
            sync_standby=str(m.get("role", "")).lower() == "sync_standby"))
    return out
