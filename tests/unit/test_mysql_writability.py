"""What the role probe asks a MySQL/MariaDB node to decide whether it takes writes, and how many
round trips that costs (the probe asks every node ten times a second): a scripted server answers
each statement; the expected statements are written out by hand."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from chaoskit.db.mysql import MySQLDriver

BOTH = "SELECT @@global.read_only, @@global.wsrep_on"
READ_ONLY = "SELECT @@global.read_only"
STATUS = "SHOW GLOBAL STATUS WHERE Variable_name IN (%s)"


class ScriptedServer:
    """Answers by statement text; `unknown_wsrep` plays a MySQL build (error 1193 on wsrep_on)."""

    def __init__(self, read_only: int, wsrep_on: int | None, status: dict[str, str] | None = None) -> None:
        self.read_only, self.wsrep_on, self.status = read_only, wsrep_on, status or {}
        self.asked: list[str] = []
        self._rows: list[tuple[Any, ...]] = []

    def cursor(self) -> ScriptedServer:
        return self

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: tuple[str, ...] | None = None) -> None:
        self.asked.append(sql)
        if sql == BOTH:
            if self.wsrep_on is None:
                raise pymysql.err.OperationalError(1193, "Unknown system variable 'wsrep_on'")
            self._rows = [(self.read_only, self.wsrep_on)]
        elif sql == READ_ONLY:
            self._rows = [(self.read_only,)]
        elif sql.startswith(STATUS.removesuffix("%s)")):
            self._rows = [(k.upper(), v) for k, v in self.status.items() if k in (params or ())]
        else:
            raise AssertionError(f"unexpected statement {sql!r}")

    def fetchone(self) -> tuple[Any, ...]:
        return self._rows[0]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows


def driver() -> MySQLDriver:
    return MySQLDriver.__new__(MySQLDriver)  # only the statements matter here, not a cluster


def test_plain_mariadb_primary_costs_one_round_trip() -> None:
    d, srv = driver(), ScriptedServer(read_only=0, wsrep_on=0)
    assert d.is_writable(srv) is True
    assert srv.asked == [BOTH]


def test_a_read_only_replica_is_not_asked_for_wsrep_status() -> None:
    d, srv = driver(), ScriptedServer(read_only=1, wsrep_on=1, status={"wsrep_ready": "ON"})
    assert d.is_writable(srv) is False
    assert srv.asked == [BOTH]


@pytest.mark.parametrize(("ready", "writable"), [("ON", True), ("OFF", False)])
def test_a_galera_node_takes_writes_only_when_ready(ready: str, writable: bool) -> None:
    """A node cut off into a minority is not read-only, yet refuses writes (wsrep_ready OFF)."""
    d, srv = driver(), ScriptedServer(read_only=0, wsrep_on=1, status={"wsrep_ready": ready})
    assert d.is_writable(srv) is writable
    assert srv.asked == [BOTH, STATUS]


def test_mysql_without_wsrep_is_remembered_and_asked_read_only_alone() -> None:
    d, srv = driver(), ScriptedServer(read_only=0, wsrep_on=None)
    assert d.is_writable(srv) is True
    assert d.is_writable(srv) is True
    assert srv.asked == [BOTH, READ_ONLY, READ_ONLY]
    assert d.component(srv) is None  # no wsrep: not a multi-writer component


def test_other_errors_are_not_taken_for_a_missing_variable() -> None:
    class Broken(ScriptedServer):
        def execute(self, sql: str, params: tuple[str, ...] | None = None) -> None:
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")

    d = driver()
    with pytest.raises(pymysql.err.OperationalError):
        d.is_writable(Broken(read_only=0, wsrep_on=0))
    assert d._no_wsrep is False


def test_status_values_are_keyed_in_lower_case_and_missing_ones_absent() -> None:
    srv = ScriptedServer(0, 1, status={"wsrep_cluster_status": "Primary", "wsrep_ready": "ON"})
    got = driver().status_values(srv, ("wsrep_cluster_status", "wsrep_cluster_size"))
    assert got == {"wsrep_cluster_status": "Primary"}


def test_component_names_the_status_and_the_sorted_members() -> None:
    srv = ScriptedServer(0, 1, status={"wsrep_cluster_status": "Primary",
                                       "wsrep_incoming_addresses": "10.77.0.73:3306,10.77.0.71:3306,,"})
    assert driver().component(srv) == "Primary:10.77.0.71:3306,10.77.0.73:3306"
