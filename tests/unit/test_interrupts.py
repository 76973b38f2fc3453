"""Ctrl-C aborts a drill even when the process inherited SIGINT ignored (a background job of a
non-interactive shell starts so, and Python keeps it): `chaoskit.interrupts`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

# The child waits in short sleeps, as a drill's loops do: a signal that lands before one long sleep
# begins (while "ready" is written) has its handler run only when that sleep ends, 30 s later
CHILD = """
import sys, time
from chaoskit.interrupts import stop_signals_interrupt
guarded = sys.argv[1] == "guarded"

def wait():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        time.sleep(0.05)

try:
    if guarded:
        with stop_signals_interrupt():
            print("ready", flush=True)
            wait()
    else:
        print("ready", flush=True)
        wait()
except KeyboardInterrupt:
    sys.exit(3)
sys.exit(0)
"""


def start(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_sigint_aborts_although_inherited_ignored() -> None:
    proc = start("guarded")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 3


def test_sigterm_aborts_too() -> None:
    proc = start("guarded")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 3


def test_without_it_the_inherited_ignore_swallows_ctrl_c() -> None:
    """The environment the guard exists for: the same child unguarded does not hear SIGINT."""
    proc = start("bare")
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_previous_handlers_come_back_after_the_block() -> None:
    from chaoskit.interrupts import stop_signals_interrupt

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_signals_interrupt():
        assert signal.getsignal(signal.SIGINT) is not before[0]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
