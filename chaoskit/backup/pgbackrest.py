"""pgBackRest (2.x): backups taken on the repository host, restores on the restore target, both
with the configuration file the inventory names (the user's own; default pgBackRest's).

- `take`: `pgbackrest backup --type=full|diff|incr`, then `info` for the new backup's label;
- `flush_archive`: `pgbackrest check`, which switches the primary's WAL segment and waits until it
  is archived (what a DBA runs before restoring to an instant just past the current segment);
- `archive_view`: the primary's `pg_stat_archiver`;
- `restore_files`: `pgbackrest restore --delta --type=time --target=<UTC instant>
  --target-action=promote --archive-mode=off` on the target's data directory (without a target:
  the latest backup and every WAL segment archived after it); pgBackRest picks the newest backup
  that ended before the target. Archiving is off on the restored copy: it must never push WAL into the source's archive.

The tool runs with TZ=UTC, so its log stamps (local time, no zone) are UTC; they are put on the
control clock with the host's measured offset. Its restore log says the fetch and the file writes
as one pass (`restore command begin` to `end`): one phase. PostgreSQL's own log gives the rest:
recovery started, replay done (`recovery stopping before ...` or `redo done`), open (`archive
recovery complete`, after which it takes writes, else `database system is ready to accept
connections`), and the last transaction replayed (`last completed
transaction was at log time ...`)."""

from __future__ import annotations

import json
import shlex
from typing import Any, ClassVar

from chaoskit.backup.base import BackupTool, Mark, ToolAnswer, first_marks, line_time, utc_text
from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.models import RestoreTarget

TOOL_MARKS = (("restore_started", r"INFO: restore command begin"),
              ("files_restored", r"INFO: restore command end: completed successfully"))
SERVER_MARKS = (("recovery_started", r"LOG:  starting (point-in-time|archive) recovery"),
                ("redo_started", r"LOG:  redo starts at"),
                ("consistent", r"LOG:  consistent recovery state reached"),
                ("replay_done", r"LOG:  (recovery stopping (before|after)|redo done at)"),
                # promoted: writes are taken from the end of archive recovery (the postmaster says
                # "ready to accept connections" a moment later); after a plain crash recovery, that line
                ("open", r"LOG:  (archive recovery complete|database system is ready to accept connections)"))
LAST_COMMIT = "last completed transaction was at log time "


def _as(user: str) -> str:
    """The words that run what follows as the OS user `user` (who owns the repository or the data)."""
    return f"runuser -u {shlex.quote(user)} -- "


