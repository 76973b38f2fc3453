"""Where the load's batches come from: one interface for every source, and the collector's rule.

A **load source** is one stream of batches (`chaoskit.recorder.Batch`) stamped on the control
node's clock: today a worker process of chaoskit's own clients or of a tool group on the control
node (`LocalSource`); a loader on another machine is the same interface. What a source must do:

- `launch(inbox)`: start; say `ready` into the inbox (a `Delivery`), then deliver batches and events
  and at the end one `final` batch, each naming the source;
- `go(t_start)`: begin its load at that control-clock instant; `stop()`: end it (a final follows);
- `alive()`: whether it can still deliver; `lost()`: why it cannot, once it cannot;
  `ended_cleanly()`: it ended after handing over its final batch (which may still be on its way);
- `clock_offset_s` / `clock_uncertainty_s`: what it took from its own clock to stamp on the control
  clock, and how sure that is (0 for the control node's own processes);
- `pids()`, `builtin`: its local processes for the CPU accounting (none for a remote source).

The collector's rule (`Watermarks`): an interval closes when every *live* source has delivered
past it. A source that has said nothing for `SILENT_S` is left out, so one silent source cannot
hold back the abort rule and the live view; when it speaks again its batches fold into the
intervals already closed (the recorder folds late ops in exactly), and both moments are events
of the run (`load_source_silent`, `load_source_back` with how long and how many intervals came
late). A source that is gone (`alive()` false) holds nothing back and is said once
(`load_source_lost`).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NamedTuple

SILENT_S = 2.0  # a live source heard from less recently than this is left out of the close rule


class Delivery(NamedTuple):
    source: str
    kind: str  # ready | batch | final | event
    payload: Any = None  # a Batch (batch, final) or an event's dict


Inbox = queue.Queue  # of Delivery: every source's deliveries, read by the load runner's collector


class LoadSource(ABC):
    name: str
    builtin: bool = True  # chaoskit's own clients (each process bound to one core), else a tool's
    workers: tuple[int, ...] = ()  # the worker ids whose ops it delivers
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0

    @abstractmethod
    def launch(self, inbox: Inbox) -> None: ...

    @abstractmethod
    def go(self, t_start: float) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def alive(self) -> bool: ...

    def lost(self) -> str | None:
        """Why it can deliver no more (None while it can)."""
        return None if self.alive() else "it ended"

    def ended_cleanly(self) -> bool:
        """It ended the way that sends a final batch first: its final is delivered or still on its
        way (a local process's last words can sit in the pipe after it exited), so the collector
        waits for it instead of calling the source lost."""
        return False

    @abstractmethod
    def kill(self) -> None: ...

    @abstractmethod
    def join(self, timeout: float) -> None:
        """Wait up to `timeout` for it to end after its final batch (then end it)."""

    def pids(self) -> list[int]:
        return []

    def describe(self) -> dict[str, Any]:
        return {"source": self.name, "clock_offset_s": self.clock_offset_s,
                "clock_uncertainty_s": self.clock_uncertainty_s}


@dataclass
class _Heard:
    watermark: int | None = None  # intervals below it are complete in what it delivered
    last: float = 0.0  # when it last delivered anything
    final: bool = False
    silent_since: float | None = None
    dead_since: float | None = None
    lost: bool = False


class Watermarks:
    """The close rule over the sources, on instants the caller gives (so it is tested on a fake
    clock): which intervals may close, which sources fell silent, came back or were lost."""

    def __init__(self, names: list[str], now: float, silent_s: float = SILENT_S) -> None:
        self.silent_s = silent_s
        self.heard = {name: _Heard(last=now) for name in names}

    def delivered(self, name: str, watermark: int, now: float, final: bool = False) -> float | None:
        """A batch: returns how long the source had said nothing when it had been left out for it
        (None if it had not been)."""
        h = self.heard[name]
        was, quiet = h.silent_since, now - h.last
        h.watermark, h.last, h.silent_since = watermark, now, None
        h.final = h.final or final
        return None if was is None else quiet

    def spoke(self, name: str, now: float) -> None:
        """Anything else from it (an event): it is there."""
        self.heard[name].last = now

    def newly_silent(self, now: float, alive: dict[str, bool]) -> list[str]:
        out = []
        for name, h in self.heard.items():
            if not h.final and alive[name] and h.silent_since is None and now - h.last > self.silent_s:
                h.silent_since = now
                out.append(name)
        return out

    def newly_lost(self, now: float, alive: dict[str, bool]) -> list[str]:
        """Sources gone for `silent_s` without their final batch (a process's final may still be on
        its way when it has just exited)."""
        out = []
        for name, h in self.heard.items():
            if h.final or alive[name] or h.lost:
                continue
            if h.dead_since is None:
                h.dead_since = now
            if now - h.dead_since > self.silent_s:
                h.lost = True
                out.append(name)
        return out

    def unfinished(self) -> list[str]:
        """At the end: the sources that never sent their final batch and were not said lost yet."""
        out = []
        for name, h in self.heard.items():
            if not h.final and not h.lost:
                h.lost = True
                out.append(name)
        return out

    def close_before(self, alive: dict[str, bool]) -> int | None:
        """The interval index below which every live, speaking source has delivered (None while one
        of them has delivered nothing yet, or none holds anything)."""
        marks = []
        for name, h in self.heard.items():
            if h.final or not alive[name] or h.silent_since is not None:
                continue
            if h.watermark is None:
                return None
            marks.append(h.watermark)
        return min(marks) if marks else None

    def finals(self) -> int:
        return sum(h.final for h in self.heard.values())


class LocalPlant:
    """What the control node's worker processes share: one multiprocessing queue they all speak
    on (`(kind, pid, payload)`), the go and stop flags and the start instant; a pump thread turns
    their words into deliveries named by each process's source."""

    def __init__(self, ctx: Any, flag: Any) -> None:
        self.ctx = ctx
        self.queue = ctx.Queue()
        self.go_flag = flag(ctx)
        self.stop_flag = flag(ctx)
        self.start_at = ctx.Value("d", 0.0)
        self.names: dict[int, str] = {}
        self.lock = threading.Lock()  # a process's pid is named before the pump reads its words
        self._pump: threading.Thread | None = None
        self._inbox: Inbox | None = None
        self._closed = threading.Event()

    def pump_into(self, inbox: Inbox) -> None:
        if self._pump is None:
            self._inbox = inbox
            self._pump = threading.Thread(target=self._run, name="load-pump", daemon=True)
            self._pump.start()

    def _run(self) -> None:
        assert self._inbox is not None
        while not self._closed.is_set():
            try:
                kind, pid, *rest = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError) as exc:  # the queue itself is gone: nothing more can arrive
                if not self._closed.is_set():
                    self._inbox.put(Delivery("", "unreadable", f"the workers' queue ended ({type(exc).__name__}: "
                                                               f"{exc}"[:200] + ")"))
                return
            except Exception as exc:  # a word that cannot be read: said, and the pump goes on
                self._inbox.put(Delivery("", "unreadable", f"{type(exc).__name__}: {exc}"[:300]))
                continue
            with self.lock:
                name = self.names.get(pid)
            if name is not None:
                self._inbox.put(Delivery(name, kind, rest[0] if rest else None))

    def go(self, t_start: float) -> None:
        if not self.go_flag.is_set():
            self.start_at.value = t_start
            self.go_flag.set()

    def close(self) -> None:
        self._closed.set()


