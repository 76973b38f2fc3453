"""MySQL, MariaDB and MySQL-protocol endpoints (PolarDB, ShardingSphere-Proxy) through PyMySQL,
or through mysqlclient (MySQLdb, the C client library) where a load asks for it
(`MySQLDriver.tuned(library="mysqlclient")`): the same connect parameters, error numbers and
rules, so an op's outcome does not depend on which library carried it. PyMySQL stays the
default: the load's event loop drives PyMySQL's socket (`chaoskit.workload.my_loop`);
mysqlclient's blocking calls release the interpreter lock and run on the threaded executor.

Reconnect-to-new-primary: the cluster's `endpoints` are tried in order and the first that
accepts writes (@@read_only = 0) wins, like a client with a list of hosts. Timeouts: connect,
socket read/write (a frozen or partitioned server gives error 2013 "timed out") and a
server-side statement limit where the server has one. TLS (ssl_ca, ssl_cert, ssl_key, ...)
and option files (read_default_file) pass through from the cluster's `options`.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pymysql
import pymysql.err

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.inventory.models import Cluster, Member

try:  # mysqlclient (optional: the C client library, libmariadb / libmysqlclient)
    import MySQLdb
except ImportError:  # pragma: no cover - present wherever chaoskit is installed with its lab
    MySQLdb = None

LIBRARIES = ("pymysql", "mysqlclient")


def _both(name: str) -> tuple[type[BaseException], ...]:
    """An exception class of each library (they carry (error number, message) alike)."""
    return (getattr(pymysql.err, name),) + ((getattr(MySQLdb, name),) if MySQLdb is not None else ())


_MYSQL_ERRORS = _both("MySQLError")
_OPERATIONAL = _both("OperationalError")
_INTERFACE = _both("InterfaceError")
_INTEGRITY = _both("IntegrityError")

# Server and client error numbers, grouped.
_REFUSED = {2003, 2002, 2005, 1040, 1045, 1129, 1130, 1053, 2026, 1927}  # 1927: connection killed at start
_LOST = {2006, 2013, 2014, 2055, 1152, 1153, 1159, 1161, 1317, 4031}
_READ_ONLY = {1290, 1792, 1836, 1874}
_TIMEOUT = {1205, 3024, 1969, 1907}  # lock wait, max_execution_time, MariaDB max_statement_time
_SERIALIZATION = {1213, 1614, 3101}
# disk full (1021), table full (1114, InnoDB out of room in its files), out of memory (1037, 1038, 1041)
_RESOURCES = {1021, 1114, 1037, 1038, 1041}
_CONSTRAINT = {1022, 1062, 1169, 1216, 1217, 1451, 1452, 1557, 1586, 3819, 4025}
# the error number in a tool's words (sysbench: "error 2013", "errno = 2013")
_CODE_IN_WORDS = re.compile(r"\b(?:error|errno)\s*[=:]?\s*(\d{4})\b", re.IGNORECASE)


def class_of_words(text: str) -> ErrorClass | None:
    """An error a tool reported in words, by the first error number in them."""
    code = _CODE_IN_WORDS.search(text)
    return class_of_error(int(code.group(1)) if code else None, text.lower())


def class_of_error(code: int | None, text: str) -> ErrorClass | None:
    """An error by its MySQL/MariaDB code (client 2xxx or server 1xxx) and lowered words; None
    when neither says anything this rule knows."""
    if code in _READ_ONLY or "read-only" in text or "read_only" in text:
        return ErrorClass.read_only
    if code in (2002, 2003, 2013) and _timed_out(text):
        return ErrorClass.timeout
    if code in _REFUSED:
        return ErrorClass.connect_refused
    if code in _LOST:
        return ErrorClass.connection_lost
    if code in _TIMEOUT:
        return ErrorClass.timeout
    if code in _SERIALIZATION:
        return ErrorClass.serialization
    if code in _RESOURCES or (code is not None and "errno: 28" in text) or "no space left" in text:
        return ErrorClass.resources
    if code in _CONSTRAINT:
        return ErrorClass.constraint
    return None


def _timed_out(text: str) -> bool:
    """A client timeout in either library's words: PyMySQL's "(timed out)", the C client's
    "system error: 110" or "(110)" (ETIMEDOUT)."""
    return "timed out" in text or "system error: 110" in text or "(110)" in text


def slave_state(status: dict[str, Any]) -> tuple[str, int | None, float | None]:
    """A SHOW SLAVE STATUS row as (state, bytes received but not applied, Seconds_Behind_Master):
    `streaming` with both threads running (as PostgreSQL's word, so one catch-up analysis serves
    both), else which thread is stopped or `connecting`. The bytes are known only while the SQL
    thread applies the binlog file the IO thread reads."""
    io, sql = status.get("Slave_IO_Running"), status.get("Slave_SQL_Running")
    state = ("streaming" if io == "Yes" and sql == "Yes" else "connecting" if io == "Connecting"
             else "sql_stopped" if io == "Yes" else "io_stopped" if sql == "Yes" else "stopped")
    lag = None
    if status.get("Master_Log_File") and status.get("Master_Log_File") == status.get("Relay_Master_Log_File"):
        read, done = status.get("Read_Master_Log_Pos"), status.get("Exec_Master_Log_Pos")
        if read is not None and done is not None:
            lag = max(0, int(read) - int(done))
    delay = status.get("Seconds_Behind_Master")
    return state, lag, None if delay is None else float(delay)


def slave_status(conn: Any) -> dict[str, Any] | None:
    """A connection's server's SHOW SLAVE STATUS row by column, None where it replicates from nobody."""
    with conn.cursor() as cur:
        cur.execute("SHOW SLAVE STATUS")
        cols = [d[0] for d in cur.description or []]
        row = cur.fetchone()
    return dict(zip(cols, row, strict=False)) if row else None


def replica_state_of(conn: Any) -> tuple[str, int | None, float | None] | None:
    """A connection's server as a replica (`slave_state`), None where it replicates from nobody."""
    status = slave_status(conn)
    return slave_state(status) if status is not None else None


