"""The archive watched through a drill: once a second the primary's own view of its archiving
(`BackupTool.archive_view`: the last archived WAL segment and when, the last failure and when), so
the drill shows the archive falling behind while the repository is unreachable or its disk full,
and what a restore after it can reach.

A reading that fails (the primary is down, a connection refused) is kept as such: a gap in the
series says the primary could not be asked, never that the archive was current. The age of the
archive is the primary's clock minus the last archived segment's time, both read in one
statement on the primary, so no clock offset enters it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from chaoskit.backup.base import BackupTool
from chaoskit.db.base import Driver

INTERVAL_S = 1.0
READ_TIMEOUT_S = 2.0


class ArchiveWatch:
    def __init__(self, tool: BackupTool, driver: Driver, now: Callable[[], float],
                 interval: float = INTERVAL_S) -> None:
        self.tool, self.now, self.interval = tool, now, interval
        self.driver = driver.tuned(connect_timeout=READ_TIMEOUT_S, op_timeout=READ_TIMEOUT_S)
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="archive-watch", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=READ_TIMEOUT_S * 3 + self.interval)
        Driver.close_quietly(self._conn)
        return list(self.samples)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.read())
            self._stop.wait(self.interval)

    def read(self) -> dict[str, Any]:
        t = self.now()
        try:
            if self._conn is None:
                self._conn = self.driver.connect_writer()
            view = self.tool.archive_view(self.driver, self._conn)
        except Exception as exc:
            Driver.close_quietly(self._conn)
            self._conn = None
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            return {"t": t, "error": f"{type(exc).__name__}: {first}"}
        failing = view.get("last_failed_t_host") is not None and (
            view.get("last_archived_t_host") is None or view["last_failed_t_host"] > view["last_archived_t_host"])
        return {"t": t, "last_archived": view.get("last_archived"), "archive_age_s": view.get("archive_age_s"),
                "current_segment": view.get("current_segment"), "failing": failing,
                "archive_timeout_s": view.get("archive_timeout_s"),
                "last_failed": view.get("last_failed")}
