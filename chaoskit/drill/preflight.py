"""Preflight: everything checked before anything is injected. Refuses on any failure.

Production guard for every host the drill may touch, clock offsets and capabilities of those
hosts against what every step's fault kind needs (`faults.registry`), the HA manager's health,
exactly one writer and every member answering, the durability settings, connection headroom,
replication lag, that a fault meant to cause a failover outlasts the manager's detection
bound (else the drill would measure nothing), and, for a drill with backup or restore steps, the
backup tool on its hosts and a backup to restore from (`chaoskit.drill.dr.backup_refusal`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.db.roles import observed
from chaoskit.drill.dr import backup_refusal
from chaoskit.errors import PreflightError
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.registry import kind_of
from chaoskit.faults.spec import CLIENT
from chaoskit.faults.targets import live_target, named_hosts, split_target
from chaoskit.guard import cluster_hosts, refuse_production
from chaoskit.ha.base import HAManager
from chaoskit.inventory.capabilities import probe_capabilities
from chaoskit.inventory.clock import measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import Playbook, Where
from chaoskit.topology.roles import discover_roles
from chaoskit.workload.engine import engine

PG_SETTINGS = ("server_version", "synchronous_commit", "fsync", "synchronous_standby_names", "max_connections",
               "wal_level", "full_page_writes")
MY_SETTINGS = ("version", "sync_binlog", "innodb_flush_log_at_trx_commit", "max_connections", "gtid_strict_mode",
               "binlog_format", "read_only",
               # semi-synchronous replication, MariaDB's and MySQL's (< 8.0.26) names, then MySQL's
               # newer ones; a server without the plugin has none of them (null in the evidence)
               "rpl_semi_sync_master_enabled", "rpl_semi_sync_slave_enabled", "rpl_semi_sync_source_enabled",
               "rpl_semi_sync_replica_enabled", "rpl_semi_sync_master_wait_point", "rpl_semi_sync_master_timeout")


MANAGED_PREFLIGHT = ("managed service: no host checks (no SSH, clock offsets, capabilities, host logs or host "
                     "metrics but this machine's); checked over SQL only: each of its {n} endpoint(s) answering, "
                     "exactly one writable, its settings and connection headroom")


def touched_hosts(pb: Playbook, inv: Inventory) -> list[str]:
    """Every host a step may change: the cluster's members and any host a step names (by name or
    by tag: the production guard must see the etcd host a `tag:` target stops)."""
    hosts = set(cluster_hosts(inv, pb.cluster))
    for step in pb.steps:
        for fault in step.specs:
            base = split_target(fault.target)[0]
            hosts.update(named_hosts(fault.target, inv))
            if live_target(base) and fault.cluster:
                hosts.update(cluster_hosts(inv, fault.cluster))
    return sorted(hosts)


def where_hosts(name: str, where: Where, loaders: int | None, inv: Inventory, first_only: bool = False,
                nodes: list[Any] | None = None) -> tuple[str, ...]:
    """The loader hosts clients placed by `where` (and `loaders: N`) run on, in inventory order: by
    zone or name from the inventory, or (labels, resources) by the Ray cluster's live nodes
    (`nodes`, else asked now); none matching, or fewer than N, is refused naming what the hosts
    have. `first_only`: a tool group's one tool."""
    n = 1 if first_only else loaders
    if not where.live:
        return tuple(where.hosts(inv)[:n])
    from chaoskit.workload.ray_plane import matching_hosts

    nodes = nodes if nodes is not None else _ray_nodes(name, where, inv)
    matched, seen = matching_hosts(nodes, inv, where.labels, where.resources)
    if not matched:
        raise PreflightError(f"{name}: no live Ray node of a loader host matches {where.said()}; the loader hosts: "
                             f"{seen}")
    if loaders is not None and loaders > len(matched):
        raise PreflightError(f"{name}: loaders: {loaders}, and {len(matched)} loader host(s) match {where.said()}: "
                             f"{', '.join(matched)}")
    return tuple(matched[:n])


