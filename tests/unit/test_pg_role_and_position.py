"""The role probe's question to a PostgreSQL member: writability and WAL position in one
statement (one round trip per sample), answered here by a scripted connection."""

from __future__ import annotations

from typing import Any

import pytest

from chaoskit.db.postgres import PostgresDriver
from chaoskit.inventory.models import Cluster, Host, Inventory, Member


class OneRowConnection:
    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row
        self.statements: list[str] = []

    def execute(self, statement: str) -> OneRowConnection:
        self.statements.append(statement)
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return self.row


def driver() -> PostgresDriver:
    cluster = Cluster(name="pg", engine="postgres", members=(Member(host="db1"),), user="app")
    inv = Inventory(hosts={"db1": Host(name="db1", address="127.0.0.1")}, clusters={"pg": cluster})
    return PostgresDriver(cluster, inv)


@pytest.mark.parametrize(("row", "expected"), [
    ((True, "0/3000148"), ("primary", "0/3000148")),
    ((False, "1/A0"), ("replica", "1/A0")),
    ((False, None), ("replica", None)),  # a standby that has replayed nothing yet
])
def test_one_statement_answers_both(row: tuple[Any, ...], expected: tuple[str, str | None]) -> None:
    conn = OneRowConnection(row)
    assert driver().role_and_position(conn) == expected
    [statement] = conn.statements
    assert "pg_is_in_recovery()" in statement and "transaction_read_only" in statement
    assert "pg_last_wal_replay_lsn()" in statement and "pg_current_wal_lsn()" in statement
