"""The clock a load stamps its ops with: the control node's (issue: load from several machines).

On the control node that is `time.time()`. A load agent on a loader host stamps with its host's
clock corrected by the offset the controller measured (`offset = host - control`, bracketed round
trips, `chaoskit.inventory.clock`), so every op, interval, gap and ledger row of every loader is
on one clock before it is bucketed. The controller measures again every 30 s and writes the new
offset to the agent's `clock` file; a change is slewed in over `SLEW_S` (the stamps never step
back, and an op's latency never goes negative) unless it is larger than `STEP_OVER_S`, a clock
that was stepped, which is applied at once (the controller says it as `loader_clock` with
`stepped`).

`now()` is what the worker loops, the recorder's drains and the agent's control files read.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SLEW_S = 1.0  # a re-measured offset is taken in over this long
STEP_OVER_S = 0.1  # a change larger than this is a stepped clock: applied at once


class StampClock:
    def __init__(self, raw: Callable[[], float] = time.time) -> None:
        self._raw = raw
        # (offset before, offset now, raw instant the change began); replaced as one tuple, so a
        # reader on another thread sees the old state or the new one, never half of each
        self._state = (0.0, 0.0, 0.0)

    def now(self) -> float:
        raw = self._raw()
        return raw - self._offset_at(raw)

    def _offset_at(self, raw: float) -> float:
        before, after, since = self._state
        if before == after:
            return after
        part = (raw - since) / SLEW_S
        return after if part >= 1.0 else before + (after - before) * max(part, 0.0)

    def offset(self) -> float:
        """The offset applied now (during a slew: the part of the change taken in so far)."""
        return self._offset_at(self._raw())

    def set_offset(self, offset_s: float, slew: bool = True) -> None:
        """The host's clock minus the control clock, as measured now (`slew=False`: applied at
        once, for the first one, before anything is stamped)."""
        current = self.offset()
        if offset_s == self._state[1]:
            return
        if not slew or abs(offset_s - current) > STEP_OVER_S:
            self._state = (offset_s, offset_s, 0.0)
        else:
            self._state = (current, offset_s, self._raw())


CLOCK = StampClock()
now = CLOCK.now  # on the worker loops' path: a bound method, not a second call
