"""The MySQL wire of the load's event loop, against packets written here byte by byte as the
client/server protocol defines them (protocol 4.1, text result sets), over a real socketpair."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pymysql
import pytest
from pymysql.constants import CLIENT, FIELD_TYPE

from chaoskit.workload.loop import Slot
from chaoskit.workload.my_loop import MyWire, parse_lenenc
from chaoskit.workload.workloads import COMMIT, OpContext, Stmt


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def lenenc_str(s: bytes) -> bytes:
    return bytes([len(s)]) + s


def column(name: bytes, field_type: int, charset: int) -> bytes:
    return (lenenc_str(b"def") + lenenc_str(b"chaoskit") + lenenc_str(b"t") + lenenc_str(b"t") + lenenc_str(name)
            + lenenc_str(name) + b"\x0c" + charset.to_bytes(2, "little") + (11).to_bytes(4, "little")
            + bytes([field_type]) + b"\x00\x00" + b"\x00" + b"\x00\x00")


OK_UPDATE = b"\x00\x01\x00\x02\x00\x00\x00"  # OK: 1 affected row, insert id 0, status AUTOCOMMIT, 0 warnings
EOF_IN_TX = b"\xfe\x00\x00\x03\x00"  # EOF: 0 warnings, status IN_TRANS | AUTOCOMMIT
ERR_DEADLOCK = b"\xff\xbd\x04#40001Deadlock found when trying to get lock"  # 1213 little-endian


class Wired:
    def __init__(self) -> None:
        self.ours, self.server = socket.socketpair()
        conn = SimpleNamespace(_sock=self.ours, encoding="utf8", decoders=pymysql.converters.decoders,
                               literal=lambda v: pymysql.converters.escape_item(v, "utf8"), server_status=2,
                               client_flag=CLIENT.CAPABILITIES, server_capabilities=0xFFFFFFFF)
        self.wire = MyWire(None)  # type: ignore[arg-type]
        self.slot = Slot(1, OpContext(worker=1, rng=None, run_id="r"), 0.05)  # type: ignore[arg-type]
        self.slot.conn = conn
        self.wire.attach(self.slot)

    def statement(self, stmt: Stmt) -> bytes:
        self.slot.stmt = stmt
        self.slot.result = self.slot.error = None
        self.wire.send(self.slot, stmt)
        assert self.wire.flush(self.slot) is False
        return self.server.recv(65536)

    def reply(self, data: bytes) -> bool:
        self.server.sendall(data)
        return self.wire.read(self.slot)


def test_lenenc() -> None:
    assert parse_lenenc(b"\x05", 0) == (5, 1)
    assert parse_lenenc(b"\xfb", 0) == (None, 1)
    assert parse_lenenc(b"\xfc\x10\x27", 0) == (10000, 3)
    assert parse_lenenc(b"\x00\xfd\x40\x42\x0f", 1) == (1_000_000, 5)


def test_query_bytes_and_an_ok_reply() -> None:
    w = Wired()
    sent = w.statement(Stmt("UPDATE chaoskit_kv SET value = value + 1 WHERE id = %s", (42,)))
    sql = b"UPDATE chaoskit_kv SET value = value + 1 WHERE id = 42"
    assert sent == packet(0, b"\x03" + sql)  # COM_QUERY, sequence 0
    assert w.reply(packet(1, OK_UPDATE)) is True
    assert w.slot.result == 1 and w.slot.error is None and not w.wire.in_transaction(w.slot)


def test_strings_are_escaped_by_pymysql() -> None:
    w = Wired()
    sent = w.statement(Stmt("INSERT INTO t (v) VALUES (%s)", ("it's",)))
    assert sent[5:] == b"INSERT INTO t (v) VALUES ('it\\'s')"


def test_a_result_set_with_a_null_in_two_pieces() -> None:
    w = Wired()
    w.statement(Stmt("SELECT id, v FROM t", rows=True))
    reply = (packet(1, b"\x02") + packet(2, column(b"id", FIELD_TYPE.LONGLONG, 63))
             + packet(3, column(b"v", FIELD_TYPE.VAR_STRING, 45)) + packet(4, b"\xfe\x00\x00\x02\x00")
             + packet(5, lenenc_str(b"1") + lenenc_str(b"abc")) + packet(6, lenenc_str(b"2") + b"\xfb")
             + packet(7, EOF_IN_TX))
    cut = len(reply) - 3  # the last packet arrives in two parts
    assert w.reply(reply[:cut]) is False and w.slot.result is None
    assert w.reply(reply[cut:]) is True
    assert w.slot.result == [(1, "abc"), (2, None)]
    assert w.wire.in_transaction(w.slot)  # the final EOF said IN_TRANS


def test_rows_not_wanted_give_their_count() -> None:
    w = Wired()
    w.statement(Stmt("SELECT id FROM t"))
    w.reply(packet(1, b"\x01") + packet(2, column(b"id", FIELD_TYPE.LONG, 63)) + packet(3, EOF_IN_TX)
            + packet(4, lenenc_str(b"7")) + packet(5, EOF_IN_TX))
    assert w.slot.result == 1


def test_an_error_is_pymysqls_exception_and_classified() -> None:
    w = Wired()
    w.statement(COMMIT)
    assert w.reply(packet(1, ERR_DEADLOCK)) is True
    # the exception PyMySQL raises for it (its class, 1213 -> serialization, is pinned in test_classification)
    assert isinstance(w.slot.error, pymysql.err.OperationalError) and w.slot.error.args[0] == 1213
    assert w.wire.usable(w.slot)


def test_a_closed_connection_is_a_lost_connection() -> None:
    w = Wired()
    w.statement(COMMIT)
    w.server.close()
    with pytest.raises(pymysql.err.OperationalError) as info:
        w.wire.read(w.slot)
    assert info.value.args[0] == 2013


def test_commit_and_begin_carry_no_value() -> None:
    w = Wired()
    w.statement(COMMIT)
    assert w.reply(packet(1, OK_UPDATE)) is True and w.slot.result is None


def test_tls_clusters_stay_on_threads() -> None:
    from chaoskit.db.mysql import MySQLDriver
    from chaoskit.inventory.models import Cluster, Host, Inventory

    def driver(options: dict) -> MySQLDriver:
        cluster = Cluster(name="c", engine="mysql", members=[{"host": "h"}], user="u", options=options)
        inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"c": cluster})
        return MySQLDriver(cluster, inv)

    assert driver({}).loop_capable() is True
    assert driver({"ssl_ca": "/etc/ssl/ca.pem"}).loop_capable() is False
