"""Every member's role asked of the server itself (SQL: primary, replica, or down with why): the
view any HA manager's answer is compared with, and the whole view where there is no manager."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Inventory, Member


def sql_role(driver: Driver, member: Member) -> tuple[str, str | None]:
    conn = None
    try:
        conn = driver.connect_member(member)
        return driver.role(conn), None
    except Exception as exc:  # a member that cannot answer is reported down, with why
        return "down", driver.failure(exc)
    finally:
        Driver.close_quietly(conn)


def sql_roles(cluster: Cluster, inventory: Inventory,
              driver: Driver | None = None) -> dict[str, tuple[str, str | None]]:
    """Every member's writability asked of the server itself, in parallel."""
    driver = (driver or driver_for(cluster, inventory)).tuned(connect_timeout=2.0, op_timeout=3.0)
    driver.password()  # an unresolvable reference is the cluster's error, not every member's
    with ThreadPoolExecutor(max_workers=max(1, len(cluster.members))) as ex:
        found = list(ex.map(lambda m: sql_role(driver, m), cluster.members))
    return {m.host: r for m, r in zip(cluster.members, found, strict=True)}


def endpoint_label(host: str, port: int) -> str:
    """An endpoint as clients dial it, `host:port` (`[v6]:port`): a managed service's watched
    "member" is named so in the probe, the timeline and the report."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def observed(cluster: Cluster, inventory: Inventory) -> Cluster:
    """The cluster whose members a drill watches and recovers to. A cluster with hosts is itself. A
    managed service has no members (no host to SSH into), so each of its endpoints (the MySQL
    `endpoints`, the hosts of the PostgreSQL `dsn`) stands in for one: a member reached at that
    address and port and nowhere else, with no processes, data or logs, named by `endpoint_label`.
    Its role is what the server behind the endpoint answers over SQL, which is all an application
    can know of a service that fails over by itself. The stand-ins are built without the
    inventory's host-name check (their names are addresses, never hosts), so nothing that goes to a
    host by name can reach them: a managed cluster's steps are its client link only (validate)."""
    if not cluster.managed:
        return cluster
    members = tuple(Member.model_construct(host=endpoint_label(h, p), db_address=h, db_port=p)
                    for h, p in driver_for(cluster, inventory).endpoints())
    return cluster.model_copy(update={"members": members})
