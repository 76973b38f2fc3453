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
