"""Nothing a run starts on the control node outlives it: helpers (load worker processes, client
link relays) die with the controller however it dies, SIGKILL included.

Two mechanisms, because each has a gap: the kernel's parent-death signal (PR_SET_PDEATHSIG)
fires when the parent *thread* that started the child exits, and a watchdog thread that polls the
parent pid catches the rest (and the race where the parent died before prctl ran) within 0.1 s.
Children also carry CHAOSKIT_CONTROLLER_PID, so anyone can list what a controller started.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import getpass
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
ENV_MARK = "CHAOSKIT_CONTROLLER_PID"


def controller_user() -> str:
    """`user@host` of the control node: who ran a drill when nobody said otherwise."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


@functools.cache
def operator_identity() -> str:
    """Who ran a drill when `--operator` does not say: the person behind sudo (SUDO_USER), else
    the git identity of the working directory (user.name <user.email>), each with the account it
    ran as; the Unix account alone only when neither is known. Control characters are dropped and
    the text bounded: it is data for the evidence."""
    account = controller_user()
    sudo = os.environ.get("SUDO_USER")
    if sudo and sudo != getpass.getuser():
        return _printable(f"{sudo} (via sudo, as {account})")
    try:
        res = [subprocess.run(["git", "config", "--get", key], capture_output=True, text=True, timeout=5,
                              stdin=subprocess.DEVNULL, check=False).stdout.strip()
               for key in ("user.name", "user.email")]
    except (OSError, subprocess.SubprocessError):
        res = ["", ""]
    name, email = res
    if name or email:
        return _printable(f"{name}{' ' if name and email else ''}{'<' + email + '>' if email else ''} "
                          f"(git identity, as {account})")
    return account


def _printable(text: str) -> str:
    return "".join(c for c in text if c.isprintable())[:200]


def process_start_time(pid: int) -> int | None:
    """Kernel start time of a pid (clock ticks since boot), or None if it does not exist: with the
    pid, it names one process for good (a pid is reused, its start time is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def controller_identity() -> dict[str, Any]:
    """Who staged a fault: `recover` leaves faults of a controller that is still running alone."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "user": getpass.getuser(), "pid": pid,
            "start": process_start_time(pid)}


def controller_alive(meta: dict[str, Any]) -> bool:
    ctl = meta.get("controller")
    if not isinstance(ctl, dict) or ctl.get("host") != socket.gethostname():
        return False
    pid = ctl.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    return process_start_time(pid) == ctl.get("start") and ctl.get("start") is not None


def mark_controller() -> None:
    """Called once by a controller: every process it starts from now on carries its pid."""
    os.environ[ENV_MARK] = str(os.getpid())


def die_with_parent(parent_pid: int, poll_s: float = 0.1) -> None:
    """Bind a worker process's life to its controller's: killed when the controller dies, and deaf
    to SIGINT (a terminal's Ctrl-C reaches the whole process group: the controller hears it and
    stops its workers itself, after their last results are in)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(poll_s)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


GROUP_GUARD_GRACE_S = 5.0


def guarded_group(argv: list[str]) -> list[str]:
    """A command that runs `argv` as a process group ending with the process that started it.
    For a program that forks its real work off a launcher script (JMeter's bin/jmeter runs java
    as its child without exec): the parent-death signal reaches only the direct child, so a guard
    (this module run as a program) holds the group: when its parent dies, or it is sent SIGTERM,
    it sends SIGTERM to the whole group, then SIGKILL after a grace. The guard must be started in
    a session of its own (`start_new_session=True`), so the group is the command's alone."""
    import sys

    return [sys.executable, "-m", "chaoskit.lifeline", "--", *argv]


def _guard(argv: list[str]) -> int:
    parent = os.getppid()
    ending = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ending.set())
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 1
    child = subprocess.Popen(argv, close_fds=False)  # the pipes the caller passed stay open for it
    while child.poll() is None and not ending.is_set() and os.getppid() == parent:
        ending.wait(0.1)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the guard outlives the signal it sends its group
    if _group_members():
        os.killpg(os.getpgrp(), signal.SIGTERM)
        deadline = time.monotonic() + GROUP_GUARD_GRACE_S
        while _group_members() and time.monotonic() < deadline:
            child.poll()
            time.sleep(0.05)
        for pid in _group_members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    rc = child.wait()
    return rc if rc >= 0 else 128 - rc  # as a shell says a command a signal ended


def _group_members() -> list[int]:
    """The live processes of the guard's group but the guard itself (zombies not counted)."""
    me, group, out = os.getpid(), os.getpgrp(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            out.append(int(entry.name))
    return out


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    sys.exit(_guard(args) if args else 2)
