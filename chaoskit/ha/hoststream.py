"""Lines a host produces as they happen, each stamped with that host's clock when it was read and
put on the control clock by the host's measured offset: the manager's own log (repmgrd, MHA),
or a DCS watch run on a member (`etcdctl watch`).

The stamp is taken by the reading loop on the host, not on arrival at the controller, so SSH
latency and Nagle stalls do not move it; `tail -F` follows a log through rotation. Paths and
commands reach the host as quoted words of a fixed script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chaoskit.inventory.clock import measure_offset
from chaoskit.inventory.remote import Remote

# the reading loop: every line of the command's output, prefixed with the host's clock
STAMP = "while IFS= read -r l; do printf '%s %s\\n' \"$(date +%s.%N)\" \"$l\"; done"


@dataclass(frozen=True)
class HostLine:
    t: float  # control clock
    t_host: float
    uncertainty_s: float
    text: str


def stamped(remote: Remote, command: str, stop: Callable[[], bool], *, sudo: bool = False) -> Iterator[HostLine]:
    """The command's output lines, stamped on the host, until `stop()` or the command ends."""
    offset = measure_offset(remote)
    for line in remote.stream(f"LC_ALL=C; export LC_ALL; {command} | {STAMP}", stop=stop, sudo=sudo):
        stamp, _, text = line.partition(" ")
        try:
            t_host = float(stamp)
        except ValueError:
            continue
        yield HostLine(offset.to_control(t_host), t_host, offset.uncertainty_s, text)


def follow_file(remote: Remote, path: str, stop: Callable[[], bool]) -> Iterator[HostLine]:
    """New lines appended to a file on the host (read with the host's root rights: a manager's
    log is often readable by its own user only)."""
    return stamped(remote, f"exec tail -n 0 -F -- {shlex.quote(path)} 2>/dev/null", stop, sudo=True)


def match_line(patterns: list[tuple[re.Pattern[str], str]], line: str) -> tuple[str, str | None] | None:
    """The first (pattern, event kind) that matches a manager's log line: the kind and the node
    the pattern's `node` group names, if any."""
    for pattern, kind in patterns:
        m = pattern.search(line)
        if m:
            return kind, m.groupdict().get("node")
    return None
