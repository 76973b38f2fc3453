"""The control node's clock, behind an interface so tests can drive time.

`SystemClock.now()` is wall-clock seconds advanced by the monotonic clock from one anchor, so a
wall-clock step during a run cannot reorder events; remote timestamps are corrected onto it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def __init__(self) -> None:
        self._wall0 = time.time()
        self._mono0 = time.monotonic()

    def now(self) -> float:
        return self._wall0 + (time.monotonic() - self._mono0)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
