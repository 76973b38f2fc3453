"""A scripted PostgreSQL for unit tests of the load's event loop, without a server.

Real file descriptors (one socketpair per connection, so the loop's epoll works unchanged),
libpq's non-blocking call surface as psycopg's `pq` layer exposes it, and a script that decides
each statement's fate: a reply, an error with a SQLSTATE, no reply at all (a frozen server) or a
dropped connection. Connection refusals are scripted on the driver. Everything the loop did is
kept for assertions: statements per connection, connects, closes.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from chaoskit.db.postgres import PostgresDriver
from chaoskit.inventory.models import Cluster, Host, Inventory, Member


@dataclass(frozen=True)
class Reply:
    kind: str = "ok"  # ok | error | hang | lost
    sqlstate: str = ""
    message: str = ""
    command_status: bytes = b"UPDATE 1"


OK = Reply()
HANG = Reply("hang")
LOST = Reply("lost")


def error(sqlstate: str, message: str) -> Reply:
    return Reply("error", sqlstate, message)


Script = Callable[[str, tuple, int], Reply]  # (sql, params, connection number) -> reply


class FakeResult:
    def __init__(self, reply: Reply) -> None:
        self.status = pq.ExecStatus.FATAL_ERROR if reply.kind == "error" else pq.ExecStatus.COMMAND_OK
        self.command_status = reply.command_status if reply.kind == "ok" else None
        self._reply = reply
        self.error_message = reply.message.encode()
        self.ntuples = 0
        self.nfields = 0

    def error_field(self, field: int) -> bytes | None:
        if self.status != pq.ExecStatus.FATAL_ERROR:
            return None
        if field == pq.DiagnosticField.SQLSTATE:
            return self._reply.sqlstate.encode()
        if field == pq.DiagnosticField.MESSAGE_PRIMARY:
            return self._reply.message.encode()
        if field == pq.DiagnosticField.SEVERITY:
            return b"ERROR"
        return None

    def get_error_message(self, encoding: str = "utf-8") -> str:
        return self._reply.message

    def get_value(self, row: int, col: int) -> bytes | None:
        return None


class FakePgConn:
    """What the loop calls on `conn.pgconn`."""

    def __init__(self, script: Script, number: int) -> None:
        self.script = script
        self.number = number
        self._server, self._client = socket.socketpair()
        self._client.setblocking(False)
        self.nonblocking = 0
        self.status = pq.ConnStatus.OK
        self.transaction_status = pq.TransactionStatus.IDLE
        self.statements: list[str] = []
        self._prepared: dict[bytes, str] = {}
        self._results: list[FakeResult] = []
        self._in_flight = False
        self._arrived = False

    @property
    def socket(self) -> int:
        return self._client.fileno()

    def _submit(self, sql: str, params: tuple, reply: Reply | None = None) -> None:
        if self.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("no connection to the server")
        self.statements.append(sql)
        reply = reply or self.script(sql, params, self.number)
        self._in_flight, self._arrived = True, False
        if reply.kind == "hang":
            return
        if reply.kind == "lost":
            self._server.close()  # the client end reads EOF
            return
        word = sql.split(None, 1)[0].upper() if sql else ""
        if reply.kind == "error" and self.transaction_status == pq.TransactionStatus.INTRANS:
            self.transaction_status = pq.TransactionStatus.INERROR
        elif word == "BEGIN":
            self.transaction_status = pq.TransactionStatus.INTRANS
        elif word in ("COMMIT", "ROLLBACK"):
            self.transaction_status = pq.TransactionStatus.IDLE
        self._results = [FakeResult(reply)]
        self._server.send(b"r")

    def send_query(self, sql: bytes) -> None:
        self._submit(sql.decode(), ())

    def send_prepare(self, name: bytes, sql: bytes, param_types: Any = None) -> None:
        self._prepared[name] = sql.decode()
        self._submit(f"PREPARE {sql.decode()}", (), OK)

    def send_query_prepared(self, name: bytes, params: list[bytes | None]) -> None:
        self._submit(self._prepared[name], tuple(params))

    def flush(self) -> int:
        return 0

    def consume_input(self) -> None:
        try:
            data = self._client.recv(4096)
        except BlockingIOError:
            return
        except OSError as exc:
            self.status = pq.ConnStatus.BAD
            raise psycopg.OperationalError(f"consuming input failed: {exc}") from None
        if not data:
            self.status = pq.ConnStatus.BAD
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        self._arrived = True

    def is_busy(self) -> bool:
        return self._in_flight and not self._arrived

    def get_result(self) -> FakeResult | None:
        if self._results:
            return self._results.pop(0)
        self._in_flight = False
        return None

    def finish(self) -> None:
        self.status = pq.ConnStatus.BAD
        self._client.close()
        self._server.close()


class FakeConnection:
    def __init__(self, pgconn: FakePgConn) -> None:
        self.pgconn = pgconn
        self.closed = False

    def fileno(self) -> int:
        return self.pgconn.socket

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pgconn.finish()


def fake_inventory() -> Inventory:
    cluster = Cluster(name="pg", engine="postgres", members=(Member(host="db1"),), user="app")
    return Inventory(hosts={"db1": Host(name="db1", address="127.0.0.1")}, clusters={"pg": cluster})


class FakePgDriver(PostgresDriver):
    """The PostgreSQL adapter, connected to scripted connections. `refuse` connects are refused
    first (connect_refused), then connections are handed out."""

    def __init__(self, script: Script, refuse: int = 0, **kwargs: Any) -> None:
        inv = fake_inventory()
        super().__init__(inv.clusters["pg"], inv, **kwargs)
        self.script = script
        self.refuse = refuse
        self.connects = 0
        self.connections: list[FakeConnection] = []

    def connect_writer(self) -> Any:
        self.connects += 1
        if self.refuse > 0:
            self.refuse -= 1
            raise psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 '
                                           "failed: Connection refused")
        conn = FakeConnection(FakePgConn(self.script, len(self.connections)))
        self.connections.append(conn)
        return conn
