"""The connections MHA's and Galera's views keep to their members between polls (a fake driver
counts connects; every expected count is the scenario's, worked out by hand)."""

from __future__ import annotations

import threading
from typing import Any

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.ha.sessions import MemberSessions
from chaoskit.inventory.models import Member


class Conn:
    def __init__(self, host: str, n: int) -> None:
        self.host, self.n, self.dead, self.closed = host, n, False, False

    def close(self) -> None:
        self.closed = True


class FakeDriver:
    def __init__(self, refusing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.refusing = set(refusing)
        self.opened: list[Conn] = []
        self.lock = threading.Lock()

    def connect_member(self, member: Member) -> Conn:
        if member.host in self.refusing:
            raise ConnectionRefusedError(111, "Connection refused")
        with self.lock:
            conn = Conn(member.host, len(self.opened) + 1)
            self.opened.append(conn)
        return conn

    def failure(self, exc: BaseException) -> str:
        return Driver.failure(self, exc)  # type: ignore[arg-type]

    def classify(self, exc: BaseException) -> ErrorClass:
        return ErrorClass.connect_refused if isinstance(exc, ConnectionRefusedError) else ErrorClass.connection_lost


def answer(conn: Any) -> str:
    if conn.dead:
        raise ConnectionResetError(104, "Connection reset by peer")
    return f"{conn.host}#{conn.n}"


MEMBERS = [Member(host="db1"), Member(host="db2"), Member(host="db3")]


def test_ten_polls_of_three_members_open_three_connections() -> None:
    driver = FakeDriver()
    sessions = MemberSessions(driver, MEMBERS)  # type: ignore[arg-type]
    for _ in range(10):
        got = sessions.ask_all(answer)
    assert len(driver.opened) == 3  # was 30: one per member per poll
    first = {c.host: c.n for c in driver.opened}  # (the first poll connects the three at once)
    assert got == [(f"db{i}#{first[f'db{i}']}", None) for i in (1, 2, 3)]  # inventory order, kept connections
    sessions.close()
    assert all(c.closed for c in driver.opened)


def test_a_dead_kept_connection_is_not_the_member_down() -> None:
    """db2 restarted between two polls: its kept connection is dead, db2 answers on a new one."""
    driver = FakeDriver()
    sessions = MemberSessions(driver, MEMBERS)  # type: ignore[arg-type]
    sessions.ask_all(answer)
    old = next(c for c in driver.opened if c.host == "db2")
    old.dead = True
    value, why = sessions.ask(MEMBERS[1], answer)
    assert (value, why) == ("db2#4", None)
    assert old.closed and len(driver.opened) == 4


def test_a_member_that_refuses_a_new_connection_is_down_with_why() -> None:
    driver = FakeDriver(refusing={"db3"})
    sessions = MemberSessions(driver, MEMBERS)  # type: ignore[arg-type]
    got = sessions.ask_all(answer)
    assert got[2] == (None, "connect_refused: [Errno 111] Connection refused")
    assert got[0][1] is None and got[1][1] is None
    driver.refusing.clear()
    assert sessions.ask(MEMBERS[2], answer) == ("db3#3", None)  # back: asked again, on a new connection


def test_a_question_that_fails_on_a_new_connection_reports_and_keeps_nothing() -> None:
    driver = FakeDriver()
    sessions = MemberSessions(driver, MEMBERS)  # type: ignore[arg-type]

    def broken(conn: Any) -> str:
        raise ConnectionResetError(104, "Connection reset by peer")

    assert sessions.ask(MEMBERS[0], broken) == (None, "connection_lost: [Errno 104] Connection reset by peer")
    assert len(driver.opened) == 1 and driver.opened[0].closed
    sessions.ask(MEMBERS[0], answer)
    assert len(driver.opened) == 2


def test_after_close_nothing_is_kept_open() -> None:
    driver = FakeDriver()
    sessions = MemberSessions(driver, MEMBERS)  # type: ignore[arg-type]
    sessions.close()
    assert sessions.ask(MEMBERS[0], answer) == ("db1#1", None)
    assert driver.opened[0].closed
