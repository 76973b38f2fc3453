"""Processes of the lab: started detached inside a namespace, found by pid file, ended by pid.

Lab hosts share one process table, so nothing here ever matches a process by name: a daemon is
known by the pid its launcher wrote (checked against the start time recorded next to it, so a
recycled pid is never signalled), or by `ip netns pids` of a namespace the lab created.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from chaoskit.lifeline import process_start_time


def sh(cmd: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)


def alive(pid: int, started: int | None = None) -> bool:
    """Running (zombies count as dead) and, when given, still the same process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("State:")), "?")
    if state in ("Z", "X"):
        return False
    return started is None or process_start_time(pid) == started


def read_pid_file(path: Path) -> int | None:
    try:
        first = path.read_text().split("\n", 1)[0].strip()
        return int(first) if first else None
    except (OSError, ValueError):
        return None


def pid_file_alive(path: Path) -> bool:
    """The pid in `path` is a running process (False with no pid file or no pid in it)."""
    pid = read_pid_file(path)
    return alive(pid) if pid else False


def netns_pids(netns: str) -> list[int]:
    res = sh(["ip", "netns", "pids", netns], check=False)
    return [int(p) for p in res.stdout.split() if p.strip().isdigit()] if res.returncode == 0 else []


def run_launcher(script: Path, pid_file: Path, timeout: float = 10.0) -> int:
    """Run a launcher script (it starts a daemon detached and writes its pid file)."""
    sh(["sh", str(script)], timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = read_pid_file(pid_file)
        if pid and alive(pid):
            return pid
        time.sleep(0.02)
    raise RuntimeError(f"{script} did not leave a live pid in {pid_file}")


def terminate(pids: list[int], *, grace: float, sig: int = signal.SIGTERM) -> list[int]:
    """Signal pids, wait up to `grace` seconds, SIGKILL what is left; returns pids still alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in left):
        time.sleep(0.05)
    return [p for p in left if alive(p)]