class MySQLDriver(Driver):
    engine = "mysql"

    family = "mysql"
    table_suffix = " ENGINE=InnoDB"
    _no_wsrep = False  # set once a server said it has no @@wsrep_on (MySQL)
    library = "pymysql"  # or "mysqlclient": who carries the connection (tuned per purpose)
    _TUNABLE = Driver._TUNABLE | {"library"}

    def create_index(self, conn: Any, name: str, table: str, columns: str) -> None:
        try:
            self.execute(conn, f"CREATE INDEX {name} ON {table} ({columns})")
        except _OPERATIONAL as exc:
            if exc.args[0] != 1061:  # duplicate key name: it exists
                raise

    def endpoints(self) -> list[tuple[str, int]]:
        if self.cluster.endpoints:
            out = []
            for ep in self.cluster.endpoints:
                host, _, port = ep.rpartition(":")
                out.append((host or ep, int(port) if host else self.cluster.port))
            return out
        return [self.member_endpoint(m) for m in self.cluster.members]

    def through(self, endpoints: list[tuple[str, int]]) -> Cluster:
        return self.cluster.model_copy(update={"endpoints": tuple(f"{h}:{p}" for h, p in endpoints)})

    def connect_params(self, host: str, port: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "host": host, "port": port, "user": self.cluster.user, "database": self.cluster.database,
            "connect_timeout": max(1, math.ceil(self.connect_timeout)),
            "autocommit": True, "charset": "utf8mb4",
        }
        if self.profile.careful:  # client-side socket timeouts: the deadline profile's
            params["read_timeout"] = params["write_timeout"] = max(1, math.ceil(self.op_timeout))
        elif self.profile.statement_timeout is not None:  # MariaDB's server-side statement timeout
            params["init_command"] = f"SET SESSION max_statement_time={float(self.profile.statement_timeout):.3f}"
        password = self.password()
        if password is not None:
            params["password"] = password
        ssl = {k[4:]: v for k, v in self.cluster.options.items() if k.startswith("ssl_")}
        if ssl:
            params["ssl"] = ssl
        params.update({k: v for k, v in self.cluster.options.items() if not k.startswith("ssl_")})
        return params

    def _connect(self, host: str, port: int) -> Any:
        if self.library == "pymysql":
            return pymysql.connect(**self.connect_params(host, port))
        if MySQLdb is None:
            raise RuntimeError("mysqlclient is not installed (pip install mysqlclient; it builds against "
                               "libmariadb-dev)")
        conn = MySQLdb.connect(**self.connect_params(host, port))
        conn.chaoskit_peer = (host, port)  # the C client does not say which endpoint it reached
        return conn

    def _peer(self, conn: Any) -> tuple[str, int]:
        peer = getattr(conn, "chaoskit_peer", None)
        return peer if peer is not None else (str(conn.host), int(conn.port))

    def connect_member(self, member: Member) -> Any:
        return self._connect(*self.member_endpoint(member))

    def connect_writer(self) -> Any:
        """First endpoint that accepts writes; raise the most telling error if none does."""
        return self._first_endpoint(writable=True)

    def connect_client(self) -> Any:
        """The writer; on a read route the first endpoint that answers, whatever its role (a
        replica, or the one node a proxy's read port chose)."""
        return self._first_endpoint(writable=not self.cluster.read_route)

    def _first_endpoint(self, writable: bool) -> Any:
        """The first endpoint that answers (and, if `writable`, accepts writes), in order; the
        most telling error if none does."""
        last: BaseException | None = None
        for host, port in self.endpoints():
            conn = None
            try:
                conn = self._connect(host, port)
                if not writable or self.is_writable(conn):
                    return conn
                last = pymysql.err.OperationalError(1290, f"{host}:{port} is read-only (@@read_only=1)")
            except _MYSQL_ERRORS as exc:
                last = exc
            self.close_quietly(conn)
        assert last is not None
        raise last

    def is_writable(self, conn: Any) -> bool:
        """Not read-only, and on a Galera node also in the Primary Component and ready (a node cut
        off into a minority is not read-only, yet refuses every write with error 1047). One round
        trip off Galera (the role probe asks this of every node ten times a second), two on it."""
        read_only, wsrep_on = self._read_only_and_wsrep(conn)
        if read_only:
            return False
        return not wsrep_on or self.status_values(conn, ("wsrep_ready",)).get("wsrep_ready") == "ON"

    def component(self, conn: Any) -> str | None:
        """A Galera node's component: its status (Primary or not) and the members it sees
        (`wsrep_incoming_addresses`, sorted). Nodes of one component agree on it; the two sides of
        a split differ even where both installed the same configuration id. None off Galera."""
        wsrep = self._wsrep_status(conn, ("wsrep_cluster_status", "wsrep_incoming_addresses"))
        if wsrep is None:
            return None
        members = ",".join(sorted(a for a in wsrep.get("wsrep_incoming_addresses", "").split(",") if a))
        return f"{wsrep.get('wsrep_cluster_status', '?')}:{members}"

    def status_values(self, conn: Any, names: tuple[str, ...]) -> dict[str, str]:
        """Global status variables by name (lower case); a name the server lacks is absent. SHOW
        STATUS is answered even by a Galera node outside the Primary Component."""
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ",".join(["%s"] * len(names)) + ")", names)
            return {str(k).lower(): str(v) for k, v in cur.fetchall()}

    def _read_only_and_wsrep(self, conn: Any) -> tuple[bool, bool]:
        """(@@read_only, @@wsrep_on) in one query; MySQL builds without wsrep (error 1193 on the
        variable) are remembered, and asked @@read_only alone from then on."""
        if not self._no_wsrep:
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT @@global.read_only, @@global.wsrep_on")
                    read_only, wsrep_on = cur.fetchone()
                return int(read_only) != 0, int(wsrep_on) == 1
            except _OPERATIONAL as exc:
                if exc.args[0] != 1193:  # unknown system variable: not a wsrep build
                    raise
                self._no_wsrep = True
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.read_only")
            return int(cur.fetchone()[0]) != 0, False

    def _wsrep_status(self, conn: Any, names: tuple[str, ...]) -> dict[str, str] | None:
        """The node's wsrep status values, or None where wsrep is off or unknown."""
        if not self._read_only_and_wsrep(conn)[1]:
            return None
        return self.status_values(conn, names)

    def replica_state(self, conn: Any) -> tuple[str, int | None, float | None] | None:
        return replica_state_of(conn)

    def position(self, conn: Any) -> str | None:
        """MariaDB: gtid_current_pos (applied, own and replicated); MySQL: gtid_executed."""
        for query in ("SELECT @@global.gtid_current_pos", "SELECT @@global.gtid_executed"):
            try:
                with conn.cursor() as cur:
                    cur.execute(query)
                    row = cur.fetchone()
                return None if row is None or row[0] is None else str(row[0]).replace("\n", "")
            except _OPERATIONAL as exc:
                if exc.args and exc.args[0] == 1193:  # unknown system variable: the other flavour
                    continue
                raise
        return None

    def table_exists(self, conn: Any, table: str) -> bool:
        schema, _, name = table.rpartition(".")
        sql = ("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(%s, DATABASE()) "
               "AND table_name = %s")
        return int(self.query(conn, sql, (schema or None, name))[0][0]) > 0

    def server_version(self, conn: Any) -> str:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            return str(cur.fetchone()[0])

    def _fileno(self, conn: Any) -> int | None:
        if self.library != "pymysql":  # the C client's socket (shut down from the watchdog's thread)
            return super()._fileno(conn)
        sock = getattr(conn, "_sock", None)
        try:
            return sock.fileno() if sock is not None else None
        except OSError:
            return None

    def causal_reads(self, conn: Any) -> None:
        if self._wsrep_status(conn, ("wsrep_ready",)) is not None:
            with conn.cursor() as cur:
                cur.execute("SET SESSION wsrep_sync_wait = 1")  # reads wait until the node applied all before them

    def loop_capable(self) -> bool:
        """PyMySQL, not over TLS: the loop reads PyMySQL's raw socket; its TLS socket, and the C
        client's blocking calls, stay with threads."""
        return self.library == "pymysql" and not any(k.startswith("ssl") for k in self.cluster.options)

    def client_gave_up(self, exc: BaseException) -> bool:
        """PyMySQL's read_timeout: "Lost connection ... during query (timed out)" (2013). The
        server never saw a cancel; a Galera commit waiting for a view change, for one, completes
        after it (seen on the lab: rows present for writes the client had timed out on)."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        return code == 2013 and _timed_out(str(exc).lower())

    def classify_words(self, text: str) -> ErrorClass | None:
        return class_of_words(text)

    def _classify(self, exc: BaseException) -> ErrorClass:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        cls = class_of_error(code, str(exc).lower())
        if cls is not None:
            return cls
        if isinstance(exc, (*_INTERFACE, ConnectionError, BrokenPipeError, OSError)):
            return ErrorClass.connection_lost
        if isinstance(exc, _INTEGRITY):
            return ErrorClass.constraint
        return ErrorClass.other
