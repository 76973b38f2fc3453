"""A load agent on a loader host, started, leased, stopped and read over SSH (issue: load from
several machines). The agent is the same process as on the control node
(`python3 -m chaoskit.workload.agent DIR`, `chaoskit.workload.agent`), started on the host detached
in a session of its own; what it spools stays on that host's disk, and the controller reads the
spool's tail after the last whole frame it has (`tail -c +N | head -c MAX | base64`), so a batch
is never only in a process or a connection: a controller cut from the host reads what it missed
once it reaches the host again.

What crosses to the host is data, never code: the agent's directory is a validated path in single
quotes; the order and the lease travel base64-encoded (nothing in that alphabet ends a quote) and
are checked against their SHA-256 there; the control files are numbers chaoskit formatted; the
agent's pid is read back as digits and signalled only while its start time is the one the agent
wrote. Before the start, the host's Python and chaoskit are checked (the same chaoskit version as
the controller's, else a refusal naming the host and both versions), as is its clock: the agent
stamps every op on the control clock, its host's clock corrected by the offset measured here
(bracketed round trips over the host's shell) and measured again every 30 s while it loads
(`chaoskit.workload.framed`); a host whose clock cannot be read within
`CLOCK_UNCERTAINTY_MAX_S` is refused, since every time figure of its clients would be no more
exact than that.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaoskit.inventory.clock import ClockOffset, measure_offset
from chaoskit.inventory.remote import HostUnreachable, Remote
from chaoskit.lifeline import controller_identity
from chaoskit.workload.agent import CONTROLLER, GO, LEASE, LOG, OFFSET, ORDER, PID, SPOOL, STOP, AgentOrder
from chaoskit.workload.framed import Loader
from chaoskit.workload.spool import HEAD, MAGIC, Frame, FrameCursor

if TYPE_CHECKING:
    pass

CLOCK_UNCERTAINTY_MAX_S = 0.05  # a loader host whose clock cannot be read closer than this is refused
TAIL_BYTES = 4 << 20  # read per fetch at most (a longer frame is read whole on the next one)
COLLECTED = "collected"  # an agent directory's mark: its final frame reached the controller
KEEP_COLLECTED_DAYS = 7  # a collected spool stays this long on its loader host (then the next start removes it)
_DIR = re.compile(r"^/[A-Za-z0-9_./@:+%=,~-]{1,300}$")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_PROGRAM = re.compile(r"^[A-Za-z0-9_/][A-Za-z0-9_./+-]{0,200}$")
_SIGNED = re.compile(r"^[+-][0-9]+\.[0-9]{6}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")


class LoaderRefused(ValueError):
    """A loader host that cannot take an agent: said before any load starts."""


def plain_path(value: str, what: str) -> str:
    """`value` if it is an absolute path of plain characters (it goes into single quotes on a host)."""
    if not _DIR.fullmatch(value) or "/../" in value + "/" or value.endswith("/.."):
        raise ValueError(f"{what}: not an absolute path of plain characters: {value!r}")
    return value


def _instant(value: float) -> str:
    text = f"{float(value):.6f}"
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"not an instant: {value!r}")
    return text


def _signed(value: float) -> str:
    text = f"{float(value):+.6f}"
    if not _SIGNED.fullmatch(text):
        raise ValueError(f"not an offset: {value!r}")
    return text


@dataclass(frozen=True)
class HostStatus:
    """What a loader host runs and how its clock stands, as `loaders status` shows it."""

    host: str
    python: str
    chaoskit: str | None = None  # the version its python imports (None: it does not)
    python_version: str | None = None
    offset: ClockOffset | None = None
    why: str | None = None  # why it could not be read
    ray: str | None = None  # the Ray version its python has (None: none)

    def refusal(self, version: str, ray: str | None = None) -> str | None:
        """Why it cannot take an agent of this controller (None: it can); `ray`: the version every
        node must run when agents go through Ray."""
        if self.chaoskit is None:
            return f"loader host {self.host}: {self.python} cannot import chaoskit ({self.why})"
        if self.chaoskit != version:
            return (f"loader host {self.host} runs chaoskit {self.chaoskit!r}, the controller {version}: the same "
                    "version on every loader")
        if ray is not None and self.ray != ray:
            return (f"loader host {self.host} runs ray {self.ray or 'none'}, the controller {ray}: "
                    "chaoskit[loaders] pins the same Ray on every node")
        if self.offset is None:
            return f"loader host {self.host}: its clock could not be read ({self.why})"
        if self.offset.uncertainty_s > CLOCK_UNCERTAINTY_MAX_S:
            return (f"loader host {self.host}: its clock could be read no closer than +/- "
                    f"{self.offset.uncertainty_s * 1000:.1f} ms (round trip {self.offset.rtt_s * 1000:.1f} ms); its "
                    f"clients' time figures need it within {CLOCK_UNCERTAINTY_MAX_S * 1000:g} ms")
        return None


def host_status(remote: Remote, python: str) -> HostStatus:
    """A loader host's chaoskit and Python versions and its clock offset, read over its shell."""
    python = plain_path(python, "the loader's python")
    try:
        res = remote.shell(f"'{python}' -c 'import chaoskit, sys, importlib.metadata as m; "
                           "print(chaoskit.__version__); print(\"%d.%d\" % sys.version_info[:2]); "
                           "print(next((d.version for d in m.distributions(name=\"ray\")), \"-\"))'",
                           check=False, timeout=60)
    except HostUnreachable as exc:
        return HostStatus(remote.name, python, why=str(exc)[:200])
    lines = res.stdout.split()
    if res.exited != 0 or len(lines) < 2:
        why = (res.stderr.strip().splitlines() or [f"exit {res.exited}"])[-1][:200]
        return HostStatus(remote.name, python, why=why)
    try:
        offset = measure_offset(remote)
    except (HostUnreachable, ValueError) as exc:
        return HostStatus(remote.name, python, lines[0][:40], lines[1][:10], why=str(exc)[:200])
    ray = lines[2][:40] if len(lines) > 2 and lines[2] != "-" else None
    return HostStatus(remote.name, python, lines[0][:40], lines[1][:10], offset, ray=ray)


