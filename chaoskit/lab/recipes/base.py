"""The lab's base, always up: dcs1 runs etcd (Patroni's DCS), a standalone PostgreSQL (cluster
`pg-single`, the single-node side of comparisons) with PgBouncer in front of it (cluster
`pg-single-pgbouncer`: the same database by a second route, for route comparisons) and serves as
the jump host."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from chaoskit.lab import daemons
from chaoskit.lab.recipes import Build, psql, service, wait_tcp
from chaoskit.lab.spec import ETCD_PORT, PG_PORT, LabHost, LabSpec, Paths

NAME = "base"
HOSTS = (LabHost("dcs1", 10, "dcs"),)  # etcd, a standalone PostgreSQL, the jump host


def build(b: Build) -> None:
    dcs = b.spec.jump_host
    b.launch(f"{dcs.name}/etcd", daemons.etcd_setup(dcs), dcs.dir / "etcd.pid")
    b.launch(f"{dcs.name}/postgres", daemons.single_postgres_setup(dcs, b.secrets["pg_superuser"]),
             dcs.dir / "pgsingle.launch.pid")
    wait_tcp(dcs.address, ETCD_PORT, b.deadline, "etcd")
    b.wait(lambda: single_health(b.spec), "the standalone PostgreSQL")
    b.launch(f"{dcs.name}/pgbouncer", daemons.pgbouncer_setup(dcs, b.secrets["pg_superuser"]),
             dcs.dir / "pgbouncer.launch.pid")
    wait_tcp(dcs.address, daemons.PGBOUNCER_PORT, b.deadline, "PgBouncer")


def health(spec: LabSpec) -> tuple[bool, str]:
    ok, why = single_health(spec)
    return pgbouncer_health(spec) if ok else (ok, why)


def single_health(spec: LabSpec) -> tuple[bool, str]:
    try:
        ok = psql(str(spec.jump_host.dir / "pgsingle-run"), PG_PORT, "SELECT 1").strip() == "1"
    except Exception as exc:
        return False, f"single postgres: {exc}"
    return ok, "ok" if ok else "single postgres: not answering"


def pgbouncer_health(spec: LabSpec) -> tuple[bool, str]:
    try:
        with socket.create_connection((spec.jump_host.address, daemons.PGBOUNCER_PORT), timeout=1):
            return True, "ok"
    except OSError as exc:
        return False, f"pgbouncer: {exc}"


def clusters(spec: LabSpec) -> dict[str, Any]:
    dcs = spec.jump_host
    single = {
        "engine": "postgres",
        "members": [{"host": dcs.name, "data_dir": str(Paths.single_pg_data(dcs)),
                     "processes": {"postgres": {"pid_file": str(Paths.single_pg_data(dcs) / "postmaster.pid"),
                                                "comm": "postgres", "start": str(Paths.launcher(dcs, "postgres"))}}}],
        "port": PG_PORT, "database": "postgres", "user": "postgres",
        "password": {"file": str(Paths.secret("pg_superuser"))},
    }
    # the same database through PgBouncer: the clients connect to it, the members are the server's
    via_pgbouncer = {**single, "dsn": f"host={dcs.address} port={daemons.PGBOUNCER_PORT} dbname=postgres"}
    return {"pg-single": single, "pg-single-pgbouncer": via_pgbouncer}


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.single_pg_data(spec.jump_host)]


def host_services(spec: LabSpec) -> dict[str, Any]:
    """etcd on dcs1: the DCS Patroni depends on, a fault target of its own."""
    dcs = spec.jump_host
    return {dcs.name: {"tags": {"component": "dcs"},
                       "processes": {"etcd": service(dcs.dir / "etcd.pid", "etcd", Paths.launcher(dcs, "etcd")),
                                     "pgbouncer": service(dcs.dir / "pgbouncer.launch.pid", "pgbouncer",
                                                          Paths.launcher(dcs, "pgbouncer"))},
                       "logs": {"etcd": str(dcs.dir / "etcd.log"),
                                "pgbouncer": str(dcs.dir / "pgbouncer" / "pgbouncer.log")}}}
