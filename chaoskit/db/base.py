"""The driver interface every adapter implements, and the fixed error classes.

Contract for an adapter:
- `connect_writer()` reaches whichever node accepts writes now (libpq multi-host with
  target_session_attrs=read-write, an ordered MySQL endpoint list, a DM service name);
  `connect_client()` is where the cluster's clients connect: the writer, or, on a read route,
  wherever the route sends them;
  `connect_member(member)` reaches one node. Connections are autocommit and carry connect,
  statement and TCP keepalive/user timeouts, so a dead or partitioned server answers with an
  error in bounded time.
- `classify(exc)` maps any exception to one `ErrorClass`, never raises.
- `is_writable(conn)` answers from the server itself (pg_is_in_recovery, @@read_only, ...).
- `interrupt(conn)` unblocks a call stuck on a frozen server from another thread (a frozen host
  still ACKs TCP, so only the client can end the wait).
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chaoskit.errors import InputError

if TYPE_CHECKING:
    from chaoskit.inventory.models import Cluster, Inventory, Member


class ErrorClass(StrEnum):
    connect_refused = "connect_refused"
    connection_lost = "connection_lost"
    read_only = "read_only"
    timeout = "timeout"
    serialization = "serialization"
    constraint = "constraint"
    # the server out of disk space, memory or connections (PostgreSQL SQLSTATE class 53, MySQL's
    # "table is full", "disk full", errno 28): it refused the statement, so nothing was committed
    resources = "resources"
    other = "other"


def connect_class(cls: ErrorClass | None) -> ErrorClass:
    """What a failed connect is called, from the class of its error (an exception's, or a load
    tool's words as the driver reads them): a timeout or a standby reached, else refused."""
    return cls if cls in (ErrorClass.timeout, ErrorClass.read_only) else ErrorClass.connect_refused


@dataclass(frozen=True)
class ClientProfile:
    """How a client's connections are configured (see chaoskit.workload.spec.ClientGroup): the
    `deadline` profile gets statement timeout = op_timeout, aggressive keepalives and a TCP user
    timeout; `pool` and `per-op` get the driver's defaults and a server-side statement timeout
    only when one is given."""

    name: str = "deadline"
    statement_timeout: float | None = None
    validate: bool = False

    @property
    def careful(self) -> bool:
        return self.name == "deadline"


DEADLINE = ClientProfile()


class Driver(ABC):
    family: str = ""
    placeholder: str = "%s"

    def __init__(self, cluster: Cluster, inventory: Inventory, *, connect_timeout: float = 2.0,
                 op_timeout: float = 5.0, profile: ClientProfile = DEADLINE) -> None:
        self.cluster = cluster
        self.inventory = inventory
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.profile = profile

    _TUNABLE = frozenset({"connect_timeout", "op_timeout", "profile"})

    def tuned(self, **changes: Any) -> Driver:
        """The same driver (cluster, endpoints, resolved settings) with other timeouts or another
        client profile: a drill makes one driver and each purpose (preflight, role probe, load,
        ground truth) takes the timeouts it needs from it."""
        unknown = set(changes) - self._TUNABLE
        if unknown:
            raise TypeError(f"a driver cannot be tuned by {sorted(unknown)}")
        twin = copy.copy(self)
        for name, value in changes.items():
            setattr(twin, name, value)
        return twin

    def password(self) -> str | None:
        if self.cluster.password is None:
            return None
        try:
            return self.cluster.password.resolve()
        except LookupError as exc:
            raise InputError(str(exc), source=self.inventory.source,
                             field=f"clusters.{self.cluster.name}.password") from None

    def node_of(self, conn: Any) -> str | None:
        """The member a connection reached (by its address and port), None where the driver
        cannot tell: the evidence names the node that acknowledged a write."""
        try:
            host, port = self._peer(conn)
        except Exception:
            return None
        for m in self.cluster.members:
            if self.member_endpoint(m) == (host, port):
                return m.host
        return f"{host}:{port}"

    def _peer(self, conn: Any) -> tuple[str, int]:
        raise NotImplementedError

    def ping(self, conn: Any) -> None:
        """A pool's validation query."""
        self.query(conn, "SELECT 1")

    def writer_endpoint(self) -> tuple[str, int]:
        """Where the writer is reached now (host, port), found the way the load finds it: what a
        tool that takes one host is pointed at (sysbench spreads its threads over a list)."""
        conn = self.connect_writer()
        try:
            return self._peer(conn)
        finally:
            self.close_quietly(conn)

    def member_endpoint(self, member: Member) -> tuple[str, int]:
        return self.inventory.member_address(member), member.db_port or self.cluster.port

    def endpoints(self) -> list[tuple[str, int]]:
        """Where clients connect, in order (the members unless the cluster names endpoints)."""
        return [self.member_endpoint(m) for m in self.cluster.members]

    def through(self, endpoints: list[tuple[str, int]]) -> Cluster:
        """The cluster as seen through relays: the same writer search over other endpoints."""
        raise InputError(f"a client link cannot reroute a {self.cluster.engine} cluster",
                         source=self.inventory.source, field=f"clusters.{self.cluster.name}.engine")

    @abstractmethod
    def connect_writer(self) -> Any: ...

    def connect_client(self) -> Any:
        """Where the load's clients connect: the writer, or on a read route (`Cluster.read_route`)
        wherever the route sends them. PostgreSQL: its DSN's target_session_attrs decides either
        way."""
        return self.connect_writer()

    @abstractmethod
    def connect_member(self, member: Member) -> Any: ...

    def failure(self, exc: BaseException) -> str:
        """Why a server could not answer, in one line: the error class and the first line said."""
        said = str(exc).strip()
        return f"{self.classify(exc)}: {said.splitlines()[0] if said else repr(exc)}"

    def classify(self, exc: BaseException) -> ErrorClass:
        """One ErrorClass for any exception; never raises (a crash here would kill a worker)."""
        if isinstance(exc, TimeoutError):
            return ErrorClass.timeout
        try:
            return self._classify(exc)
        except Exception:
            return ErrorClass.other

    @abstractmethod
    def _classify(self, exc: BaseException) -> ErrorClass: ...

    def classify_words(self, text: str) -> ErrorClass | None:
        """The class of an error a load tool reported only in words (pgbench's, sysbench's output),
        by the rule this driver applies to its own exceptions, so one failure has one name whoever
        met it; None when the words say nothing the rule knows."""
        return None

    def causal_reads(self, conn: Any) -> None:
        """Make this session's reads see every write the cluster committed before them (Galera:
        wsrep_sync_wait; a node that rejoined may still be applying). The ground-truth read of a
        drill uses it; elsewhere a no-op."""
        return None

    def loop_capable(self) -> bool:
        """The load's event loop can drive this cluster's connections (see chaoskit.workload.loop)."""
        return True

    def client_gave_up(self, exc: BaseException) -> bool:
        """The error is the client's own read deadline expiring (not the server cancelling the
        statement): a commit sent before it may still happen, so its outcome is unknown."""
        return False

    @abstractmethod
    def is_writable(self, conn: Any) -> bool: ...

    def role(self, conn: Any) -> str:
        """`primary` when the server takes writes (`is_writable`), else `replica`: the SQL view of
        a member, the same words wherever a member is asked."""
        return "primary" if self.is_writable(conn) else "replica"

    def role_and_position(self, conn: Any) -> tuple[str, str | None]:
        """`role` and `position` together: what the role probe asks of every member ten times a
        second. An engine that can answer both in one statement overrides this."""
        return self.role(conn), self.position(conn)

    @abstractmethod
    def server_version(self, conn: Any) -> str: ...

    def interrupt(self, conn: Any) -> None:
        """Shut the connection's socket down so a blocked call returns with an error."""
        fd = self._fileno(conn)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            dup = socket.socket(fileno=os.dup(fd))
            try:
                dup.shutdown(socket.SHUT_RDWR)
            finally:
                dup.close()

    def _fileno(self, conn: Any) -> int | None:
        try:
            return conn.fileno()
        except Exception:  # closed or no socket: nothing to interrupt
            return None

    # -- dialect: the few places SQL differs between the families --------------------------
    table_suffix: str = ""

    def q(self, sql: str) -> str:
        """SQL written with %s placeholders (and `%%` for a literal `%`), in this driver's parameter
        style. A statement run with parameters is written so; one run without any is sent as
        written (every executor: `execute`, `query`, the loops)."""
        if self.placeholder == "%s":
            return sql
        return "%".join(part.replace("%s", self.placeholder) for part in sql.split("%%"))

    def execute(self, conn: Any, sql: str, params: tuple | list = ()) -> int:
        cur = conn.cursor()
        try:
            if params:
                cur.execute(sql, params)
            else:  # as written: a DB-API driver formats even an empty tuple (PyMySQL: `%%` -> `%`)
                cur.execute(sql)
            return cur.rowcount
        finally:
            cur.close()

    def query(self, conn: Any, sql: str, params: tuple | list = ()) -> list[tuple]:
        cur = conn.cursor()
        try:
            if params:
                cur.execute(sql, params)
            else:
                cur.execute(sql)
            return list(cur.fetchall())
        finally:
            cur.close()

    def executemany(self, conn: Any, sql: str, rows: list[tuple]) -> None:
        cur = conn.cursor()
        try:
            cur.executemany(sql, rows)
        finally:
            cur.close()

    def begin(self, conn: Any) -> None:
        self.execute(conn, "BEGIN")

    def commit(self, conn: Any) -> None:
        self.execute(conn, "COMMIT")

    def rollback(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            self.execute(conn, "ROLLBACK")

    def create_index(self, conn: Any, name: str, table: str, columns: str) -> None:
        self.execute(conn, f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({columns})")

    def replication_status(self, conn: Any) -> list[tuple[str, str, int | None, float | None]]:
        """On a primary: (standby address, state, replay lag in bytes, replay delay in seconds) per
        connected standby; empty where the engine does not say (catch-up is then not reported)."""
        return []

    def replica_state(self, conn: Any) -> tuple[str, int | None, float | None] | None:
        """On a replica, its own view of its replication: (state, bytes received but not applied,
        delay in seconds), for engines whose primary does not report its replicas (MySQL); None
        where the primary's view is used (PostgreSQL) or the node replicates from nobody."""
        return None

    def position(self, conn: Any) -> str | None:
        """Where this node's data is (MySQL/MariaDB: the GTID position it has applied; PostgreSQL:
        the WAL position, an LSN), for the timeline and a standby's catch-up; None where the
        engine's position is not sampled."""
        return None

    @abstractmethod
    def table_exists(self, conn: Any, table: str) -> bool:
        """Whether the table (as the workload names it, schema-qualified or not) is on this server: a
        restore to before the table was made, or a drill that dropped it, leaves none of its rows."""

    def component(self, conn: Any) -> str | None:
        """Which part of a multi-writer cluster this node is in (Galera: its view of the Primary
        Component); writers in one component are one database, in two they are split-brain.
        None for single-writer engines."""
        return None

    @staticmethod
    def close_quietly(conn: Any) -> None:
        if conn is None:
            return
        with contextlib.suppress(Exception):
            conn.close()