def _ray_nodes(name: str, where: Where, inv: Inventory) -> list[Any]:
    """The Ray cluster's nodes, asked now, for a live `where` of `name`."""
    from chaoskit.workload.ray_plane import RayUnavailable, cluster_nodes

    assert inv.loaders is not None and inv.loaders.ray is not None  # validated
    try:
        return cluster_nodes(inv.loaders.ray)
    except RayUnavailable as exc:
        raise PreflightError(f"{name}: where: {where.said()} is matched on the Ray cluster, and {exc}") from None


def placement(pb: Playbook, inv: Inventory) -> dict[str, tuple[str, ...]]:
    """The loader hosts each group with `where:` runs on (`where_hosts`; the Ray cluster asked once)."""
    out: dict[str, tuple[str, ...]] = {}
    nodes = None
    for g in pb.load.groups or ():
        if g.where is None:
            continue
        name = f"group {g.group_name}"
        if g.where.live and nodes is None:
            nodes = _ray_nodes(name, g.where, inv)
        out[g.group_name] = where_hosts(name, g.where, g.loaders, inv, first_only=engine(g.tool).external(),
                                        nodes=nodes)
    return out


def loader_hosts_ready(hosts: list[str], inv: Inventory, pool: RemotePool) -> None:
    """Each loader host runs this chaoskit (and the pinned Ray, through Ray) and its clock can be
    read: refused before anything is touched (their agents would be refused at the load's start)."""
    from chaoskit import __version__
    from chaoskit.workload.ray_plane import RAY_VERSION
    from chaoskit.workload.ssh_loader import host_status

    if not hosts or inv.loaders is None:
        return
    python = inv.loaders.python
    ray = RAY_VERSION if inv.loaders.ray is not None else None  # every node runs the Ray chaoskit pins
    statuses = fan_out_pool(pool, lambda remote: host_status(remote, python), hosts)
    for host in hosts:
        status = statuses[host]
        why = f"loader host {host}: {status}" if isinstance(status, BaseException) else \
            status.refusal(__version__, ray)
        if why:
            raise PreflightError(why)


def _loaders_ready(pb: Playbook, inv: Inventory, pool: RemotePool) -> dict[str, tuple[str, ...]]:
    """The loader hosts the groups' `where:` names are ready (`loader_hosts_ready`), and a tool
    group's host has its tool; the placement."""
    from chaoskit.playbook.models import tool_settings
    from chaoskit.workload.ssh_loader import program_refusal

    placed_by_group = placement(pb, inv)
    loader_hosts_ready(sorted({h for hosts in placed_by_group.values() for h in hosts}), inv, pool)
    for g in pb.load.groups or ():  # a tool group's tool on the host it runs on
        if g.where is not None and engine(g.tool).external():
            for host in placed_by_group[g.group_name]:
                why = program_refusal(pool.get(host), engine(g.tool).programs(tool_settings(g, g.tool)), g.group_name)
                if why:
                    raise PreflightError(why)
    return placed_by_group


