"""MySQL's wire for the load's event loop (`chaoskit.workload.loop`): COM_QUERY on the socket
PyMySQL opened, read without blocking.

PyMySQL stays the driver (connect, authentication, TLS negotiation, the writability check,
escaping, error classes, value conversion); only the statement round trip moves here, because
PyMySQL's blocking reads pinned a thread per connection (0.49-0.75x of sysbench on the lab). The
reply is parsed as the MySQL client/server protocol defines it (protocol 4.1, text result sets):
OK, ERR, or column count, column definitions, EOF, rows, EOF (or the final OK of servers that
deprecate EOF). Parameters are interpolated by PyMySQL's own escaping, exactly as its cursor
does. A TLS connection (`ssl_*` options) is not driven here: such a cluster's load runs on the
threaded executor (`MySQLDriver.loop_capable`); `attach` refuses a TLS socket all the same.
"""

from __future__ import annotations

import ssl
from typing import Any

import pymysql
from pymysql.constants import FIELD_TYPE

from chaoskit.db.mysql import MySQLDriver
from chaoskit.recorder import Recorder
from chaoskit.workload.loop import ConnLoop, Slot, Wire
from chaoskit.workload.workloads import BEGIN, COMMIT, Stmt, Workload

__all__ = ["MyLoop", "MyWire", "parse_lenenc"]

COM_QUERY = 0x03
IN_TRANS = 0x0001  # SERVER_STATUS_IN_TRANS
MAX_PAYLOAD = 0xFFFFFF
_TEXT_TYPES = {FIELD_TYPE.BIT, FIELD_TYPE.BLOB, FIELD_TYPE.LONG_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.STRING,
               FIELD_TYPE.TINY_BLOB, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.GEOMETRY}
FIRST, COLUMNS, COLUMNS_EOF, ROWS = range(4)


