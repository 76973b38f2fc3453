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


class Held:
    """Whether a condition has held, look after look without a break, for `hold_s`; `since` is the
    first look of the current unbroken run (None while it does not hold)."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.since: float | None = None

    def look(self, ok: bool, now: float) -> bool:
        self.since = (now if self.since is None else self.since) if ok else None
        return self.since is not None and now - self.since >= self.hold_s
