"""Dameng DM through dmPython (extra `chaoskit[dm]`).

Reconnect-to-new-primary the way DM applications do it: the cluster `dsn` is a DM service name
resolved by a dm_svc.conf (e.g. `DMHA` with `DMHA=(10.0.0.1:5236,10.0.0.2:5236)` and
`LOGIN_MODE=(1)`): the cluster's `dm_svc` settings, written by chaoskit into a directory of its
own given to dmPython as `dmsvc_path` (a directory: dmPython reads `dm_svc.conf` in it), or the
host's own file where `options.dmsvc_path` names its directory. Without a service name, the
members are tried in order and the first whose instance is in PRIMARY/NORMAL mode wins.
Parameters use qmark style (`?`).

Error classes come from DM's error codes where they are certain (checked here against a real
refused and a real silent listener: -70028, -70019) and from the message text otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.errors import InputError
from chaoskit.inventory.models import Cluster, Inventory, Member

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


def dm_svc_text(cluster: Cluster, inventory: Inventory) -> str:
    """The dm_svc.conf of a cluster whose `dsn` is a service name: the service's endpoint list on
    the global line (`NAME=(ip:port,ip:port)`) and its client settings in the service's own
    section (`[NAME]`), the shape DM's manual gives. Values are validated numbers and endpoints."""
    svc = cluster.dm_svc
    assert svc is not None and cluster.dsn is not None
    endpoints = list(svc.endpoints) or [f"{_bracketed(inventory.member_address(m))}:{m.db_port or cluster.port}"
                                        for m in cluster.members]
    lines = [f"{cluster.dsn}=({','.join(endpoints)})", "", f"[{cluster.dsn}]", f"LOGIN_MODE=({svc.login_mode})",
             f"SWITCH_TIMES=({svc.switch_times})", f"SWITCH_INTERVAL=({svc.switch_interval_ms})"]
    if svc.ep_selector is not None:
        lines.append(f"EP_SELECTOR=({svc.ep_selector})")
    if svc.auto_reconnect is not None:
        lines.append(f"AUTO_RECONNECT=({svc.auto_reconnect})")
    return "\n".join(lines) + "\n"


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def dm_svc_dir(text: str) -> str:
    """A directory holding this text as its `dm_svc.conf`, written once per content (no secret is
    in it) under the temporary directory, so every load worker of a run reads the same settings.
    A directory, because that is what dmPython's `dmsvc_path` takes (measured with dmPython 2.6.1:
    given a file's path it reads nothing and resolves the service name as a host)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "chaoskit-dm-svc" / digest
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = folder / "dm_svc.conf"
    if not path.exists() or path.read_text() != text:
        tmp = folder / f".dm_svc.conf.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.replace(path)
    return str(folder)


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
        if self.cluster.dm_svc is not None:
            params["dmsvc_path"] = dm_svc_dir(dm_svc_text(self.cluster, self.inventory))
        return params

    def connect_member(self, member: Member) -> Any:
        return _dm().connect(**self.connect_params(*self.member_endpoint(member)))

    def connect_writer(self) -> Any:
        return self._first_member(writable=True)

    def connect_client(self) -> Any:
        """The writer; on a read route wherever its service name's dm_svc.conf sends clients
        (LOGIN_MODE standby only or standby first), or without one the first member that
        answers, whatever its mode."""
        return self._first_member(writable=not self.cluster.read_route)

    def _first_member(self, writable: bool) -> Any:
        if self.cluster.dsn:  # a service name: dm_svc.conf picks the instance
            return _dm().connect(**self.connect_params(self.cluster.dsn, None))
        last: BaseException | None = None
        for member in self.cluster.members:
            conn = None
            try:
                conn = self.connect_member(member)
                if not writable or self.is_writable(conn):
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

    # the standbys a primary ships redo to, with the archive's state, as DM's own drivers ask it
    # (DM's Go driver, rw_util.go: the newer V$DM_MAL_INI columns first, then the older ones)
    STANDBYS_SQL = ("SELECT M.MAL_INST_HOST, A.ARCH_STATUS FROM V$ARCH_STATUS A JOIN V$DM_MAL_INI M "
                    "ON A.ARCH_DEST = M.MAL_INST_NAME WHERE A.ARCH_TYPE IN ('REALTIME', 'TIMELY', 'SYNC', 'ASYNC')",
                    "SELECT M.INST_IP, A.ARCH_STATUS FROM V$ARCH_STATUS A JOIN V$DM_MAL_INI M "
                    "ON A.ARCH_DEST = M.INST_NAME WHERE A.ARCH_TYPE IN ('REALTIME', 'TIMELY', 'SYNC', 'ASYNC')")

    def replication_status(self, conn: Any) -> list[tuple[str, str, int | None, float | None]]:
        """On the primary: each standby's address and its archive's state (VALID: `streaming`,
        else the state lower-cased); DM reports no lag in bytes here (null)."""
        last: BaseException | None = None
        for sql in self.STANDBYS_SQL:
            try:
                rows = self.query(conn, sql)
            except Exception as exc:  # the other column names: the other DM build
                last = exc
                continue
            return [(str(host), "streaming" if str(state).upper() == "VALID" else str(state).lower(), None, None)
                    for host, state in rows]
        assert last is not None
        raise last

    def position(self, conn: Any) -> str | None:
        """The instance's current LSN (`V$RLOG.CUR_LSN`): on a standby, how far it has applied
        the primary's redo; DM's LSNs are sequence numbers, not byte offsets."""
        rows = self.query(conn, "SELECT CUR_LSN FROM V$RLOG")
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def table_exists(self, conn: Any, table: str) -> bool:
        # an unquoted identifier is stored upper-cased; the schema is the user's own unless named
        schema, _, name = table.upper().rpartition(".")
        sql = self.q("SELECT COUNT(*) FROM ALL_TABLES WHERE OWNER = COALESCE(%s, USER) AND TABLE_NAME = %s")
        return int(self.query(conn, sql, (schema or None, name))[0][0]) > 0

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