def parse_lenenc(data: bytes | bytearray | memoryview, pos: int) -> tuple[int | None, int]:
    """A length-encoded integer at `pos`: (value, next position); None for 0xFB (NULL)."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + width], "little"), pos + 1 + width


class _MyState:
    __slots__ = ("columns", "expect", "inbuf", "out", "phase", "rows", "sock", "status")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.out = bytearray()
        self.inbuf = bytearray()
        self.phase = FIRST
        self.expect = 0  # column definitions still to come
        self.columns: list[tuple[str | None, Any]] = []  # per column: (text encoding, converter)
        self.rows: list[tuple] = []
        self.status = 0  # the server's status flags from its last OK / EOF


class MyWire(Wire):
    driver: MySQLDriver

    def attach(self, slot: Slot) -> int:
        conn = slot.conn
        sock = conn._sock
        if isinstance(sock, ssl.SSLSocket):
            raise pymysql.err.InterfaceError(0, "TLS connections are driven by the threaded executor (engine: threads)")
        sock.setblocking(False)
        slot.wire = _MyState(sock)
        slot.wire.status = int(getattr(conn, "server_status", 0) or 0)
        return int(sock.fileno())

    def send(self, slot: Slot, stmt: Stmt) -> None:
        st: _MyState = slot.wire
        conn = slot.conn
        sql = stmt.sql % tuple(str(p) if type(p) is int else conn.literal(p) for p in stmt.params) \
            if stmt.params else stmt.sql  # (an int is its own literal: the hot path's keys)
        payload = bytes([COM_QUERY]) + sql.encode(conn.encoding)
        if len(payload) >= MAX_PAYLOAD:
            raise pymysql.err.ProgrammingError(0, "statement longer than one protocol packet")
        st.out += len(payload).to_bytes(3, "little") + b"\x00" + payload
        st.phase, st.expect, st.columns, st.rows = FIRST, 0, [], []

    def flush(self, slot: Slot) -> bool:
        st: _MyState = slot.wire
        if st.out:
            try:
                sent = st.sock.send(st.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del st.out[:sent]
        return bool(st.out)

    def read(self, slot: Slot) -> bool:
        st: _MyState = slot.wire
        try:
            while True:
                chunk = st.sock.recv(262144)
                if not chunk:
                    raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
                st.inbuf += chunk
                if len(chunk) < 262144:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        buf = st.inbuf
        pos = 0
        done = False
        while len(buf) - pos >= 4 and not done:
            length = int.from_bytes(buf[pos:pos + 3], "little")
            if length == MAX_PAYLOAD:
                raise pymysql.err.OperationalError(2027, "multi-packet replies are not read by the load loop")
            if len(buf) - pos - 4 < length:
                break
            packet = bytes(buf[pos + 4:pos + 4 + length])
            pos += 4 + length
            done = self._packet(slot, st, packet)
        del buf[:pos]
        return done

    def _packet(self, slot: Slot, st: _MyState, p: bytes) -> bool:
        """One packet of the reply; True when the reply is complete."""
        head = p[0] if p else 0
        if head == 0xFF:  # ERR, possibly after some rows
            try:
                pymysql.err.raise_mysql_exception(p)
            except pymysql.MySQLError as exc:
                slot.error = exc
            return True
        if st.phase == FIRST:
            if head == 0x00:  # OK: affected rows, last insert id, status
                affected, pos = parse_lenenc(p, 1)
                _, pos = parse_lenenc(p, pos)
                st.status = int.from_bytes(p[pos:pos + 2], "little")
                slot.result = None if slot.stmt is BEGIN or slot.stmt is COMMIT else affected
                return True
            if head == 0xFB:
                raise pymysql.err.OperationalError(2027, "LOCAL INFILE is not used by the load")
            count, _ = parse_lenenc(p, 0)
            st.phase, st.expect = COLUMNS, int(count or 0)
            return False
        if st.phase == COLUMNS:
            st.columns.append(self._column(slot, p))
            st.expect -= 1
            if st.expect == 0:
                st.phase = COLUMNS_EOF if not _deprecates_eof(slot) else ROWS
            return False
        if st.phase == COLUMNS_EOF:  # the EOF after the column definitions
            st.phase = ROWS
            return False
        if head == 0xFE and len(p) < 0xFFFFFF and (len(p) < 9 or _deprecates_eof(slot)):  # end of rows
            st.status = int.from_bytes(p[3:5], "little") if len(p) < 9 else st.status
            slot.result = st.rows if slot.stmt is not None and slot.stmt.rows else len(st.rows)
            return True
        st.rows.append(self._row(st, p))
        return False

    def _column(self, slot: Slot, p: bytes) -> tuple[str | None, Any]:
        """(how to decode the column's text, its converter), as PyMySQL's own result reader."""
        pos = 0
        for _ in range(6):  # catalog, schema, table, org_table, name, org_name
            n, pos = parse_lenenc(p, pos)
            pos += n or 0
        _, pos = parse_lenenc(p, pos)  # length of the fixed fields (0x0c)
        charset = int.from_bytes(p[pos:pos + 2], "little")
        field_type = p[pos + 6]
        conn = slot.conn
        if field_type == FIELD_TYPE.JSON:
            encoding: str | None = conn.encoding
        elif field_type in _TEXT_TYPES:
            encoding = None if charset == 63 else conn.encoding
        else:
            encoding = "ascii"
        converter = conn.decoders.get(field_type)
        if converter is pymysql.converters.through:
            converter = None
        return encoding, converter

    @staticmethod
    def _row(st: _MyState, p: bytes) -> tuple:
        out: list[Any] = []
        pos = 0
        for encoding, converter in st.columns:
            n, pos = parse_lenenc(p, pos)
            if n is None:
                out.append(None)
                continue
            raw = p[pos:pos + n]
            pos += n
            value: Any = raw.decode(encoding) if encoding is not None else raw
            out.append(converter(value) if converter is not None else value)
        return tuple(out)

    def usable(self, slot: Slot) -> bool:
        return slot.wire is not None

    def in_transaction(self, slot: Slot) -> bool:
        return bool(slot.wire.status & IN_TRANS)


def _deprecates_eof(slot: Slot) -> bool:
    return bool(getattr(slot.conn, "client_flag", 0) & pymysql.constants.CLIENT.DEPRECATE_EOF
                & getattr(slot.conn, "server_capabilities", 0))


class MyLoop(ConnLoop):
    """Many MySQL/MariaDB workers from one thread, like sysbench's event-driven clients."""

    def __init__(self, driver: MySQLDriver, workload: Workload, spec: Any, recorder: Recorder,
                 worker_ids: list[int], t_start: float, rate: float | None) -> None:
        super().__init__(MyWire(driver), workload, spec, recorder, worker_ids, t_start, rate)
