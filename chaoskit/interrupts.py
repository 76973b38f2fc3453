"""How a controller hears "stop": while a drill or an experiment runs, Ctrl-C (SIGINT) and SIGTERM
both raise KeyboardInterrupt in the main thread, whatever handling the process inherited, and
the run aborts and heals.

Inherited handling cannot be trusted: POSIX shells start a background job of a non-interactive
shell (`bash .ci/run &`, `nohup sh -c 'chaoskit run ... &'`) with SIGINT and SIGQUIT ignored, and
Python keeps an inherited SIG_IGN for SIGINT instead of installing its own handler. A drill started
that way ignored Ctrl-C, ran to its planned end with its faults in place and exited 0 (seen in CI:
the suite ran as such a job and `test_ctrl_c_heals_every_fault` got exit 0 instead of 3).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt inside the block; the previous handlers come back
    after it. Outside the main thread (where Python cannot set handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
