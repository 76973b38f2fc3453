"""The clock a load stamps its ops with (`chaoskit.workload.stamp`): a loader host's clock minus
the measured offset; a re-measured offset slewed in over a second (stamps never step back), a
stepped clock's change applied at once. Every figure worked out by hand on a scripted raw clock."""

from __future__ import annotations

import pytest

from chaoskit.workload.stamp import SLEW_S, STEP_OVER_S, StampClock


class Raw:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_first_offset_is_applied_at_once() -> None:
    raw = Raw(1000.0)
    clock = StampClock(raw)
    assert clock.now() == 1000.0  # no offset: the host's clock as it is
    clock.set_offset(0.04, slew=False)  # the host's clock measured 40 ms ahead of the control node's
    assert clock.now() == pytest.approx(999.96)


def test_a_re_measured_offset_is_slewed_in_over_a_second_and_never_steps_back() -> None:
    """Offset 40 ms, then measured at 100 ms at raw 2000: a change of 60 ms taken in over 1 s.
    Half way (raw 2000.5) 30 ms of it is in: 2000.5 - 0.07 = 2000.43; from raw 2001 on all of it:
    2001.2 - 0.1 = 2001.1. Stamps read every millisecond across the slew only ever go forward."""
    assert SLEW_S == 1.0 and STEP_OVER_S == 0.1
    raw = Raw(2000.0)
    clock = StampClock(raw)
    clock.set_offset(0.04, slew=False)
    clock.set_offset(0.1)
    assert clock.now() == pytest.approx(1999.96)  # nothing of the change yet: no step
    raw.t = 2000.5
    assert clock.now() == pytest.approx(2000.43)
    assert clock.offset() == pytest.approx(0.07)
    raw.t = 2001.2
    assert clock.now() == pytest.approx(2001.1)
    raw.t, last = 2003.0, None
    clock.set_offset(0.0)  # back by 100 ms: still a slew (not over STEP_OVER_S)
    for ms in range(0, 1500):
        raw.t = 2003.0 + ms / 1000
        now = clock.now()
        assert last is None or now > last
        last = now
    assert clock.now() == pytest.approx(2004.499)


def test_a_stepped_clock_is_corrected_at_once() -> None:
    """A change of 2.5 s (the host's clock was stepped) is not slewed: 2.5 s over a second would
    still be wrong for that second; applied at once, 3000 - 2.5 = 2997.5."""
    raw = Raw(3000.0)
    clock = StampClock(raw)
    clock.set_offset(0.001, slew=False)
    clock.set_offset(2.501)
    assert clock.now() == pytest.approx(2997.499)
    clock.set_offset(2.501)  # the same again: nothing changes
    raw.t = 3000.5
    assert clock.now() == pytest.approx(2997.999)
