"""PostgreSQL through psycopg 3.

Reconnect-to-new-primary is libpq's: the cluster DSN may list several hosts with
`target_session_attrs=read-write`. Timeouts: connect_timeout, server statement_timeout,
TCP keepalives and tcp_user_timeout (a partition), plus `interrupt` for a frozen server.
TLS and any other libpq option pass through from the cluster's `options`; .pgpass works as
usual when no password reference is given.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.inventory.models import Cluster, Member

_LOST_MARKERS = ("server closed the connection", "connection is lost", "consuming input failed",
                 "terminating connection", "ssl syscall", "connection reset", "broken pipe",
                 "the connection is closed", "no connection to the server", "eof detected",
                 "connection timed out", "sending query")
_REFUSED_MARKERS = ("connection refused", "no route to host", "could not connect", "is the server running",
                    "the database system is starting up", "the database system is shutting down",
                    "the database system is in recovery mode", "network is unreachable",
                    "connection failed", "failed to resolve")
_READ_ONLY_MARKERS = ("read-only", "read only", "hot standby", "server is in hot standby mode",
                      "session is read-only", "cannot execute")
_TIMEOUT_MARKERS = ("timeout expired", "timed out", "canceling statement due to statement timeout")
# libpq's words for a member target_session_attrs turned away: "session is read-only" (read-write),
# "server is in hot standby mode" (primary); older ones named the attribute
_STANDBY_MARKERS = ("session is read-only", "hot standby", "read-write", "target_session_attrs")
_SERVER_WORDS = (  # the server's words for a statement it refused (its transaction did not commit)
    ("read-only transaction", ErrorClass.read_only), ("statement timeout", ErrorClass.timeout),
    ("could not serialize", ErrorClass.serialization), ("deadlock", ErrorClass.serialization),
    ("duplicate key", ErrorClass.constraint), ("violates", ErrorClass.constraint),
    ("no space left", ErrorClass.resources), ("could not extend", ErrorClass.resources),
    ("out of memory", ErrorClass.resources), ("too many", ErrorClass.resources))


def class_of_connection_words(text: str) -> ErrorClass | None:
    """A failed or broken connection by libpq's words: a timeout, a standby turned away, refused,
    lost; None for words that say none of these."""
    text = text.lower()
    if any(m in text for m in _TIMEOUT_MARKERS):
        return ErrorClass.timeout
    if any(m in text for m in _STANDBY_MARKERS):
        return ErrorClass.read_only
    if any(m in text for m in _REFUSED_MARKERS):
        return ErrorClass.connect_refused
    if any(m in text for m in _LOST_MARKERS):
        return ErrorClass.connection_lost
    return None


def class_of_words(text: str) -> ErrorClass | None:
    """Any error by its words alone (a tool's output has no SQLSTATE): the server's for a statement
    it refused, else libpq's for the connection."""
    lowered = text.lower()
    return next((cls for words, cls in _SERVER_WORDS if words in lowered), None) or class_of_connection_words(lowered)

# A member takes writes (what libpq's target_session_attrs=read-write accepts); where its data is
# (the primary's insert position, a standby's last replayed one). Asked alone or together.
WRITABLE = "NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'"
POSITION = "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text"


_PREPARED: weakref.WeakKeyDictionary[Any, dict[str, bytes]] = weakref.WeakKeyDictionary()  # per PGconn


def _numbered(sql: str) -> str:
    """%s placeholders -> $1, $2, ... (libpq's own style); `%%` is a literal `%` (the DB-API's
    format style, as PyMySQL reads a statement with parameters)."""
    out, n, i = [], 0, 0
    while i < len(sql):
        if sql.startswith("%s", i):
            n += 1
            out.append(f"${n}")
            i += 2
        elif sql.startswith("%%", i):
            out.append("%")
            i += 2
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


class PostgresDriver(Driver):
    engine = "postgres"

    family = "postgres"

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"connect_timeout": max(1, math.ceil(self.connect_timeout))}
        if self.profile.careful:
            statement_ms = max(1, math.ceil(self.op_timeout * 1000))
            params.update({"keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1, "keepalives_count": 3,
                           "tcp_user_timeout": statement_ms, "application_name": "chaoskit",
                           "options": f"-c statement_timeout={statement_ms}"})
        else:  # libpq's defaults, as an application's pool has them
            params["application_name"] = f"chaoskit-{self.profile.name}"
            if self.profile.statement_timeout is not None:
                params["options"] = f"-c statement_timeout={max(1, math.ceil(self.profile.statement_timeout * 1000))}"
        if self.cluster.user:
            params["user"] = self.cluster.user
        password = self.password()
        if password is not None:
            params["password"] = password
        params.update({k: v for k, v in self.cluster.options.items()})
        return params

    def writer_conninfo(self) -> str:
        if self.cluster.dsn:
            base = conninfo_to_dict(self.cluster.dsn)
        else:
            hosts = [self.member_endpoint(m) for m in self.cluster.members]
            base = {"host": ",".join(h for h, _ in hosts), "port": ",".join(str(p) for _, p in hosts),
                    "target_session_attrs": "read-write"}
        base.setdefault("dbname", self.cluster.database)
        return make_conninfo(**{**self._params(), **base})

    def tool_conninfo(self, application: str) -> tuple[str, dict[str, str]]:
        """The writer's connection string for an external libpq tool (pgbench), with this driver's
        timeouts and keepalives, and the environment it needs: the password goes in PGPASSWORD,
        never on a command line, where `ps` shows it to every user."""
        info = conninfo_to_dict(self.writer_conninfo())
        password = info.pop("password", None)
        info["application_name"] = application
        return make_conninfo("", **info), ({"PGPASSWORD": str(password)} if password is not None else {})

    def endpoints(self) -> list[tuple[str, int]]:
        if not self.cluster.dsn:
            return super().endpoints()
        info = conninfo_to_dict(self.cluster.dsn)
        hosts = str(info.get("host") or info.get("hostaddr") or "localhost").split(",")
        ports = str(info.get("port") or self.cluster.port).split(",")
        return [(h, int(ports[i] if len(ports) > 1 else ports[0])) for i, h in enumerate(hosts)]

    def through(self, endpoints: list[tuple[str, int]]) -> Cluster:
        info = conninfo_to_dict(self.cluster.dsn) if self.cluster.dsn else {"target_session_attrs": "read-write"}
        info.pop("hostaddr", None)
        info.update(host=",".join(h for h, _ in endpoints), port=",".join(str(p) for _, p in endpoints))
        return self.cluster.model_copy(update={"dsn": make_conninfo(**info)})

    def member_conninfo(self, member: Member) -> str:
        host, port = self.member_endpoint(member)
        return make_conninfo(**self._params(), host=host, port=port, dbname=self.cluster.database)

    def _peer(self, conn: Any) -> tuple[str, int]:
        pgconn = conn.pgconn
        return (pgconn.hostaddr or pgconn.host).decode(), int(pgconn.port.decode())

    def connect_writer(self) -> psycopg.Connection:
        return psycopg.connect(self.writer_conninfo(), autocommit=True)

    def connect_member(self, member: Member) -> psycopg.Connection:
        return psycopg.connect(self.member_conninfo(member), autocommit=True)

    # The hot path talks to libpq through psycopg's pq layer with server-side prepared statements:
    # ~47 µs of client CPU per op instead of ~100-120 µs through cursors (measured on the lab),
    # which matters when the loader shares the machine's cores with the servers. Errors are
    # raised as the same psycopg exception classes, so classification does not change.
    def execute(self, conn: Any, sql: str, params: tuple | list = ()) -> int:
        return self.rowcount(self._exec(conn, sql, params))

    def query(self, conn: Any, sql: str, params: tuple | list = ()) -> list[tuple]:
        return self.rows(self._exec(conn, sql, params))

    @staticmethod
    def rowcount(res: Any) -> int:
        tail = (res.command_status or b"").rsplit(b" ", 1)[-1]
        return int(tail) if tail.isdigit() else -1

    @staticmethod
    def rows(res: Any) -> list[tuple]:
        return [tuple(None if (v := res.get_value(r, c)) is None else v.decode()
                      for c in range(res.nfields)) for r in range(res.ntuples)]

    @staticmethod
    def encode_params(params: tuple | list) -> list[bytes | None]:
        return [None if p is None else str(p).encode() for p in params]

    @staticmethod
    def numbered(sql: str) -> bytes:
        return _numbered(sql).encode()

    def _exec(self, conn: Any, sql: str, params: tuple | list) -> Any:
        pgconn = conn.pgconn
        if not params:
            res = pgconn.exec_(sql.encode())
        else:
            cache = _PREPARED.setdefault(pgconn, {})
            name = cache.get(sql)
            if name is None:
                name = f"ck{len(cache)}".encode()
                self.check(pgconn, pgconn.prepare(name, _numbered(sql).encode(), None))
                cache[sql] = name
            res = pgconn.exec_prepared(name, self.encode_params(params))
        return self.check(pgconn, res)

    @staticmethod
    def check(pgconn: Any, res: Any) -> Any:
        """The result if it succeeded, else the psycopg exception a cursor would have raised."""
        if res.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY):
            return res
        if pgconn.status == pq.ConnStatus.BAD or res.error_field(pq.DiagnosticField.SQLSTATE) is None:
            message = (res.error_message or pgconn.error_message or b"connection lost").decode(errors="replace")
            raise psycopg.OperationalError(message.strip())
        raise pgerr.error_from_result(res, encoding="utf-8")

    def is_writable(self, conn: Any) -> bool:
        """What libpq's target_session_attrs=read-write accepts: not in recovery, and not
        read-only (pg_auto_failover promotes a node but keeps default_transaction_read_only on
        until the old primary is known to be demoted)."""
        return bool(conn.execute(f"SELECT {WRITABLE}").fetchone()[0])

    def replication_status(self, conn: Any) -> list[tuple[str, str, int | None, float | None]]:
        rows = conn.execute(
            "SELECT host(client_addr), state, pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint, "
            "extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication WHERE client_addr IS NOT NULL"
        ).fetchall()
        return [(str(a), str(s), None if b is None else int(b), d) for a, s, b, d in rows]

    def position(self, conn: Any) -> str | None:
        """The WAL position of this node's data: the primary's current insert position, a
        standby's last replayed one (an LSN such as `0/3000148`)."""
        row = conn.execute(f"SELECT {POSITION}").fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def role_and_position(self, conn: Any) -> tuple[str, str | None]:
        """`is_writable` and `position` in one statement: one round trip per probe sample."""
        row = conn.execute(f"SELECT {WRITABLE}, {POSITION}").fetchone()
        return ("primary" if row[0] else "replica"), (None if row[1] is None else str(row[1]))

    def table_exists(self, conn: Any, table: str) -> bool:
        # resolved as the unquoted name in a statement would be (search_path, case folded)
        return int(self.query(conn, "SELECT (to_regclass(%s) IS NOT NULL)::int", (table,))[0][0]) == 1

    def server_version(self, conn: Any) -> str:
        return str(conn.execute("SHOW server_version").fetchone()[0])

    def classify_words(self, text: str) -> ErrorClass | None:
        return class_of_words(text)

    def _classify(self, exc: BaseException) -> ErrorClass:
        if isinstance(exc, TimeoutError | pgerr.QueryCanceled | psycopg.errors.ConnectionTimeout):
            return ErrorClass.timeout
        if isinstance(exc, pgerr.ReadOnlySqlTransaction):
            return ErrorClass.read_only
        if isinstance(exc, pgerr.SerializationFailure | pgerr.DeadlockDetected):
            return ErrorClass.serialization
        if isinstance(exc, psycopg.IntegrityError):
            return ErrorClass.constraint
        if isinstance(exc, pgerr.AdminShutdown | pgerr.CrashShutdown):
            return ErrorClass.connection_lost
        if isinstance(exc, pgerr.CannotConnectNow):
            return ErrorClass.connect_refused
        if isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("53"):  # disk full, out of memory
            return ErrorClass.resources
        text = str(exc).lower()
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | OSError):
            return class_of_connection_words(text) or ErrorClass.connection_lost
        if any(m in text for m in _READ_ONLY_MARKERS) and "transaction" in text:
            return ErrorClass.read_only
        return ErrorClass.other
