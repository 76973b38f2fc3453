"""Dameng DM through dmPython (extra `chaoskit[dm]`).

Reconnect-to-new-primary the way DM applications do it: the cluster `dsn` is a DM service name
resolved by dm_svc.conf (e.g. `DMHA` with `DMHA=(10.0.0.1:5236,10.0.0.2:5236)` and
`LOGIN_MODE=(1)`); without it, the members are tried in order and the first whose instance is
in PRIMARY/NORMAL mode wins. Parameters use qmark style (`?`).

Error classes come from DM's error codes where they are certain (checked here against a real
refused and a real silent listener: -70028, -70019) and from the message text otherwise.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.errors import InputError
from chaoskit.inventory.models import Member

_REFUSED_CODES = {-70028, -70020, -70089, -2501, -2504}
_LOST_CODES = {-70019, -70065, -70066, -70025, -70035}
_WRITABLE_MODES = {"PRIMARY", "NORMAL"}


def _dm() -> Any:
    try:
        import dmPython
    except ImportError as exc:  # the extra is optional
        from chaoskit.errors import InputError

        raise InputError("dmPython is not installed: pip install 'chaoskit[dm]'") from exc
    return dmPython


def dm_error_code(exc: BaseException) -> tuple[int | None, str]:
    """(code, message) from a dmPython exception, whose first arg is a DmError object."""
    if exc.args:
        info = exc.args[0]
        code = getattr(info, "code", None)
        message = getattr(info, "message", None)
        if code is not None:
            return int(code), str(message or "")
    return None, str(exc)


class DamengDriver(Driver):
    engine = "dameng"

    family = "dameng"
    placeholder = "?"

    def connect_params(self, server: str, port: int | None) -> dict[str, Any]:
        if self.profile.statement_timeout is not None:
            raise InputError("dmPython offers no statement timeout chaoskit can set: leave statement_timeout "
                             "unset for a DM cluster", source=self.inventory.source,
                             field=f"clusters.{self.cluster.name}")
        params: dict[str, Any] = {
            "user": self.cluster.user, "server": server,
            "login_timeout": max(1, math.ceil(self.connect_timeout)),
            "autoCommit": True,
        }
        if port is not None:
            params["port"] = port
        password = self.password()
        if password is not None:
            params["password"] = password
        params.update(dict(self.cluster.options))
        return params

    def connect_member(self, member: Member) -> Any:
        return _dm().connect(**self.connect_params(*self.member_endpoint(member)))

    def connect_writer(self) -> Any:
        if self.cluster.dsn:  # a service name: dm_svc.conf picks the primary
            return _dm().connect(**self.connect_params(self.cluster.dsn, None))
        last: BaseException | None = None
        for member in self.cluster.members:
            conn = None
            try:
                conn = self.connect_member(member)
                if self.is_writable(conn):
                    return conn
                last = RuntimeError(f"{member.host} is a standby (read-only)")
            except Exception as exc:  # dmPython raises its own Error types
                last = exc
            self.close_quietly(conn)
        assert last is not None
        raise last

    def begin(self, conn: Any) -> None:
        conn.autoCommit = False

    def commit(self, conn: Any) -> None:
        try:
            conn.commit()
        finally:
            conn.autoCommit = True

    def rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:  # the connection may be gone; the server rolls back on its own
            pass
        finally:
            with contextlib.suppress(Exception):
                conn.autoCommit = True

    def create_index(self, conn: Any, name: str, table: str, columns: str) -> None:
        if not self.query(conn, "SELECT 1 FROM USER_INDEXES WHERE INDEX_NAME = ?", (name.upper(),)):
            self.execute(conn, f"CREATE INDEX {name} ON {table} ({columns})")

    def is_writable(self, conn: Any) -> bool:
        cur = conn.cursor()
        try:
            cur.execute("SELECT MODE$, STATUS$ FROM V$INSTANCE")
            mode, status = cur.fetchone()
        finally:
            cur.close()
        return str(mode).upper() in _WRITABLE_MODES and str(status).upper() == "OPEN"

    def server_version(self, conn: Any) -> str:
        cur = conn.cursor()
        try:
            cur.execute("SELECT ID_CODE")
            return str(cur.fetchone()[0])
        finally:
            cur.close()

    def _fileno(self, conn: Any) -> int | None:
        return None  # dmPython exposes no socket; its login/socket timeouts bound the wait

    def _classify(self, exc: BaseException) -> ErrorClass:
        code, message = dm_error_code(exc)
        text = message.lower()
        if code in _REFUSED_CODES:
            return ErrorClass.connect_refused
        if code in _LOST_CODES:
            return ErrorClass.connection_lost
        if "standby" in text or "read only" in text or "readonly" in text or "只读" in message:
            return ErrorClass.read_only
        if "timeout" in text or "超时" in message:
            return ErrorClass.timeout
        if "deadlock" in text or "死锁" in message or "serializ" in text:
            return ErrorClass.serialization
        if "constraint" in text or "unique" in text or "约束" in message or "唯一" in message:
            return ErrorClass.constraint
        if "network" in text or "socket" in text or "connection" in text or "网络" in message:
            return ErrorClass.connection_lost
        return ErrorClass.other
