"""What a backup tool does for a drill, and the restore every tool shares.

A tool module (one per tool: `pgbackrest`, ...) defines a `BackupTool` subclass with `NAME`: how
to take a backup, list the backups, make the archive hold everything written so far, read the
archive's own view on the primary, and restore files for a target instant; and how to read its
own log lines and the restored server's into marks. `restore` (here) is the rest, the same for
every tool: the restore target's server stopped, the files restored, the server started by the
inventory's start command, waited for until it answers as a writable primary, its log read.

Every value that reaches a host is the inventory's, validated there (paths, names) or made here
(an instant formatted from a float), and quoted; the tools' options are given as `--name=value`
words, never a string a value could end.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from chaoskit.faults import journal
from chaoskit.faults.hostscript import FaultScripts, HostFacts, process_files
from chaoskit.hostlogs import file_position, read_from
from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.models import BackupConfig, Cluster, Inventory, Member, RestoreTarget
from chaoskit.inventory.remote import Remote

# the restore's phases, in order: each from one mark to the next (`Mark.name`)
PHASES = (
    ("fetch_and_restore_files", "restore_started", "files_restored"),
    ("start", "start_sent", "recovery_started"),
    ("replay", "recovery_started", "replay_done"),
    ("open", "replay_done", "open"),
    ("answering", "open", "answering"),
)
OPEN_TIMEOUT_S = 600.0  # a restored server that does not answer as a primary within this has failed


@dataclass(frozen=True)
class Mark:
    """One moment of a backup or restore, on the control clock: from a log line of the tool or
    of the restored server (`line`, as written), or chaoskit's own (`line` None)."""

    name: str
    t: float
    source: str
    line: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "t": self.t, "source": self.source, "line": self.line}


@dataclass
class ToolAnswer:
    ok: bool
    answer: str
    marks: list[Mark] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # what the tool said (a backup label, sizes)


def utc_text(t: float) -> str:
    """An instant as PostgreSQL and the tools read it: UTC, microseconds."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?: ?(UTC|GMT|[+-]\d\d(?::?\d\d)?)\b)?")


def line_time(line: str, assume_utc: bool = False) -> float | None:
    """The host-clock instant a log line starts with ('2026-12-07 14:09:09.194 UTC ...'), or None
    when it has none or its zone is a name other than UTC/GMT (an abbreviation can mean several
    zones). `assume_utc`: a stamp without a zone is UTC (a tool run with TZ=UTC)."""
    m = _STAMP.match(line)
    if not m:
        return None
    zone = m.group(2)
    if zone is None and not assume_utc:
        return None
    base = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f" if "." in m.group(1) else "%Y-%m-%d %H:%M:%S")
    t = base.replace(tzinfo=UTC).timestamp()
    if zone and zone[0] in "+-":
        digits = zone[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) >= 4 else 0)
        t -= (1 if zone[0] == "+" else -1) * minutes * 60
    return t


def first_marks(text: str, patterns: tuple[tuple[str, str], ...], source: str, offset: ClockOffset,
                assume_utc: bool = False) -> list[Mark]:
    """Each pattern's first line in `text` as a mark (name, regex), its stamp put on the control
    clock with the host's offset; lines without a stamp are skipped."""
    out: dict[str, Mark] = {}
    for line in text.splitlines():
        for name, pattern in patterns:
            if name in out or not re.search(pattern, line):
                continue
            t = line_time(line, assume_utc)
            if t is not None:
                out[name] = Mark(name, offset.to_control(t), source, line.strip()[:300])
    return sorted(out.values(), key=lambda m: m.t)


class BackupTool:
    """One tool's backups and restores of one cluster (`NAME` answers `backup.tool`)."""

    NAME: ClassVar[str] = ""
    ENGINES: ClassVar[frozenset[str]] = frozenset()
    TYPES: ClassVar[tuple[str, ...]] = ("full",)  # what `backup` can take

    def __init__(self, cluster: Cluster, inventory: Inventory, remote: Callable[[str], Remote],
                 offset: Callable[[str], ClockOffset]) -> None:
        assert cluster.backup is not None
        self.cluster, self.inventory, self.remote, self.offset = cluster, inventory, remote, offset
        self.config: BackupConfig = cluster.backup

    # -- what each tool says -----------------------------------------------------------------
    def missing(self, host: str, config: str | None, os_user: str) -> str | None:
        """Why the tool cannot run on `host` as `os_user` with `config` (read-only: its version and
        configuration file), None when it can: a drill refuses before anything is touched."""
        raise NotImplementedError

    def take(self, kind: str) -> ToolAnswer:
        raise NotImplementedError

    def backups(self) -> list[dict[str, Any]]:
        """The repository's backups, oldest first: label, type, start and stop (epoch seconds)."""
        raise NotImplementedError

    def flush_archive(self) -> ToolAnswer:
        """Make the archive hold everything the primary wrote so far (a switch of the current
        WAL segment or binlog, waited for until archived)."""
        raise NotImplementedError

    def archive_view(self, driver: Any, conn: Any) -> dict[str, Any]:
        """The archive as the primary sees it now: the last archived segment and when, the last
        failure and when (host clock, as the server reports them)."""
        raise NotImplementedError

    def restore_files(self, target: RestoreTarget, target_t: float | None) -> ToolAnswer:
        """The files of the backup for `target_t` (None: the latest) restored into the target's
        data directory, set to recover to that instant and open."""
        raise NotImplementedError

    def server_marks(self, log_text: str, offset: ClockOffset) -> list[Mark]:
        """The restored server's own marks from its log (recovery started, replay done, open)."""
        raise NotImplementedError

    def last_commit(self, log_text: str) -> float | None:
        """The commit stamp of the last transaction the restored server replayed, as its log says:
        the source primary's clock (the stamp was written there), not the restore host's."""
        return None