def program_refusal(remote: Remote, programs: tuple[str, ...], group: str) -> str | None:
    """Why a loader host cannot run a tool group (None: it can): each program the group runs must
    be on the host's PATH, or at the absolute path given; the first one missing is named."""
    for prog in programs:
        if not _PROGRAM.fullmatch(prog) or ".." in prog:
            return f"group {group}: not a program name: {prog[:80]!r}"
    if not programs:
        return None
    res = remote.shell("; ".join(f"command -v '{p}' >/dev/null 2>&1 || echo '{p}'" for p in programs),
                       check=False, timeout=30)
    missing = res.stdout.split()
    return f"loader host {remote.name}: {missing[0]} is not installed there (group {group} runs it)" if missing \
        else None


def subshell(lines: list[str]) -> str:
    """A host script that sets options (`set -e`, `umask`) or may `exit`, as one subshell: the
    host's persistent shell (`Remote.shell`) runs every command in itself, where an `exit` would
    end that shell and a `set -e` outlive the script."""
    return "(\n" + "\n".join(lines) + "\n)"


def live_pid(pid_file: str) -> str:
    """Shell that sets $p to the pid in `pid_file` (a quoted shell word; the file holds the pid,
    then its start time) while that process is the one that wrote it and runs, else to "" (a
    zombie its reaper has not collected yet is not running; a stopped one, paused, is)."""
    return (f'p=""; if [ -r {pid_file} ]; then {{ read -r p; read -r s; }} < {pid_file}; fi; '
            'case "$p" in ""|*[!0-9]*) p="";; esac; case "$s" in ""|*[!0-9]*) p="";; esac; '
            'if [ -n "$p" ] && [ -r "/proc/$p/stat" ]; then '
            'st=$(awk \'{ sub(/.*\\) /, ""); print $1, $20 }\' "/proc/$p/stat" 2>/dev/null); '
            '{ [ "${st#* }" = "$s" ] && [ "${st%% *}" != Z ] && [ "${st%% *}" != X ]; } || p=""; else p=""; fi')