class PgBackRest(BackupTool):
    NAME = "pgbackrest"
    ENGINES: ClassVar[frozenset[str]] = frozenset({"postgres"})
    TYPES = ("full", "diff", "incr")

    def _command(self, config: str | None, *words: str) -> str:
        assert self.config.stanza is not None
        argv = ["env", "TZ=UTC", "pgbackrest", *([f"--config={config}"] if config else []),
                f"--stanza={self.config.stanza}", "--log-level-console=info", *words]
        return shlex.join(argv)

    def _repo(self, *words: str, timeout: float = 3600) -> tuple[int, str]:
        repo = self.config.repository
        cmd = _as(repo.os_user) + self._command(repo.config, *words)
        res = self.remote(repo.host).shell(cmd, check=False, timeout=timeout)
        return res.exited, (res.stdout + res.stderr)

    def missing(self, host: str, config: str | None, os_user: str) -> str | None:
        check = _as(os_user) + "env TZ=UTC pgbackrest version" + (
            f" && {_as(os_user)}test -r {shlex.quote(config)}" if config else "")
        res = self.remote(host).shell(check, check=False, timeout=60)
        if res.exited == 0:
            return None
        said = (res.stderr or res.stdout).strip().splitlines()
        if res.exited in (126, 127):  # env: not found, or not executable where PATH has it
            return f"{host}: pgbackrest cannot be run by {os_user} ({said[-1] if said else 'not found'})"
        if config and res.stdout.startswith("pgBackRest"):
            return f"{host}: {config} cannot be read by {os_user}"
        return f"{host}: pgbackrest version exited {res.exited}: {said[-1] if said else ''}".rstrip(": ")

    def take(self, kind: str) -> ToolAnswer:
        if kind not in self.TYPES:
            raise ValueError(f"pgBackRest takes {', '.join(self.TYPES)} backups, not {kind}")
        exited, out = self._repo("backup", f"--type={kind}")
        marks = first_marks(out, (("backup_started", r"INFO: backup command begin"),
                                  ("backup_ended", r"INFO: backup command end: completed successfully")),
                            "pgbackrest log", self.offset(self.config.repository.host), assume_utc=True)
        facts: dict[str, Any] = {}
        for line in out.splitlines():
            if "new backup label = " in line:
                facts["label"] = line.rsplit("= ", 1)[1].strip()
            if "backup size = " in line:
                facts["size"] = line.split("backup size = ", 1)[1].strip()
        return ToolAnswer(exited == 0, _tail(out), marks, facts)

    def backups(self) -> list[dict[str, Any]]:
        exited, out = self._repo("--output=json", "info", timeout=120)
        if exited != 0:
            raise RuntimeError(f"pgbackrest info failed: {_tail(out)}")
        start = out.find("[")
        data = json.loads(out[start:]) if start >= 0 else []
        found = []
        for stanza in data:
            for b in stanza.get("backup") or []:
                ts = b.get("timestamp") or {}
                found.append({"label": b.get("label"), "type": b.get("type"), "start": ts.get("start"),
                              "stop": ts.get("stop"), "error": b.get("error")})
        return sorted(found, key=lambda b: b["stop"] or 0)

    def flush_archive(self) -> ToolAnswer:
        exited, out = self._repo("check", timeout=600)
        return ToolAnswer(exited == 0, _tail(out))

    def archive_view(self, driver: Any, conn: Any) -> dict[str, Any]:
        rows = driver.query(conn, "SELECT last_archived_wal, extract(epoch FROM last_archived_time), "
                                  "last_failed_wal, extract(epoch FROM last_failed_time), "
                                  "pg_walfile_name(pg_current_wal_lsn()), extract(epoch FROM now()), "
                                  "extract(epoch FROM current_setting('archive_timeout')::interval) "
                                  "FROM pg_stat_archiver")
        wal, at, failed, failed_at, current, now, timeout = rows[0]
        at_t, now_t = _f(at), _f(now)
        return {"last_archived": wal, "last_archived_t_host": at_t, "last_failed": failed,
                "last_failed_t_host": _f(failed_at), "current_segment": current, "now_t_host": now_t,
                "archive_timeout_s": _f(timeout),
                "archive_age_s": round(now_t - at_t, 3) if at_t is not None and now_t is not None else None}

    def restore_files(self, target: RestoreTarget, target_t: float | None) -> ToolAnswer:
        words = ["--delta", f"--pg1-path={target.data_dir}", "--archive-mode=off"]
        if target_t is not None:
            words += ["--type=time", f"--target={utc_text(target_t)}", "--target-action=promote"]
        cmd = _as(target.os_user) + self._command(target.config, *words, "restore")
        res = self.remote(target.host).shell(cmd, check=False, timeout=3600)
        out = res.stdout + res.stderr
        marks = first_marks(out, TOOL_MARKS, "pgbackrest log", self.offset(target.host), assume_utc=True)
        facts: dict[str, Any] = {}
        for line in out.splitlines():
            if "restore backup set " in line:
                facts["backup"] = line.split("restore backup set ", 1)[1].split(",", 1)[0].strip()
            if "restore size = " in line:
                facts["size"] = line.split("restore size = ", 1)[1].strip()
        return ToolAnswer(res.exited == 0, _tail(out), marks, facts)

    def server_marks(self, log_text: str, offset: ClockOffset) -> list[Mark]:
        return first_marks(log_text, SERVER_MARKS, "postgres log", offset)

    def last_commit(self, log_text: str) -> float | None:
        for line in log_text.splitlines():
            if LAST_COMMIT in line:
                return line_time(line.split(LAST_COMMIT, 1)[1])
        return None


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
