"""A MariaDB 10.11 GTID primary/replica pair on my1/my2 (no HA manager), reached through dcs1 as a
jump host."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.lab import daemons
from chaoskit.lab.recipes import Build
from chaoskit.lab.spec import MARIADB_DATABASE, MARIADB_PORT, MARIADB_USER, LabHost, LabSpec, Paths

NAME = "mariadb"
DEFAULT = True
HOSTS = (LabHost("my1", 21, "mariadb", NAME, jump=True), LabHost("my2", 22, "mariadb", NAME, jump=True))


def hosts(spec: LabSpec) -> list[LabHost]:
    return spec.by_role("mariadb")


def sql(host: LabHost, statement: str, vertical: bool = False) -> str:
    fmt = ["-E"] if vertical else ["-N", "-B"]
    res = subprocess.run(["mariadb", f"--socket={Paths.mariadb_socket(host)}", "-uroot", *fmt, "-e", statement],
                         capture_output=True, text=True, timeout=20, check=False)
    if res.returncode != 0:
        raise LabError(f"MariaDB on {host.name}: {res.stderr.strip()}")
    return res.stdout


def build(b: Build) -> None:
    nodes = hosts(b.spec)
    daemons.mariadb_setup(nodes[0], 1)
    for i, host in enumerate(nodes[1:], start=2):  # a copy of the first datadir: concurrent bootstraps raced
        daemons.mariadb_setup(host, i, template=nodes[0].dir / "mysql")
    for host in nodes:
        b.launch(f"{host.name}/mariadb", Paths.launcher(host, "mariadb"), host.dir / "mariadb.launch.pid")
    configure(nodes, b.secrets, b.deadline)
    b.wait(lambda: health(b.spec), "the MariaDB pair")


def configure(nodes: list[LabHost], pw: dict[str, str], deadline: float, *, gtid: bool = True,
              extra_users: tuple[tuple[str, str, str], ...] = ()) -> None:
    """Users on every node (not replicated), then the replicas following the first node: by GTID,
    or (`gtid=False`, as MHA 0.58 works with MariaDB) by binlog file and position. chaoskit's user
    is an application's: everything on its own database, reading replication state, and no SUPER
    or READ_ONLY ADMIN (those write through read_only, which would hide a read-only old primary
    still taking writes)."""
    primary, replicas = nodes[0], nodes[1:]
    subnet = primary.address.rsplit(".", 1)[0] + ".%"
    users = ((MARIADB_USER, pw["mariadb_chaoskit"], f"ALL PRIVILEGES ON {MARIADB_DATABASE}.*"),
             (MARIADB_USER, pw["mariadb_chaoskit"], "REPLICATION CLIENT, SLAVE MONITOR ON *.*"),
             ("repl", pw["mariadb_repl"], "REPLICATION SLAVE ON *.*"), *extra_users)
    for host in nodes:
        wait_sql(host, deadline)
        created: set[str] = set()
        statements = []
        for name, secret, grant in users:
            if name not in created:
                statements.append(f"CREATE OR REPLACE USER '{name}'@'{subnet}' IDENTIFIED BY '{secret}';")
                created.add(name)
            statements.append(f"GRANT {grant} TO '{name}'@'{subnet}';")
        sql(host, "SET sql_log_bin=0;" f"CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE};" + "".join(statements)
            + "SET sql_log_bin=1;")
    if gtid:
        where = "MASTER_USE_GTID=slave_pos"
    else:
        file, pos = sql(primary, "SHOW MASTER STATUS").split()[:2]
        where = f"MASTER_LOG_FILE='{file}', MASTER_LOG_POS={int(pos)}"
    for host in replicas:
        sql(host, (
            f"CHANGE MASTER TO MASTER_HOST='{primary.address}', MASTER_PORT={MARIADB_PORT},"
            f" MASTER_USER='repl', MASTER_PASSWORD='{pw['mariadb_repl']}', {where},"
            " MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1;"
            "SET GLOBAL read_only=1; START SLAVE;"))


def wait_sql(host: LabHost, deadline: float) -> None:
    """Until the server answers on its socket (a fresh datadir takes a moment), or raise."""
    while True:
        try:
            sql(host, "SELECT 1")
            return
        except LabError:
            if time.monotonic() > deadline:
                raise LabError(f"MariaDB on {host.name} did not start (see {host.dir}/error.log)") from None
            time.sleep(0.1)


def health(spec: LabSpec) -> tuple[bool, str]:
    return pair_health(hosts(spec), NAME)


def pair_health(nodes: list[LabHost], stack: str) -> tuple[bool, str]:
    """The first node writable, every other one read-only and replicating (IO and SQL threads)."""
    try:
        if sql(nodes[0], "SELECT @@read_only").strip() != "0":
            return False, f"{stack}: {nodes[0].name} is read-only"
        for host in nodes[1:]:
            status = sql(host, "SHOW SLAVE STATUS", vertical=True)
            ro = sql(host, "SELECT @@read_only").strip()
            if ro != "1" or "Slave_IO_Running: Yes" not in status or "Slave_SQL_Running: Yes" not in status:
                return False, f"{stack}: {host.name} read_only={ro}, not replicating"
    except LabError as exc:
        return False, f"{stack}: {exc}"
    return True, "ok"


def roles(spec: LabSpec) -> list[dict[str, str]]:
    out = []
    for host in hosts(spec):
        role = "down"
        if Paths.mariadb_socket(host).exists():
            try:
                ro, slave = sql(host, "SELECT @@read_only; SHOW SLAVE STATUS;").split("\n", 1)
                role = "replica" if ro.strip() == "1" or slave.strip() else "primary"
            except LabError:
                role = "down"
        out.append({"name": host.name, "role": role})
    return out


def member(h: LabHost) -> dict[str, Any]:
    """A lab MariaDB node as an inventory member (its data, socket, server process and log)."""
    return {
        "host": h.name, "data_dir": str(h.dir / "mysql"), "db_socket": str(Paths.mariadb_socket(h)),
        "processes": {"mariadb": {"pid_file": str(Paths.mariadb_pid(h)), "comm": "mariadbd",
                                  "start": str(Paths.launcher(h, "mariadb"))}},
        "logs": {"mariadb": str(h.dir / "error.log")},
    }


def clusters(spec: LabSpec) -> dict[str, Any]:
    my_members = [member(h) for h in hosts(spec)]
    return {"mariadb": {
        "engine": "mysql", "members": my_members, "port": MARIADB_PORT, "database": MARIADB_DATABASE,
        "user": MARIADB_USER, "password": {"file": str(Paths.secret("mariadb_chaoskit"))},
        "endpoints": [f"{h.address}:{MARIADB_PORT}" for h in hosts(spec)],
    }, "mariadb-managed": {  # the same servers declared as a managed service would be: endpoints only
        "engine": "mysql", "managed": True, "port": MARIADB_PORT, "database": MARIADB_DATABASE,
        "user": MARIADB_USER, "password": {"file": str(Paths.secret("mariadb_chaoskit"))},
        "endpoints": [f"{h.address}:{MARIADB_PORT}" for h in hosts(spec)],
    }}


def postgres_data(spec: LabSpec) -> list[Path]:
    return []