class SshLoader(Loader):
    """One agent in `directory` on the host behind `remote`."""

    def __init__(self, name: str, remote: Remote, directory: str, order: AgentOrder, python: str,
                 version: str, poll_s: float = 0.25) -> None:  # a read of its spool is an SSH round trip
        self.name = name
        self.remote = remote
        self.dir = plain_path(directory, "the agent's directory")
        self.python = plain_path(python, "the loader's python")
        self.order = order
        self.version = version
        self.poll_s = poll_s
        self.cursor = FrameCursor(f"{remote.name}:{self.dir}/{SPOOL}")
        self.offset: ClockOffset | None = None

    def _q(self, name: str) -> str:
        return f"'{self.dir}/{name}'"

    # -- before the start -------------------------------------------------------------------------
    ray: str | None = None  # the Ray version its host must run (agents through Ray)

    def ssh(self) -> Remote:
        """The host's SSH, over which its versions and clock are read."""
        return self.remote

    def check(self) -> None:
        """The host's Python runs this chaoskit version (and the pinned Ray, through Ray), and its
        clock agrees with the control node's; raises LoaderRefused naming the host otherwise."""
        status = host_status(self.ssh(), self.python)
        refusal = status.refusal(self.version, self.ray)
        if refusal:
            raise LoaderRefused(refusal)
        assert status.offset is not None
        self.offset = status.offset
        self.clock_offset_s = status.offset.offset_s
        self.clock_uncertainty_s = status.offset.uncertainty_s

    def require(self, programs: tuple[str, ...], group: str) -> None:
        """Each program its group runs is on the host; raises LoaderRefused otherwise."""
        refusal = program_refusal(self.ssh(), programs, group)
        if refusal:
            raise LoaderRefused(refusal)

    # -- the Loader -------------------------------------------------------------------------------
    def prune_script(self) -> str:
        """Removes, under the spool root (`<spool>/<run id>/<agent>`: two levels above this agent's
        directory), the agent directories whose spool was collected over KEEP_COLLECTED_DAYS days
        ago, then the run directories left empty. Best effort: a failure here never stops a start."""
        root = posixpath.dirname(posixpath.dirname(self.dir))
        return (f"R='{root}'; find \"$R\" -mindepth 3 -maxdepth 3 -type f -name {COLLECTED} "
                f"-mtime +{KEEP_COLLECTED_DAYS - 1} 2>/dev/null | while IFS= read -r f; do "
                'rm -rf -- "${f%/*}"; done; '
                'find "$R" -mindepth 1 -maxdepth 1 -type d -empty -delete 2>/dev/null; true')

    def collected(self) -> None:
        self.remote.shell(f"touch -- {self._q(COLLECTED)}", timeout=30)

    def start(self, lease_until: float) -> None:
        order = self.order.model_dump_json().encode()
        lease = _instant(lease_until).encode()
        files = []
        who = json.dumps({**controller_identity(), "loader": self.remote.name}).encode()
        offset = _signed(self.clock_offset_s).encode()
        for name, data in ((ORDER, order), (LEASE, lease), (OFFSET, offset), (CONTROLLER, who)):
            files.append(f"w {name} {base64.b64encode(data).decode()} {hashlib.sha256(data).hexdigest()}")
        script = subshell([
            f"( {self.prune_script()} )",
            "set -e", "umask 077", f"D='{self.dir}'",
            # a fresh directory of its own: an agent never starts over another one's spool
            'if [ -e "$D" ]; then echo "$D already exists: an agent directory is used once" >&2; exit 3; fi',
            'mkdir -p -- "$D"',
            'w() { printf \'%s\' "$2" | base64 -d > "$D/$1.tmp"; '
            'printf \'%s  %s\\n\' "$3" "$D/$1.tmp" | sha256sum -c --quiet --status; mv -f -- "$D/$1.tmp" "$D/$1"; }',
            *files,
            f"cd / && setsid '{self.python}' -m chaoskit.workload.agent \"$D\" </dev/null >>\"$D/{LOG}\" 2>&1 &",
            # started once its pid file is whole: until then "is it running?" could not be answered
            f"a=$!; i=0; while ! grep -qs '^[0-9][0-9]*$' \"$D/{PID}\" || [ \"$(wc -l < \"$D/{PID}\")\" -lt 2 ]; do "
            f"kill -0 \"$a\" 2>/dev/null || {{ echo \"the agent exited at once: $(tail -c 300 \"$D/{LOG}\")\" >&2; "
            "exit 4; }; i=$((i+1)); [ $i -lt 600 ] || { echo 'the agent wrote no pid file in 60 s' >&2; exit 5; }; "
            "sleep 0.1; done",
            "echo started"])
        res = self.remote.shell(script, check=False, timeout=60)
        if res.exited != 0 or "started" not in res.stdout:
            raise RuntimeError(f"loader {self.name} on {self.remote.name}: the agent did not start: "
                               f"{(res.stderr or res.stdout).strip()[-300:]}")

    def _write(self, name: str, value: float) -> None:
        self._put(name, _instant(value))

    def _put(self, name: str, text: str) -> None:
        self.remote.shell(f"printf '%s' {text} > {self._q(name + '.tmp')} && "
                          f"mv -f -- {self._q(name + '.tmp')} {self._q(name)}", timeout=30)

    def measure_clock(self) -> ClockOffset:
        return measure_offset(self.ssh())

    def set_clock(self, offset_s: float) -> None:
        self._put(OFFSET, _signed(offset_s))

    def go(self, t_start: float) -> None:
        self._write(GO, t_start)

    def renew(self, lease_until: float) -> None:
        self._write(LEASE, lease_until)

    def stop(self) -> None:
        self.remote.shell(f"touch -- {self._q(STOP)}", timeout=30)

    _PID = live_pid(f'"$D/{PID}"')  # the agent's pid while it is the process that wrote its pid file

    def running(self) -> bool | None:
        try:
            res = self.remote.shell(f"D='{self.dir}'; {self._PID}; [ -n \"$p\" ] && echo yes || echo no",
                                    check=False, timeout=30)
        except HostUnreachable:
            return None
        word = res.stdout.strip()
        return True if word == "yes" else False if word == "no" else None

    def kill(self) -> None:
        self.remote.shell(f"D='{self.dir}'; {self._PID}; [ -z \"$p\" ] || kill -9 \"$p\"", check=False, timeout=30)

    def wait(self, timeout: float) -> None:
        """After its final batch the agent closes its connections and exits: wait for that (at most
        `timeout`, 10 s), so a load that stopped leaves no agent behind; one that does not exit
        by then ends at its lease."""
        deadline = time.monotonic() + min(timeout, 10.0)
        while time.monotonic() < deadline:
            if self.running() is not True:
                return
            time.sleep(0.1)

    def fetch(self, after: int) -> list[Frame]:
        self.cursor.rewind_for(after)
        frames, need = self._tail(after, TAIL_BYTES)
        if not frames and need > TAIL_BYTES:  # a frame longer than a piece: read it whole
            frames, _ = self._tail(after, need)
        return frames

    def _tail(self, after: int, limit: int) -> tuple[list[Frame], int]:
        """The whole frames in the spool's next `limit` bytes, and the bytes its first frame needs."""
        offset = self.cursor.offset
        res = self.remote.shell(
            f"f={self._q(SPOOL)}; [ -f \"$f\" ] || exit 0; stat -c %s -- \"$f\"; "
            f"tail -c +{offset + 1} -- \"$f\" | head -c {int(limit)} | base64 -w0; echo", timeout=60)
        lines = res.stdout.split("\n")
        if not lines[0].strip():
            return [], 0
        size = int(lines[0])
        data = base64.b64decode(lines[1] if len(lines) > 1 else "", validate=True)
        frames = self.cursor.take(data, offset + len(data) >= size, after)
        need = HEAD.size + HEAD.unpack_from(data)[2] if len(data) >= HEAD.size and data[:4] == MAGIC else 0
        return frames, need

    def describe(self) -> dict[str, Any]:
        return {"where": self.remote.name, "dir": self.dir, "group": self.order.group().name}
