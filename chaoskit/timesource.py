"""The control clock as one small interface (`now`, `sleep`), so the code that waits on it (the
drill's schedule and recovery wait, the fault manager, campaigns) can be driven by
`chaoskit.testing.clock.FakeClock` in unit tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock seconds since the epoch (the evidence's timestamps) and a real sleep."""

    def now(self) -> float:
        return time.time()

    def time(self) -> float:  # the shape of time.time, where code takes a callable
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
