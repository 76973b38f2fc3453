"""The lab's base, always up: dcs1 runs etcd (Patroni's DCS), a standalone PostgreSQL (cluster
`pg-single`, the single-node side of comparisons) and serves as the jump host."""

from __future__ import annotations

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
    b.wait(lambda: health(b.spec), "the standalone PostgreSQL")


def health(spec: LabSpec) -> tuple[bool, str]:
    try:
        ok = psql(str(spec.jump_host.dir / "pgsingle-run"), PG_PORT, "SELECT 1").strip() == "1"
    except Exception as exc:
        return False, f"single postgres: {exc}"
    return ok, "ok" if ok else "single postgres: not answering"


def clusters(spec: LabSpec) -> dict[str, Any]:
    dcs = spec.jump_host
    return {"pg-single": {
        "engine": "postgres",
        "members": [{"host": dcs.name, "data_dir": str(Paths.single_pg_data(dcs)),
                     "processes": {"postgres": {"pid_file": str(Paths.single_pg_data(dcs) / "postmaster.pid"),
                                                "comm": "postgres", "start": str(Paths.launcher(dcs, "postgres"))}}}],
        "port": PG_PORT, "database": "postgres", "user": "postgres",
        "password": {"file": str(Paths.secret("pg_superuser"))},
    }}


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.single_pg_data(spec.jump_host)]


def host_services(spec: LabSpec) -> dict[str, Any]:
    """etcd on dcs1: the DCS Patroni depends on, a fault target of its own."""
    dcs = spec.jump_host
    return {dcs.name: {"tags": {"component": "dcs"},
                       "processes": {"etcd": service(dcs.dir / "etcd.pid", "etcd", Paths.launcher(dcs, "etcd"))},
                       "logs": {"etcd": str(dcs.dir / "etcd.log")}}}
