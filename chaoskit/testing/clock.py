"""A clock tests drive by hand: `now()` moves only when `sleep()` or `advance()` is called."""

from __future__ import annotations

import threading


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def time(self) -> float:  # the shape of time.time, where code takes a callable
        return self.now()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > 0:
            self.advance(seconds)
