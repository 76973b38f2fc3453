"""A scripted load source (`chaoskit.workload.source.LoadSource`) for unit tests of the load
runner without processes or a database: a thread that acknowledges ledger writes of one worker at
a steady pace and delivers them the way a troubled source would.

- `delay`: each batch arrives that many seconds after it was drained;
- `hold_after` + `resume`: from that many seconds after the start it delivers nothing (its batches
  wait) until `resume` is set: a hole, ended when the test decides;
- `lost_after`: that many seconds after the start it is gone for good (no more batches, no final);
- `drop_batch`: its batch of that number (1 = the first) is lost on its way, never handed over;
- `spoil_batch`: its batch of that number arrives malformed (merging it raises);
- `skew_s` / `offset_s` / `uncertainty_s`: its own clock runs `skew_s` ahead of the control clock;
  it stamps each op with its clock less the offset it measured (`offset_s`, by default exactly the
  skew), and says that offset and its uncertainty.

`generated` counts the writes it acknowledged; `delivered` those it handed over.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from chaoskit.recorder import OK, SEQUENCE, Batch, Recorder
from chaoskit.workload.source import Delivery, Inbox, LoadSource


class FakeSource(LoadSource):
    def __init__(self, name: str, worker: int, *, base: float, per_tick: int = 3, tick: float = 0.05,
                 delay: float = 0.0, hold_after: float | None = None, resume: threading.Event | None = None,
                 lost_after: float | None = None, skew_s: float = 0.0, offset_s: float | None = None,
                 uncertainty_s: float = 0.0, drop_batch: int | None = None,
                 spoil_batch: int | None = None, final_delay: float = 0.0) -> None:
        self.name = name
        self.final_delay = final_delay  # its final handed over this long after it ended (a pipe's tail)
        self.worker = worker
        self.workers = (worker,)
        self.drop_batch, self.spoil_batch = drop_batch, spoil_batch
        self._handed = 0
        self.per_tick, self.tick, self.delay = per_tick, tick, delay
        self.hold_after, self.resume, self.lost_after = hold_after, resume, lost_after
        self.skew_s = skew_s
        self.clock_offset_s = skew_s if offset_s is None else offset_s
        self.clock_uncertainty_s = uncertainty_s
        self.recorder = Recorder(base)
        self.generated = 0
        self.delivered = 0
        self.last_watermark: int | None = None  # of the last batch it handed over
        self._inbox: Inbox | None = None
        self._go = threading.Event()
        self._stop = threading.Event()
        self._gone = False
        self._t_start = 0.0
        self._thread = threading.Thread(target=self._run, name=f"fake-source-{name}", daemon=True)

    def own_clock(self) -> float:
        return time.time() + self.skew_s

    def launch(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._thread.start()
        inbox.put(Delivery(self.name, "ready"))

    def go(self, t_start: float) -> None:
        self._t_start = t_start
        self._go.set()

    def stop(self) -> None:
        self._stop.set()

    def alive(self) -> bool:
        return not self._gone and (self._thread.is_alive() or not self._go.is_set())

    def lost(self) -> str | None:
        return "cut off (scripted)" if self._gone else None if self.alive() else "it ended"

    def ended_cleanly(self) -> bool:
        return not self._gone and self._go.is_set() and not self._thread.is_alive()

    def kill(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _hand(self, kind: str, batch: Batch) -> None:
        assert self._inbox is not None
        self._handed += 1
        if self._handed == self.drop_batch:
            return
        if self._handed == self.spoil_batch:  # its ledger bytes one short of whole entries
            batch.ledger = [(worker, first, raw + b"\0") for worker, first, raw in batch.ledger]
            self._inbox.put(Delivery(self.name, kind, batch))
            return
        self.delivered += sum(row[0] for _, row, _ in batch.intervals)  # ok counts
        self.last_watermark = batch.watermark
        self._inbox.put(Delivery(self.name, kind, batch))

    def _holding(self, elapsed: float) -> bool:
        return self.hold_after is not None and elapsed >= self.hold_after and not (
            self.resume is not None and self.resume.is_set())

    def _run(self) -> None:
        self._go.wait()
        time.sleep(max(0.0, self._t_start - time.time()))
        pending: list[tuple[float, Batch]] = []
        seq = 0
        while not self._stop.is_set():
            elapsed = time.time() - self._t_start
            if self.lost_after is not None and elapsed >= self.lost_after:
                self._gone = True
                return
            t = self.own_clock() - self.clock_offset_s  # on the control clock, as well as it knows it
            for _ in range(self.per_tick):
                seq += 1
                self.recorder.record(self.worker, "write", t - 0.001, t, OK, key=seq, keyed=SEQUENCE)
            self.generated += self.per_tick
            pending.append((time.time() + self.delay, self.recorder.drain(t)))
            if not self._holding(elapsed):
                while pending and pending[0][0] <= time.time():
                    self._hand("batch", pending.pop(0)[1])
            self._stop.wait(self.tick)
        for _, batch in pending:
            self._hand("batch", batch)
        t = self.own_clock() - self.clock_offset_s
        final = self.recorder.drain(t, final=True)
        if self.final_delay:
            threading.Timer(self.final_delay, self._hand, ("final", final)).start()
        else:
            self._hand("final", final)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "where": "fake"}
