"""A scripted loader (`chaoskit.workload.framed.Loader`) for unit tests of `FramedSource` without
Ray or another host: its agent is a `FakeSource` (chaoskit/testing/source.py) whose deliveries go
into a real spool file through the real codec, and the controller reads that file as it would a
remote agent's.

- `cut_after` + `cut_for`: from that many seconds after `go`, for that long, the loader cannot be
  read or renewed (a partition between it and the control node); its agent goes on spooling;
- `agent=FakeSource(..., lost_after=s)`: the agent dies without its final batch;
- the lease: an agent not renewed by its lease's end stops (its final spooled), as a real one does
  when its controller died; `renewals` counts them;
- `measures`: what each re-measurement of its host's clock gives, in turn (an exception is
  raised, as a host that cannot be read; once they run out, None: the control node's clock);
  `clock_set` holds the offsets the controller told the agent.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from chaoskit.inventory.clock import ClockOffset
from chaoskit.testing.source import FakeSource
from chaoskit.workload.framed import Loader
from chaoskit.workload.source import Delivery
from chaoskit.workload.spool import Frame, SpoolReader, SpoolWriter
from chaoskit.workload.wire import encode_delivery


class SpoolInbox:
    """What an agent hands its deliveries to: each one a frame of its spool, stamped when spooled."""

    def __init__(self, writer: SpoolWriter) -> None:
        self.writer = writer

    def put(self, d: Delivery) -> None:
        self.writer.append(encode_delivery(d.kind, time.time(), d.payload))
        if d.kind == "final":
            self.writer.close()


class SpooledFake(Loader):
    def __init__(self, agent: FakeSource, spool: Path, cut_after: float | None = None, cut_for: float = 0.0,
                 measures: list[ClockOffset | Exception] | None = None) -> None:
        self.agent = agent
        self.name = agent.name
        self.clock_offset_s = agent.clock_offset_s
        self.clock_uncertainty_s = agent.clock_uncertainty_s
        self.spool = spool
        self.reader = SpoolReader(spool)
        self.cut_after, self.cut_for = cut_after, cut_for
        self.t_go: float | None = None
        self.lease_until = 0.0
        self.renewals = 0
        self.lease_ended = False
        self.fetches = 0
        self.measures = list(measures or [])
        self.clock_set: list[float] = []
        self.collected_marks = 0  # how often the controller said its spool was collected

    def _cut(self) -> bool:
        if self.cut_after is None or self.t_go is None:
            return False
        return self.t_go + self.cut_after <= time.time() < self.t_go + self.cut_after + self.cut_for

    def start(self, lease_until: float) -> None:
        self.lease_until = lease_until
        self.agent.launch(SpoolInbox(SpoolWriter(self.spool)))  # type: ignore[arg-type]
        threading.Thread(target=self._lease, name=f"lease-{self.name}", daemon=True).start()

    def _lease(self) -> None:
        """The agent's own watch of its lease: not renewed in time, it stops (its final spooled)."""
        while self.agent.alive():
            if time.time() > self.lease_until:
                self.lease_ended = True
                self.agent.stop()
                return
            time.sleep(0.05)

    def go(self, t_start: float) -> None:
        self.t_go = t_start
        self.agent.go(t_start)

    def renew(self, lease_until: float) -> None:
        if self._cut():
            raise ConnectionError("cut off from the control node (scripted)")
        self.lease_until = lease_until
        self.renewals += 1

    def stop(self) -> None:
        if self._cut():
            raise ConnectionError("cut off from the control node (scripted)")
        self.agent.stop()

    def kill(self) -> None:
        self.agent.kill()

    def running(self) -> bool | None:
        if self._cut():
            return None
        return self.agent.alive()

    def fetch(self, after: int) -> list[Frame]:
        if self._cut():
            raise ConnectionError("cut off from the control node (scripted)")
        self.fetches += 1
        return self.reader.read(after=after)

    def measure_clock(self) -> ClockOffset | None:
        if not self.measures:
            return None
        got = self.measures.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    def set_clock(self, offset_s: float) -> None:
        self.clock_set.append(offset_s)

    def collected(self) -> None:
        self.collected_marks += 1

    def describe(self) -> dict[str, Any]:
        return {"where": "spooled fake", "group": "zone-x"}