def restored_cluster(cluster: Cluster, target: RestoreTarget) -> Cluster:
    """The restored server as a cluster of one member (no manager): what the truth is read from."""
    member = Member(host=target.host, db_port=target.port, data_dir=target.data_dir)
    return Cluster(name=f"{cluster.name}-restored", engine=cluster.engine, members=(member,), port=target.port,
                   database=cluster.database, user=cluster.user, password=cluster.password, options=cluster.options)


STOP_SERVER = r"""
for n in $PROCS; do
  running_now "$n" || continue
  sp=$_rp
  kill -s TERM "$sp"
  i=0
  while alive "$sp" && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  if alive "$sp"; then kill -s KILL "$sp"; sleep 0.5; fi
done
"""
START_SERVER = "restart_missing\nrestart_pending && exit 1\nexit 0\n"


def _server_script(remote_root: str, target: RestoreTarget, inventory: Inventory, body: str) -> str:
    ref = inventory.processes_on(target.host)[target.process]
    scripts = FaultScripts(inject="", revert=body, active="", prepare="", env={"PROCS": target.process},
                           files=process_files(HostFacts(target.host, {target.process: ref}), [target.process]))
    return journal.oneshot_script(scripts, body, root=remote_root)


LOG_LIMIT = 4 << 20  # of the restored server's log read after its start


def restore(tool: BackupTool, target_t: float | None, *, answers: Callable[[], bool], now: Callable[[], float],
            sleep: Callable[[float], None] = time.sleep, journal_root: str = journal.ROOT) -> dict[str, Any]:
    """The whole restore on the inventory's restore target; the record of the `restore` action:
    ok, the marks and phases, what the tool and the server said. `answers()` is True once the
    restored server takes a write (a connection to it as a read-write primary)."""
    target = tool.config.restore_to
    assert target is not None
    remote = tool.remote(target.host)
    offset = tool.offset(target.host)
    record: dict[str, Any] = {"kind": "restore", "t_sent": now(), "member": target.host}
    marks: list[Mark] = []

    def fail(why: str) -> dict[str, Any]:
        return {**record, "ok": False, "t_answered": now(), "answer": why[-600:],
                "marks": [m.to_dict() for m in marks], "phases": phases(marks)}

    stopped = remote.shell(_server_script(journal_root, target, tool.inventory, STOP_SERVER), check=False, timeout=120)
    if stopped.exited != 0:
        return fail(f"the restore target's server did not stop: {(stopped.stderr or stopped.stdout).strip()}")
    files = tool.restore_files(target, target_t)
    marks += files.marks
    record["tool"] = files.facts
    if not files.ok:
        return fail(f"{tool.NAME} restore failed: {files.answer}")
    # where the log ends before the start (a log not there yet: from its beginning)
    at = file_position(remote, target.log) if target.log else 0
    log_from = at[0] if isinstance(at, tuple) else 0
    t_start = now()
    marks.append(Mark("start_sent", t_start, "chaoskit"))
    started = remote.shell(_server_script(journal_root, target, tool.inventory, START_SERVER), check=False,
                           timeout=180)
    if started.exited != 0:
        said = (started.stderr or started.stdout).strip() or "its start command ran, and it is not running"
        return fail(f"the restored server did not start: {said}{_server_said(remote, target, log_from)}")
    deadline = t_start + OPEN_TIMEOUT_S
    while not answers():
        if now() > deadline:
            return fail(f"the restored server did not take a write within {OPEN_TIMEOUT_S:g} s")
        sleep(0.1)
    marks.append(Mark("answering", now(), "chaoskit"))
    if target.log:
        try:
            text = read_from(remote, target.log, log_from, LOG_LIMIT).decode("utf-8", errors="replace")
        except OSError as exc:  # the restore stands; its server's phases are then unknown, and said
            text, record["log_error"] = "", str(exc)
        marks += tool.server_marks(text, offset)
        record["last_commit_host_t"] = tool.last_commit(text)
        record["log_lines"] = text.splitlines()[-60:]
    marks.sort(key=lambda m: m.t)
    return {**record, "ok": True, "t_answered": now(), "answer": files.answer[-600:],
            "marks": [m.to_dict() for m in marks], "phases": phases(marks), "clock_uncertainty_s": offset.uncertainty_s}


def _server_said(remote: Remote, target: RestoreTarget, log_from: int) -> str:
    """The restored server's own words on why it stopped: its log's last FATAL or PANIC lines
    since the start (nothing where the target declares no log or it cannot be read)."""
    if not target.log:
        return ""
    try:
        text = read_from(remote, target.log, log_from, LOG_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if "FATAL:" in ln or "PANIC:" in ln]
    return f"; its log ({target.log}): {' | '.join(lines[-3:])}" if lines else ""


def phases(marks: list[Mark]) -> list[dict[str, Any]]:
    """Each phase with both ends marked: name, start, end, seconds."""
    at = {m.name: m.t for m in marks}
    out = []
    for name, start, end in PHASES:
        if start in at and end in at:
            out.append({"phase": name, "from": start, "to": end, "t_start": at[start], "t_end": at[end],
                        "seconds": round(at[end] - at[start], 3)})
    return out
