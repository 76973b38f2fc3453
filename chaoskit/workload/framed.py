"""A load source whose batches come as spooled frames from an agent that may run on another host
(issue: load from several machines). The agent writes every delivery (ready, each batch, events,
the final batch) into its spool (`chaoskit.workload.spool`, payloads by `chaoskit.workload.wire`)
before anything else sees it; the controller reads the frames after the last one it applied,
through a `Loader` (how this agent is started, leased, stopped and read: a Ray actor, SSH, or a
process on the control node), so a batch never lives only in a process or a connection.

`FramedSource` is the `LoadSource` over one agent:
- frames are applied once each, in their numbers' order: one read again (a controller that
  re-attached) is skipped and counted;
- a frame applied more than `LATE_S` after the agent spooled it is late; how many and the worst
  lateness are said once the run ends (`delivered_late`), and the collector folds the late
  batches into the intervals they belong to (its close rule leaves a silent source out);
- the agent's lease is renewed every third of `lease_s`: an agent whose controller died stops by
  itself at the lease's end;
- a loader that cannot be read for `lost_after_s`, or whose agent ended with every frame read and
  no final batch, is lost for good (`loader_lost`, with why); what it delivered stays and the
  rest of the run goes on;
- the agent stamps on the control clock with the offset its host's clock was measured at before
  the start; every `CLOCK_EVERY_S` it is measured again and the agent told (`loader_clock`: the
  offset, its uncertainty, the change, and `error_s`, how far the stamps since the previous
  measurement can be off: the change plus both uncertainties). The worst of those, and of the
  first measurement's uncertainty, is how exact every time figure of the agent's clients is.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chaoskit.workload.source import Delivery, Inbox, LoadSource
from chaoskit.workload.spool import Frame
from chaoskit.workload.stamp import STEP_OVER_S
from chaoskit.workload.wire import WireError, decode_delivery

if TYPE_CHECKING:
    from chaoskit.inventory.clock import ClockOffset

LATE_S = 1.0  # a frame applied later than this after it was spooled is late
LEASE_S = 15.0  # an agent not renewed for this long stops by itself
POLL_S = 0.1
CLOCK_EVERY_S = 30.0  # a loader host's clock is measured again this often while it loads
CLOCK_RETRY_S = 5.0  # and sooner after a measurement that could not be taken
ASK_RUNNING_EVERY_S = 1.0  # an agent whose spool had nothing new is asked whether it runs at most this
# often: a remote ask is a process on its host, and on a busy host the spool is often empty between reads


class Loader(ABC):
    """One agent on a loader host and the way to it."""

    name: str
    clock_offset_s: float = 0.0  # the agent stamps on the control clock with this offset
    clock_uncertainty_s: float = 0.0
    poll_s: float = POLL_S  # between reads of its spool (a remote one is read after each pause)

    @abstractmethod
    def start(self, lease_until: float) -> None:
        """Start the agent (it spools `ready` once it can load); it stops by itself at `lease_until`
        unless renewed."""

    @abstractmethod
    def go(self, t_start: float) -> None: ...

    @abstractmethod
    def renew(self, lease_until: float) -> None: ...

    @abstractmethod
    def stop(self) -> None:
        """End the load: the agent spools its final batch and exits."""

    @abstractmethod
    def kill(self) -> None: ...

    @abstractmethod
    def running(self) -> bool | None:
        """Whether the agent runs (None: cannot tell now)."""

    @abstractmethod
    def fetch(self, after: int) -> list[Frame]:
        """The whole frames numbered above `after`, in order; raises when the loader cannot be read."""

    def measure_clock(self) -> ClockOffset | None:
        """Its host's clock against the control clock now (None: it is the control node's)."""
        return None

    def set_clock(self, offset_s: float) -> None:
        """Tell the agent the offset to stamp with from now on (`chaoskit.workload.stamp`)."""
        return None

    def pids(self) -> list[int]:
        """Its processes on the control node (none for an agent on another host)."""
        return []

    def collected(self) -> None:
        """Its final frame was read: everything it spooled is with the controller, so its spool
        may be removed once it is old (a spool never collected stays: it may hold the only copy)."""
        return None

    def wait(self, timeout: float) -> None:
        """After the final batch: wait up to `timeout` for the agent to exit (then end it). A
        remote agent exits by itself: nothing to wait for here."""
        return None

    def describe(self) -> dict[str, Any]:
        return {}


class FramedSource(LoadSource):
    def __init__(self, loader: Loader, workers: tuple[int, ...], builtin: bool = True, lease_s: float = LEASE_S,
                 lost_after_s: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.loader = loader
        self.name = loader.name
        self.workers = workers
        self.builtin = builtin
        self.clock_offset_s = loader.clock_offset_s
        self.clock_uncertainty_s = loader.clock_uncertainty_s
        self.lease_s = lease_s
        # past the lease the agent has stopped: what it spooled can only be read, never grow
        self.lost_after_s = lost_after_s if lost_after_s is not None else lease_s + 15.0
        self._clock = clock
        self.applied = 0  # the last frame applied
        self.read_again = 0  # frames read a second time and skipped
        self.late = 0  # frames applied later than LATE_S after they were spooled
        self.latest_s = 0.0  # the worst lateness
        self.unreadable = 0  # frames that were not deliveries (said, skipped)
        self._late_said = False
        self._lost: str | None = None
        self._final = False
        self._killed = threading.Event()
        self.clock_error_s = self.clock_uncertainty_s  # how far its stamps can be off the control clock
        self.clock_measures = 0  # measurements taken after the start
        self._next_clock = math.inf
        self._inbox: Inbox | None = None
        self._thread = threading.Thread(target=self._run, name=f"framed-{self.name}", daemon=True)

    # -- the LoadSource --------------------------------------------------------------------------
    def launch(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._renewed = self._clock()
        self.loader.start(self._renewed + self.lease_s)
        self._next_clock = self._renewed + CLOCK_EVERY_S
        self._thread.start()

    def go(self, t_start: float) -> None:
        self.loader.go(t_start)

    def stop(self) -> None:
        try:
            self.loader.stop()
        except Exception as exc:  # it cannot be told now: its lease ends it
            self._event("loader_unreachable", why=f"stop: {type(exc).__name__}: {exc}"[:300])

    def alive(self) -> bool:
        return self._lost is None and not self._final and (self._thread.is_alive() or not self._thread.ident)

    def lost(self) -> str | None:
        if self._lost is not None:
            return self._lost
        return None if self.alive() else "it ended"

    def ended_cleanly(self) -> bool:
        return self._final  # its final frame was read (and is handed over just after)

    def kill(self) -> None:
        self._killed.set()
        with contextlib.suppress(Exception):  # unreachable: its lease ends it
            self.loader.kill()

    def join(self, timeout: float) -> None:
        if self._thread.ident:
            self._thread.join(timeout)
        if self._thread.is_alive():
            self.kill()
        with contextlib.suppress(Exception):
            self.loader.wait(timeout)

    def pids(self) -> list[int]:
        return self.loader.pids()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.loader.describe(), "frames": self.applied, "frames_late": self.late,
                "max_late_s": round(self.latest_s, 3), "lost": self._lost,
                "clock_error_s": round(self.clock_error_s, 6), "clock_measures": self.clock_measures}

    # -- reading the spool ---------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> None:
        assert self._inbox is not None
        self._inbox.put(Delivery(self.name, "event", {"kind": kind, "t": self._clock(), "source": self.name,
                                                      **fields}))

    def _run(self) -> None:
        unreachable_since: float | None = None
        asked = -math.inf  # when the agent was last asked whether it runs (monotonic)
        try:
            while not self._killed.is_set() and not self._final:
                now = self._clock()
                if now - self._renewed >= self.lease_s / 3:
                    with contextlib.suppress(Exception):  # unreachable now: the read below says so
                        self.loader.renew(now + self.lease_s)
                        self._renewed = now
                if now >= self._next_clock:
                    self._remeasure(now)
                try:
                    frames = self.loader.fetch(self.applied)
                except Exception as exc:
                    unreachable_since = unreachable_since if unreachable_since is not None else now
                    if now - unreachable_since > self.lost_after_s:
                        self._lost = (f"its loader could not be read for {now - unreachable_since:.0f} s "
                                      f"({type(exc).__name__}: {str(exc)[:120]})")
                        return
                    self._killed.wait(self.loader.poll_s)
                    continue
                unreachable_since = None
                for f in frames:
                    self._apply(f)
                ask = not frames and not self._final and time.monotonic() - asked >= ASK_RUNNING_EVERY_S
                if ask:
                    asked = time.monotonic()
                if ask and self.loader.running() is False:
                    # the agent ended: what it spooled before it did is read once more, and only
                    # then, with no final batch among it, is none coming
                    try:
                        last = self.loader.fetch(self.applied)
                    except Exception:  # unreachable again: the next turn counts it
                        continue
                    for f in last:
                        self._apply(f)
                    if not self._final:
                        self._lost = "its agent ended without its final batch"
                        return
                    continue
                if not frames or self.loader.poll_s > POLL_S:
                    self._killed.wait(self.loader.poll_s)
        finally:
            if not self._final:
                self._said_late()
            if self._lost is not None:
                self._event("loader_lost", why=self._lost, frames=self.applied)

    def _remeasure(self, now: float) -> None:
        try:
            off: ClockOffset | None = self.loader.measure_clock()
            if off is not None:
                self.loader.set_clock(off.offset_s)
        except Exception:  # unreachable now: measured again soon (its stamps keep the last offset)
            self._next_clock = now + CLOCK_RETRY_S
            return
        if off is None:  # the control node's own clock
            self._next_clock = math.inf
            return
        change = off.offset_s - self.clock_offset_s
        error = abs(change) + self.clock_uncertainty_s + off.uncertainty_s
        self.clock_offset_s, self.clock_uncertainty_s = off.offset_s, off.uncertainty_s
        self.clock_error_s = max(self.clock_error_s, error)
        self.clock_measures += 1
        self._next_clock = now + CLOCK_EVERY_S
        self._event("loader_clock", group=self.loader.describe().get("group"), offset_s=round(off.offset_s, 6),
                    uncertainty_s=round(off.uncertainty_s, 6), change_s=round(change, 6), error_s=round(error, 6),
                    stepped=abs(change) > STEP_OVER_S)

    def _said_late(self) -> None:
        """Once, before its final batch (the collector reads nothing of a source after that)."""
        if self.late and not self._late_said:
            self._late_said = True
            self._event("delivered_late", frames=self.late, max_late_s=round(self.latest_s, 3),
                        note=f"applied over {LATE_S:g} s after the agent spooled them; their ops are "
                             "folded into the intervals they belong to")

    def _apply(self, f: Frame) -> None:
        assert self._inbox is not None
        if f.seq <= self.applied:
            self.read_again += 1
            return
        self.applied = f.seq
        try:
            kind, t, payload = decode_delivery(f.payload)
        except WireError as exc:
            # its batch is lost: the recorder sees the hole in its workers' numbers (undelivered)
            self.unreadable += 1
            self._event("load_delivery_unreadable", frame=f.seq, error=str(exc)[:300])
            return
        late = self._clock() - t
        if late > LATE_S:
            self.late += 1
            self.latest_s = max(self.latest_s, late)
        if kind == "ready":
            self._inbox.put(Delivery(self.name, "ready"))
        elif kind == "event":
            self._inbox.put(Delivery(self.name, "event", payload))
        else:
            if kind == "final":
                self._said_late()
                self._final = True
            self._inbox.put(Delivery(self.name, kind, payload))
            if kind == "final":
                with contextlib.suppress(Exception):  # unreachable now: its spool stays, as one never collected
                    self.loader.collected()
