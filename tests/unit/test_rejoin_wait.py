"""A rejoin scheduled while the failover is still under way waits (bounded) for the new primary
instead of refusing at once: seen in CI, MHA made a lagging replica writable 34 s after the kill,
3 s after a rejoin scheduled at +31 s had refused with "leader: None"."""

from __future__ import annotations

from chaoskit.ha.base import HAManager


class Answers(HAManager):
    """Only what rejoin_target reads: the leader, one answer per call."""

    def __init__(self, leaders: list[str | None]) -> None:  # no cluster: nothing else is called
        self.leaders = leaders
        self.calls = 0

    def members(self) -> list:
        raise AssertionError("not read by rejoin_target")

    def leader(self) -> str | None:
        self.calls += 1
        return self.leaders[min(self.calls, len(self.leaders)) - 1]


def test_the_rejoin_waits_for_the_new_primary() -> None:
    slept: list[float] = []
    m = Answers([None, "mha2", "mha1"])  # nobody, then the old primary itself, then the new one
    leader, refused = m.rejoin_target("mha2", wait_s=30.0, sleep=slept.append)
    assert (leader, refused, m.calls) == ("mha1", None, 3) and slept == [0.5, 0.5]


def test_the_wait_is_bounded_and_said() -> None:
    m = Answers([None])
    leader, refused = m.rejoin_target("mha2", wait_s=0.2)
    assert leader is None and refused is not None and refused.ok is False
    assert refused.answer.startswith("no other primary to rejoin after waiting 0.") and "(leader: None)" in \
        refused.answer
