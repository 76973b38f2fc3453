"""Preflight: everything checked before anything is injected. Refuses on any failure."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from chaoskit.db.base import Driver, driver_for
from chaoskit.errors import PreflightError
from chaoskit.inventory.capabilities import probe_capabilities
from chaoskit.inventory.clock import measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import Playbook
from chaoskit.topology.patroni import get_json
from chaoskit.topology.roles import discover_roles

PG_SETTINGS = ("server_version", "synchronous_commit", "fsync", "synchronous_standby_names", "max_connections",
               "wal_level", "full_page_writes")
MY_SETTINGS = ("version", "sync_binlog", "innodb_flush_log_at_trx_commit", "max_connections", "gtid_strict_mode",
               "binlog_format", "read_only")


def run_preflight(pb: Playbook, inv: Inventory, pool: RemotePool, allow_production: bool) -> dict[str, Any]:
    cluster = inv.clusters[pb.cluster]
    hosts = sorted({m.host for m in cluster.members})
    prod = [h for h in hosts if inv.hosts[h].is_production] + (["cluster"] if cluster.tags.get("env") in
                                                                 ("prod", "production") else [])
    if prod and not allow_production:
        raise PreflightError(f"refusing production-tagged targets ({', '.join(prod)}); pass --allow-production")
    offsets = fan_out_pool(pool, measure_offset, hosts)
    caps = fan_out_pool(pool, probe_capabilities, hosts)
    for host in hosts:
        for what in (offsets[host], caps[host]):
            if isinstance(what, BaseException):
                raise PreflightError(f"{host}: {what}")
    kinds = {s.fault.kind for s in pb.steps if s.fault}
    for host in hosts:
        c = caps[host]
        if "netem" in kinds and not c.netem:  # type: ignore[union-attr]
            raise PreflightError(f"{host}: this kernel has no sch_netem ({c.netem_reason}); the playbook needs it")  # type: ignore[union-attr]
        if kinds & {"partition", "loss"} and not c.iptables:  # type: ignore[union-attr]
            raise PreflightError(f"{host}: iptables is missing; the playbook's network faults need it")
    roles = discover_roles(cluster, inv)
    primaries = [r.member for r in roles if r.sql_role == "primary"]
    down = [f"{r.member} ({r.error})" for r in roles if r.sql_role == "down"]
    if len(primaries) != 1 or down:
        raise PreflightError(f"cluster {cluster.name} is not healthy: primaries={primaries or 'none'}, "
                             f"down={down or 'none'}")
    settings = read_settings(cluster, inv)
    max_conn = int(settings.get("max_connections", 0) or 0)
    needed = pb.load.workers + len(cluster.members) + 2
    if max_conn and needed > max_conn:
        raise PreflightError(f"max_connections={max_conn} is below what the drill needs ({needed})")
    lagging = [f"{r.member}={r.lag_bytes}" for r in roles if (r.lag_bytes or 0) > 16 * 1024 * 1024]
    if lagging:
        raise PreflightError(f"replication lag too high before the drill: {', '.join(lagging)}")
    return {
        "clock_offsets": {h: asdict(o) for h, o in offsets.items()},  # type: ignore[arg-type]
        "capabilities": {h: asdict(c) for h, c in caps.items()},  # type: ignore[arg-type]
        "roles_before": [asdict(r) for r in roles], "primary_before": primaries[0],
        "server_settings": settings, "ha": read_ha(cluster, inv),
    }


def read_settings(cluster: Cluster, inv: Inventory) -> dict[str, Any]:
    driver = driver_for(cluster, inv)
    conn = driver.connect_writer()
    try:
        if driver.family == "postgres":
            return {name: driver.query(conn, f"SHOW {name}")[0][0] for name in PG_SETTINGS}
        if driver.family == "mysql":
            return {name: driver.query(conn, f"SELECT @@global.{name}")[0][0] for name in MY_SETTINGS}
        return {"version": driver.server_version(conn)}
    finally:
        Driver.close_quietly(conn)


def read_ha(cluster: Cluster, inv: Inventory) -> dict[str, Any]:
    if cluster.patroni is None or cluster.role_probe != "patroni":
        return {"manager": None}
    api = cluster.patroni
    for m in cluster.members:
        base = f"{api.scheme}://{inv.member_address(m)}:{api.port}"
        config = get_json(f"{base}/config", timeout=2, verify=api.verify)
        status = get_json(f"{base}/patroni", timeout=2, verify=api.verify)
        if isinstance(config, dict):
            keep = ("ttl", "loop_wait", "retry_timeout", "maximum_lag_on_failover", "synchronous_mode",
                    "synchronous_mode_strict", "master_start_timeout", "primary_start_timeout")
            return {"manager": "patroni", "version": (status or {}).get("patroni", {}).get("version")
                    if isinstance(status, dict) else None,
                    "config": {k: config.get(k) for k in keep if k in config},
                    "use_pg_rewind": config.get("postgresql", {}).get("use_pg_rewind")}
    return {"manager": "patroni", "error": "REST API not reachable"}