class LocalSource(LoadSource):
    """One worker process on the control node: a share of a client group of chaoskit's own clients,
    or a tool group (`builtin` False)."""

    def __init__(self, plant: LocalPlant, target: Any, args: tuple, builtin: bool, label: str,
                 workers: tuple[int, ...] = ()) -> None:
        self.plant = plant
        self.builtin = builtin
        self.workers = workers
        self.label = label
        self.process = plant.ctx.Process(target=target, daemon=True, args=(
            *args, plant.queue, plant.go_flag, plant.start_at, plant.stop_flag, os.getpid()))
        self.name = label

    def launch(self, inbox: Inbox) -> None:
        self.plant.pump_into(inbox)
        with self.plant.lock:
            self.process.start()
            self.name = f"{self.label}:{self.process.pid}"
            self.plant.names[self.process.pid] = self.name

    def go(self, t_start: float) -> None:
        self.plant.go(t_start)

    def stop(self) -> None:
        self.plant.stop_flag.set()

    def alive(self) -> bool:
        return self.process.exitcode is None

    def lost(self) -> str | None:
        code = self.process.exitcode
        return None if code is None else f"its process exited (code {code})"

    def ended_cleanly(self) -> bool:
        return self.process.exitcode == 0  # a worker exits 0 only after it put its final batch

    def kill(self) -> None:
        self.plant.stop_flag.set()
        if self.process.pid is not None:
            self.process.kill()

    def join(self, timeout: float) -> None:
        self.process.join(timeout=timeout)
        if self.process.is_alive():
            self.process.kill()

    def pids(self) -> list[int]:
        return [self.process.pid] if self.process.pid is not None else []


def wait_ready(sources: list[LoadSource], inbox: Inbox, timeout: float = 60.0) -> None:
    """Until every source said ready; a source that ends before is said at once (its traceback went
    to stderr), not after the minute the others may take to connect."""
    waiting = {s.name for s in sources}
    deadline = time.time() + timeout
    while waiting:
        try:
            got = inbox.get(timeout=min(1.0, max(0.1, deadline - time.time())))
        except queue.Empty:
            dead = [s for s in sources if not s.alive()]
            if dead or time.time() >= deadline:
                why = (f"{len(dead)} ended ({'; '.join(f'{s.name}: {s.lost()}' for s in dead)}) before they were ready"
                       if dead else f"not ready in {timeout:g} s")
                raise RuntimeError(f"load sources did not start: {why}") from None
            continue
        if got.kind == "ready":
            waiting.discard(got.source)
