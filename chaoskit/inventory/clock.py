"""Clock offset of a host against the control node, NTP-style.

A remote timestamp is read between a local send (t0) and receive (t1); the remote clock read
happened somewhere in [t0, t1], so offset = remote - (t0 + t1) / 2 with uncertainty (t1 - t0) / 2.
The sample with the smallest round trip wins. Reads go over the host's persistent shell, so a
sample costs one round trip, not a new SSH channel.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaoskit.inventory.remote import Remote

REMOTE_NOW = "date +%s.%N"


@dataclass(frozen=True)
class ClockOffset:
    offset_s: float  # remote - local
    uncertainty_s: float
    rtt_s: float
    samples: int

    def to_control(self, remote_ts: float) -> float:
        """A host timestamp on the control node's clock."""
        return remote_ts - self.offset_s


def measure_offset(remote: Remote, samples: int = 7) -> ClockOffset:
    remote.shell("true")  # open the shell before timing
    best: tuple[float, float, float] | None = None
    for _ in range(samples):
        res = remote.shell(REMOTE_NOW)
        t0, t1 = res.started, res.finished  # send, and arrival of the reply's end
        remote_ts = float(res.stdout.strip())
        rtt = t1 - t0
        if best is None or rtt < best[0]:
            best = (rtt, remote_ts, (t0 + t1) / 2)
    assert best is not None
    rtt, remote_ts, mid = best
    return ClockOffset(offset_s=remote_ts - mid, uncertainty_s=rtt / 2, rtt_s=rtt, samples=samples)
