"""The HA manager's and the database's own log lines of a run's window, kept with the evidence.

A reviewer who doubts a figure asks what Patroni, repmgrd or the server itself said while the fault
was on. Timestamps in logs come in many formats (and on the host's clock), so the window is cut by
position instead: each file's size (and inode) is read when the load starts, and what was appended
until the end of the run is fetched afterwards. That is exactly the lines written during the run,
whatever their format; a file rotated meanwhile is read from its start and said so.

Bounded: at most `limit` bytes per file (the first and the last half of the window, cut at line
ends, with a marker saying how much was left out). Secrets never reach the run directory: the
cluster's and the manager's passwords are replaced wherever they appear, as are the values of
`password=`-like settings, `IDENTIFIED BY '...'`, `PASSWORD '...'` and URI credentials.

Paths come from the inventory (`members[].logs`, validated as safe paths) and from the manager
(`HAManager.log_sources()`, e.g. repmgrd's `log_file`); every path reaches the host shell-quoted,
and every number in the commands is computed here.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaoskit.ha.base import HAManager
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.inventory.models import Cluster, Host
    from chaoskit.inventory.remote import Remote

DEFAULT_LIMIT = 256 * 1024
REDACTED = "[redacted]"

_SECRET_SETTING = re.compile(r"(?i)\b((?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key)\s*[=:]\s*)"
                             r"(?:'[^']*'|\"[^\"]*\"|[^\s,;&]+)")
_SQL_SECRET = re.compile(r"(?i)\b((?:IDENTIFIED\s+BY|PASSWORD)\s+)(?:'[^']*'|\"[^\"]*\")")
_URI_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)")


def redact(text: str, secrets: list[str]) -> tuple[str, int]:
    """The text with every known secret value and every secret-looking value replaced, and how
    many replacements were made."""
    count = 0
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        n = text.count(secret)
        if n:
            text = text.replace(secret, REDACTED)
            count += n
    for pattern, repl in ((_SECRET_SETTING, r"\1" + REDACTED), (_SQL_SECRET, r"\1'" + REDACTED + "'"),
                          (_URI_CREDENTIALS, r"\1" + REDACTED + r"\2")):
        text, n = pattern.subn(repl, text)
        count += n
    return text, count


# a server's or manager's own complaint: PostgreSQL `FATAL:  ...`, Patroni `ERROR: ...`, MariaDB
# `[ERROR] ...`
_COMPLAINT = re.compile(r"(?:\b(?:PANIC|FATAL|ERROR):|\[(?:ERROR|FATAL)\])\s*(.*\S)")
COMPLAINTS_KEPT = 3


def complaints(text: str, keep: int = COMPLAINTS_KEPT) -> list[str]:
    """The last `keep` distinct error lines of a log window (the line as written, cut at 300
    characters), oldest first: what the server said when something did not come back."""
    seen: dict[str, str] = {}
    for line in text.splitlines():
        m = _COMPLAINT.search(line)
        if m:
            seen.pop(m.group(1), None)  # the same message again moves it to the end
            seen[m.group(1)] = line.strip()[:300]
    return list(seen.values())[-keep:]


@dataclass(frozen=True)
class LogSource:
    host: str
    label: str
    path: str


def sources(cluster: Cluster, manager: HAManager | None, hosts: tuple[Host, ...] = ()) -> list[LogSource]:
    """Every member's logs: the inventory's, then the manager's own where the inventory names none
    under that label; then the logs of other hosts the drill acts on (`hosts[].logs`: etcd, a
    proxy, a monitor)."""
    out: dict[tuple[str, str], LogSource] = {}
    for h in hosts:
        for label, path in h.logs.items():
            out[(h.name, label)] = LogSource(h.name, label, path)
    for m in cluster.members:
        for label, path in m.logs.items():
            out[(m.host, label)] = LogSource(m.host, label, path)
    if manager is not None:
        try:
            found = manager.log_sources()
        except Exception:  # evidence is best-effort; the drill goes on without the manager's paths
            found = {}
        for host, files in found.items():
            for label, path in files.items():
                out.setdefault((host, label), LogSource(host, label, path))
    return list(out.values())


def known_secrets(cluster: Cluster) -> list[str]:
    values = []
    for ref in (cluster.password, getattr(cluster.ha, "password", None)):
        if ref is None or not hasattr(ref, "resolve"):
            continue
        with contextlib.suppress(Exception):
            values.append(ref.resolve())
    return values


def file_position(remote: Remote, path: str) -> tuple[int, str] | str:
    """A host file's size and inode (what a later read starts from, and whether it was rotated
    meanwhile), or why they could not be read."""
    res = remote.shell(f"stat -L -c '%s %i' -- {shlex.quote(path)}", check=False)
    parts = res.stdout.split()
    if res.exited != 0 or len(parts) != 2 or not parts[0].isdigit():
        return (res.stderr.strip() or res.stdout.strip() or f"stat exited {res.exited}")[:200]
    return int(parts[0]), parts[1]


def read_from(remote: Remote, path: str, offset: int, length: int) -> bytes:
    """`length` bytes of a host file from `offset` (both computed here), base64 so any byte survives
    the shell."""
    import base64

    cmd = f"tail -c +{offset + 1} -- {shlex.quote(path)} | head -c {length} | base64 -w0"
    res = remote.shell(cmd, timeout=60, check=False)
    if res.exited != 0:
        raise OSError(res.stderr.strip()[:200] or f"read exited {res.exited}")
    return base64.b64decode(res.stdout.strip() or b"")


@dataclass
class LogWindow:
    """Marks every file's position at the start of a run and fetches what was appended by its end."""

    pool: RemotePool
    files: list[LogSource]
    secrets: list[str] = field(default_factory=list)
    limit: int = DEFAULT_LIMIT
    start: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    problems: dict[tuple[str, str], str] = field(default_factory=dict)

    def _stat(self, src: LogSource) -> tuple[int, str] | None:
        got = file_position(self.pool.get(src.host), src.path)
        if isinstance(got, str):
            self.problems[(src.host, src.label)] = got
            return None
        return got

    def mark(self) -> None:
        for src in self.files:
            try:
                got = self._stat(src)
            except Exception as exc:  # host unreachable: said in the evidence, the drill goes on
                self.problems[(src.host, src.label)] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            if got is not None:
                self.start[(src.host, src.label)] = got

    def _read(self, src: LogSource, offset: int, length: int) -> bytes:
        return read_from(self.pool.get(src.host), src.path, offset, length)

    def collect(self, write: Any = None) -> list[dict[str, Any]]:
        """One record per file (host, label, path, the window in bytes, what was kept); `write(name,
        text)` stores each file's lines as `logs/<host>/<label>.log`. Never raises."""
        out = []
        for src in self.files:
            key = (src.host, src.label)
            rec: dict[str, Any] = {"host": src.host, "label": src.label, "path": src.path, "file": None}
            if key not in self.start:
                rec["note"] = f"not collected: {self.problems.get(key, 'no start position')}"
                out.append(rec)
                continue
            try:
                rec.update(self._collect_one(src, *self.start[key], write))
            except Exception as exc:
                rec["note"] = f"not collected: {type(exc).__name__}: {exc}"[:240]
            out.append(rec)
        return out

    def _collect_one(self, src: LogSource, start: int, inode: str, write: Any) -> dict[str, Any]:
        got = self._stat(src)
        if got is None:
            raise OSError(self.problems.get((src.host, src.label), "stat failed"))
        end, end_inode = got
        rotated = end_inode != inode or end < start
        first = 0 if rotated else start
        window = end - first
        if window <= self.limit:
            data, omitted = self._read(src, first, window), 0
        else:  # the first and the last half only, never the whole window over the wire
            half = self.limit // 2
            data, omitted = _join_halves(self._read(src, first, half), self._read(src, end - half, half),
                                         window - 2 * half)
        text, redactions = redact(data.decode("utf-8", errors="replace"), self.secrets)
        name = f"logs/{src.host}/{src.label}.log"
        if write is not None:
            write(name, text)
        rec: dict[str, Any] = {"file": name if write is not None else None, "start_byte": first, "end_byte": end,
                               "window_bytes": window, "kept_bytes": len(text.encode()),
                               "lines": text.count("\n"), "omitted_bytes": omitted,
                               "redactions": redactions, "rotated": rotated, "complaints": complaints(text)}
        if rotated:
            rec["note"] = ("the file was rotated or truncated during the run: read from its start; the lines "
                           "before the rotation are in the rotated file")
        return rec


def _join_halves(head: bytes, tail: bytes, gap: int) -> tuple[bytes, int]:
    """A window's first and last pieces cut at line ends, with a marker saying how much lies
    between; returns the bytes and how many of the window were left out."""
    cut = head.rfind(b"\n")
    head_kept = head[:cut + 1] if cut >= 0 else head
    cut = tail.find(b"\n")
    tail_kept = tail[cut + 1:] if cut >= 0 else tail
    omitted = gap + (len(head) - len(head_kept)) + (len(tail) - len(tail_kept))
    marker = f"[... {omitted} bytes of this window left out by chaoskit ...]\n".encode()
    return head_kept + marker + tail_kept, omitted


def window_for(cluster: Cluster, manager: HAManager | None, pool: RemotePool, limit: int,
               hosts: tuple[Host, ...] = ()) -> LogWindow:
    return LogWindow(pool, sources(cluster, manager, hosts), known_secrets(cluster), limit)
