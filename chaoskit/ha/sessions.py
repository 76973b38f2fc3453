"""Connections a manager keeps open to its members between polls.

Why: managers whose view is the servers' own answers (MHA: each server's writability; Galera:
each node's wsrep status) are polled by the role probe ten times a second. A fresh connection
per member per poll was ~30 connects a second on a three-node cluster during a drill: load on
the servers the drill is measuring, and a connect storm in their logs. One connection per member
is kept instead; a question that fails on a kept connection is asked once more on a new one (the
member may have restarted since: its old connection is dead, the member is not), and only a
failure on a new connection reports the member down, with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from chaoskit.db.base import Driver
from chaoskit.inventory.models import Member

T = TypeVar("T")


class MemberSessions:
    def __init__(self, driver: Driver, members: list[Member]) -> None:
        self.driver = driver
        self.members = list(members)
        self._conns: dict[str, Any] = {}
        self._locks = {m.host: threading.Lock() for m in self.members}
        self._pool: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()
        self._closed = False

    def ask(self, member: Member, question: Callable[[Any], T]) -> tuple[T | None, str | None]:
        """(answer, None), or (None, why) when the member cannot answer on a new connection."""
        with self._locks[member.host]:
            conn = self._conns.pop(member.host, None)
            if conn is not None:
                try:
                    answer = question(conn)
                    self._keep(member, conn)
                    return answer, None
                except Exception:  # a dead kept connection says nothing about the member now
                    Driver.close_quietly(conn)
            conn = None
            try:
                conn = self.driver.connect_member(member)
                answer = question(conn)
            except Exception as exc:
                Driver.close_quietly(conn)
                return None, self.driver.failure(exc)
            self._keep(member, conn)
            return answer, None

    def ask_all(self, question: Callable[[Any], T]) -> list[tuple[T | None, str | None]]:
        """`ask` every member at once (a hung member costs its own timeout, not the others'), in
        inventory order."""
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.members)),
                                                thread_name_prefix="member-session")
            pool = self._pool
        return list(pool.map(lambda m: self.ask(m, question), self.members))

    def _keep(self, member: Member, conn: Any) -> None:
        if self._closed:
            Driver.close_quietly(conn)
        else:
            self._conns[member.host] = conn

    def close(self) -> None:
        self._closed = True
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for host in list(self._conns):
            Driver.close_quietly(self._conns.pop(host, None))