def run_preflight(pb: Playbook, inv: Inventory, pool: RemotePool, ha: HAManager, fm: FaultManager,
                  allow_production: bool, driver: Driver | None = None) -> dict[str, Any]:
    cluster = observed(inv.clusters[pb.cluster], inv)  # a managed service: its endpoints stand in for members
    driver = driver or driver_for(cluster, inv)
    hosts = touched_hosts(pb, inv)  # a managed service has none: its steps are its client link only
    production = refuse_production(inv, hosts, [pb.cluster], allow=allow_production)
    placed = _loaders_ready(pb, inv, pool)
    offsets = fan_out_pool(pool, measure_offset, hosts)
    caps = fan_out_pool(pool, probe_capabilities, hosts)
    for host in hosts:
        offset, cap = offsets[host], caps[host]
        if isinstance(offset, BaseException):
            raise PreflightError(f"{host}: {offset}")
        if isinstance(cap, BaseException):
            raise PreflightError(f"{host}: {cap}")
        fm.measured(host, offset, cap)
    for i, step in enumerate(pb.steps):
        for fault in step.specs:
            base = split_target(fault.target)[0]
            if base == CLIENT:
                continue
            spec = fault if fault.cluster else fault.replace(cluster=pb.cluster)
            for host in named_hosts(spec.target, inv) or cluster_hosts(inv, spec.cluster or pb.cluster):
                why = kind_of(fault).refusal(host, f"steps[{i}] ({fault.kind})", caps[host])  # type: ignore[arg-type]
                if why:
                    raise PreflightError(why)
                why = fm.host_refusal(spec, host)
                if why:
                    raise PreflightError(f"steps[{i}] ({fault.kind}) on {why}")
    why = backup_refusal(pb, inv, pool.get, fm.offset, time.time)
    if why:
        raise PreflightError(why)
    ok, why = ha.health()
    if not ok:
        raise PreflightError(f"cluster {cluster.name}: the HA manager ({ha.kind}) reports it unhealthy: {why}")
    roles = discover_roles(cluster, inv, ha, driver)
    primaries = [r.member for r in roles if r.sql_role == "primary"]
    if ha.multi_writer:  # every member takes writes; the writer the clients use is the manager's leader
        primaries = [r.member for r in roles if r.sql_role == "primary" and r.manager_role == "leader"]
    down = [f"{r.member} ({r.error})" for r in roles if r.sql_role == "down"]
    if len(primaries) != 1 or down:
        raise PreflightError(f"cluster {cluster.name} is not healthy: primaries={primaries or 'none'}, "
                             f"down={down or 'none'}")
    settings = read_settings(cluster, inv, driver)
    max_conn = int(settings.get("max_connections", 0) or 0)
    needed = pb.load.workers + len(cluster.members) + 4
    if max_conn and needed > max_conn:
        raise PreflightError(f"max_connections={max_conn} is below what the drill needs ({needed})")
    lagging = [f"{r.member}={r.lag_bytes}" for r in roles if (r.lag_bytes or 0) > 16 * 1024 * 1024]
    if lagging:
        raise PreflightError(f"replication lag too high before the drill: {', '.join(lagging)}")
    bound = ha.detection_bound_s()
    warnings = [MANAGED_PREFLIGHT.format(n=len(cluster.members))] if cluster.managed else []
    for i, step in enumerate(pb.steps):
        if step.expect == "failover" and step.duration is not None and bound and step.duration <= bound:
            why = (f"steps[{i}] expects a failover but lasts {step.duration:g}s, and {ha.kind} notices a "
                   f"failed leader only after {bound:g}s with these settings: the drill would measure no failover")
            if step.short_fault == "refuse":
                raise PreflightError(why + " (lengthen the fault, set expect: any, or short_fault: warn)")
            warnings.append(why)
    return {
        "clock_offsets": {h: asdict(o) for h, o in offsets.items()},  # type: ignore[arg-type]
        "capabilities": {h: c.to_dict() for h, c in caps.items()},  # type: ignore[union-attr]
        "roles_before": [r.to_dict() for r in roles], "primary_before": primaries[0],
        "server_settings": settings, "ha": describe_ha(ha), "detection_bound_s": bound,
        "production_targets": production, "allow_production": allow_production, "warnings": warnings,
        # the loader hosts each placed group runs on (labels and resources: as the Ray cluster had them now)
        **({"placement": {g: list(hosts) for g, hosts in placed.items()}} if placed else {}),
    }


def describe_ha(ha: HAManager) -> dict[str, Any]:
    try:
        return ha.describe()
    except Exception as exc:  # the evidence says why the manager could not be described
        return {"manager": ha.kind, "error": str(exc)}


def read_settings(cluster: Cluster, inv: Inventory, driver: Driver | None = None,
                  names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The writer's settings that matter for the evidence (or `names`, identifiers validated by the
    caller); a setting the server does not have is None."""
    driver = driver or driver_for(cluster, inv)
    conn = driver.connect_writer()
    try:
        if driver.family == "postgres":
            return {name: _setting(driver, conn, f"SHOW {name}") for name in names or PG_SETTINGS}
        if driver.family == "mysql":
            return {name: _setting(driver, conn, f"SELECT @@global.{name}") for name in names or MY_SETTINGS}
        return {"version": driver.server_version(conn)}
    finally:
        Driver.close_quietly(conn)


def _setting(driver: Driver, conn: Any, sql: str) -> Any:
    try:
        return driver.query(conn, sql)[0][0]
    except Exception as exc:  # unknown variable / parameter: the server has no such setting
        text = str(exc).lower()
        if "unknown system variable" in text or "unrecognized configuration parameter" in text:
            return None  # (connections are autocommit: the failed statement leaves the session usable)
        raise
