"""The controller's go/stop flags to its load workers survive a worker killed while waiting on
them: setting the flag never waits for the dead. (A multiprocessing Event does: its set() waits
for every sleeper to wake, and a killed one never does; that hung a drill's stop after SIGTERM
reached its process group.)"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any

from chaoskit.workload.runner import SharedFlag


def _wait_on(flag: Any, ready: Any) -> None:
    ready.put(os.getpid())
    flag.wait()


def _set_returns(flag: Any, ctx: Any) -> bool:
    """Whether `flag.set()` returns within 5 s after a process waiting on it was killed."""
    ready = ctx.Queue()
    child = ctx.Process(target=_wait_on, args=(flag, ready), daemon=True)
    child.start()
    ready.get(timeout=30)
    time.sleep(0.3)  # inside wait()
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(5)
    return not setter.is_alive()


def test_a_killed_waiter_never_blocks_the_flag() -> None:
    ctx = mp.get_context("spawn")
    flag = SharedFlag(ctx)
    assert _set_returns(flag, ctx) and flag.is_set() and flag.wait(0) is True


def test_wait_times_out_and_sees_a_set_from_another_process() -> None:
    ctx = mp.get_context("spawn")
    flag = SharedFlag(ctx)
    t = time.monotonic()
    assert flag.wait(0.05) is False and time.monotonic() - t >= 0.05
    ready = ctx.Queue()
    child = ctx.Process(target=_wait_on, args=(flag, ready), daemon=True)
    child.start()
    ready.get(timeout=30)
    flag.set()
    child.join(10)
    assert child.exitcode == 0
