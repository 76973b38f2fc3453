"""Many workers driven from one thread over non-blocking connections: the scheduling (closed and
open loop, think time, backoff), the client deadline and the outcome rules, for every engine.

Why: the load must not be the bottleneck, and on a staging box it often shares cores with the
database. One thread per connection costs a GIL hand-off and a thread wake-up on every reply on
top of the driver's own CPU: on the lab's 2 shared cores that design reached only 0.58-0.68x of
pgbench and 0.49-0.75x of sysbench on the same connections. One thread multiplexing its
connections through epoll (pgbench's and sysbench's event-driven design) costs one `poll` per
batch of replies (`benchmarks/loader_vs_pgbench.py`, `benchmarks/loader_vs_sysbench.py`).

What differs per engine is the wire (`Wire`): how a connection is put into non-blocking mode, how
a statement is sent, how its reply is read off the socket and turned into a value or an error
(`chaoskit.workload.pg_loop`: libpq's non-blocking API; `chaoskit.workload.my_loop`: the MySQL
protocol's COM_QUERY on the socket PyMySQL opened).

Connects stay blocking calls into the driver (multi-host search, per-host connect_timeout,
writability check, exactly as the threaded path), but run on a small thread pool, so a connect
hanging on a dead host never stalls the other connections of this loop.

The outcome rules are the threaded runner's (`outcome_for`): an op still waiting after the client
deadline is interrupted by closing its connection (a frozen server still ACKs TCP, so only the
client can end the wait) and counts as a timeout; an error after the commit was sent is `info`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
import select
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.recorder import FAIL, OK, Recorder
from chaoskit.workload import stamp
from chaoskit.workload.outcomes import DROP_CONNECTION, client_deadline, connect_error_class, first_line, outcome_for
from chaoskit.workload.workloads import OpContext, Stmt, Workload

IDLE, CONNECTING, BUSY, CLEANUP = range(4)
ROLLBACK = Stmt("ROLLBACK")


class ClientDeadline(TimeoutError):
    """The op outlived the client-side deadline and its connection was closed."""


class Slot:
    """One worker: its connection, the op in flight, and the wire's own per-connection state."""

    __slots__ = ("backoff", "conn", "ctx", "error", "fd", "future", "gen", "idle_since", "kind", "node", "result",
                 "state", "stmt", "t_invoke", "t_op", "wid", "wire", "writing")

    def __init__(self, wid: int, ctx: OpContext, backoff: float) -> None:
        self.wid = wid
        self.ctx = ctx
        self.conn: Any = None
        self.node: str | None = None  # the member this connection reached
        self.fd = -1
        self.wire: Any = None  # the engine's state for this connection (buffers, prepared statements)
        self.state = IDLE
        self.gen: Any = None
        self.stmt: Stmt | None = None
        self.t_invoke = 0.0
        self.t_op = 0.0
        self.kind = "write"
        self.error: BaseException | None = None
        self.result: Any = None
        self.future: Future | None = None
        self.backoff = backoff
        self.writing = False
        self.idle_since = 0.0  # open loop: when it was last freed for the next arrival


class Wire(ABC):
    """One engine's non-blocking statement protocol over a connection the driver opened."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    @abstractmethod
    def attach(self, slot: Slot) -> int:
        """Make `slot.conn` non-blocking and set up `slot.wire`; returns the socket's fd."""

    @abstractmethod
    def send(self, slot: Slot, stmt: Stmt) -> None:
        """Start `stmt` (its bytes queued; `flush` sends them)."""

    @abstractmethod
    def flush(self, slot: Slot) -> bool:
        """Send what is queued; True while some is still pending (wait for the socket to drain)."""

    @abstractmethod
    def read(self, slot: Slot) -> bool:
        """Take what arrived; True once the statement's reply is complete, with `slot.result` (the
        statement's value: rows or a row count) or `slot.error` set. Raises when the connection
        broke."""

    @abstractmethod
    def usable(self, slot: Slot) -> bool:
        """The connection can take another statement after an error."""

    @abstractmethod
    def in_transaction(self, slot: Slot) -> bool:
        """A transaction is open on the connection (an error left it to roll back)."""


def missed_at_stop(recorder: Recorder, arrivals: Iterator[int], rate: float, t_start: float, now: float,
                   max_lateness: float) -> None:
    """Open loop, when the stop is seen: the arrivals no slot or worker took (`arrivals` yields
    their indexes in order) because every one was stuck are missed too where they are already
    more than `max_lateness` late (a run that ends during an outage books its backlog); the first
    one less late might still have started, and it and those after it are not counted."""
    for k in arrivals:
        if now - (t_start + k / rate) <= max_lateness:
            return
        recorder.missed(now)


class ConnLoop:
    """Run `workers` from the calling thread until `should_stop()` says so."""

    def __init__(self, wire: Wire, workload: Workload, spec: Any, recorder: Recorder,
                 worker_ids: list[int], t_start: float, rate: float | None) -> None:
        self.wire = wire
        self.driver = wire.driver
        self.workload = workload
        self.spec = spec
        self.recorder = recorder
        self.t_start = t_start
        self.rate = rate
        self.default_kind = "write" if workload.writes else "read"
        self.deadline = client_deadline(spec.op_timeout)
        self.slots = []
        for wid in worker_ids:
            rng = random.Random(hash((spec.run_id, wid)))
            ctx = OpContext(worker=wid, rng=rng, run_id=spec.run_id, workers=spec.workers)
            self.slots.append(Slot(wid, ctx, spec.backoff_min))
        self.poller = select.epoll()  # Linux, like the lab and every staging host we drive
        self.by_fd: dict[int, Slot | None] = {}
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.slots)), thread_name_prefix="loop-connect")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.poller.register(self._wake_r.fileno(), select.EPOLLIN)
        self.by_fd[self._wake_r.fileno()] = None
        self.timers: list[tuple[float, int, Slot]] = []  # closed loop: delayed starts (think, backoff)
        self._tie = itertools.count()
        self.idle: list[Slot] = []  # open loop: slots free to take the next arrival
        self.k = 0  # open loop: next arrival index
        self.stopping = False

    # -- the loop -----------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool], on_tick: Callable[[float], None], tick: float = 0.05) -> None:
        now = stamp.now()
        for slot in self.slots:
            if self.rate:
                slot.idle_since = now
                self.idle.append(slot)
            else:
                self._begin(slot, now)
        next_tick = now + tick
        stop_by = float("inf")
        while True:
            now = stamp.now()
            if self.rate and not self.stopping:
                self._start_arrivals(now)
            while self.timers and self.timers[0][0] <= now and not self.stopping:
                _, _, slot = heapq.heappop(self.timers)
                self._begin(slot, now)
            if now >= next_tick:
                next_tick = now + tick
                self._enforce_deadlines(now)
                on_tick(now)
                if not self.stopping and should_stop():
                    self.stopping = True
                    stop_by = now + self.deadline + 1
                    if self.rate:
                        missed_at_stop(self.recorder, itertools.count(self.k), self.rate, self.t_start, now,
                                       self.spec.max_lateness)
                if self.stopping:
                    busy = [s for s in self.slots if s.state in (BUSY, CLEANUP)]
                    if not busy or now > stop_by:
                        break
            timeout = next_tick - now
            if self.timers and not self.stopping:
                timeout = min(timeout, self.timers[0][0] - now)
            if self.rate and not self.stopping and self.idle:
                timeout = min(timeout, self.t_start + self.k / self.rate - now)
            for fd, mask in self.poller.poll(max(0.0, timeout)):
                ready = self.by_fd.get(fd)
                if ready is None:
                    self._reap_connects()
                else:
                    self._on_ready(ready, mask)
        self.close()

    def close(self) -> None:
        for slot in self.slots:
            self._drop(slot)
            if slot.future is not None:
                slot.future.add_done_callback(_close_result)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.poller.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- starting ops ---------------------------------------------------------------------------
    def _start_arrivals(self, now: float) -> None:
        """Open loop: hand each due arrival to a free slot; arrivals too late to matter are missed."""
        while self.idle:
            t_sched = self.t_start + self.k / self.rate  # type: ignore[operator]
            if t_sched > now:
                return
            self.k += 1
            if now - t_sched > self.spec.max_lateness:
                self.recorder.missed(now)
                continue
            slot = self.idle.pop()
            self.recorder.dispatched(now, t_sched, slot.idle_since)
            self._begin(slot, t_sched)

    def _begin(self, slot: Slot, t_invoke: float, now: float | None = None) -> None:
        slot.t_invoke = t_invoke
        slot.t_op = now or stamp.now()
        if slot.conn is None:
            slot.state = CONNECTING
            fut = self.pool.submit(self.driver.connect_client)
            slot.future = fut
            fut.add_done_callback(self._wake)
            return
        ctx = slot.ctx
        ctx.phase, ctx.key, ctx.kind, ctx.txn = "pre", None, None, None
        slot.kind = self.default_kind
        slot.error = None
        slot.gen = self.workload.steps(ctx)
        self._advance(slot, None)

    def _wake(self, _fut: Future) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed at shutdown
            self._wake_w.send(b"x")

    def _reap_connects(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        for slot in self.slots:
            fut = slot.future
            if slot.state != CONNECTING or fut is None or not fut.done():
                continue
            slot.future = None
            now = stamp.now()
            try:
                conn = fut.result()
            except Exception as exc:
                slot.state = IDLE
                cls = connect_error_class(self.driver, exc)
                self.recorder.record(slot.wid, self.default_kind, slot.t_invoke, now, FAIL, cls.value,
                                     first_line(exc))
                self._after_op(slot, now, failed_connect=True)
                continue
            if self.stopping:
                Driver.close_quietly(conn)
                slot.state = IDLE
                continue
            slot.conn = conn
            slot.node = self.driver.node_of(conn)
            slot.writing = False
            try:
                slot.fd = self.wire.attach(slot)
            except Exception as exc:  # the connection died between the connect and here
                slot.state = IDLE
                Driver.close_quietly(conn)
                slot.conn = None
                self.recorder.record(slot.wid, self.default_kind, slot.t_invoke, now, FAIL,
                                     self.driver.classify(exc).value, first_line(exc))
                self._after_op(slot, now, failed_connect=True)
                continue
            self.poller.register(slot.fd, select.EPOLLIN)
            self.by_fd[slot.fd] = slot
            self._begin(slot, slot.t_invoke)  # the op the connect was for; its latency includes the connect

    # -- statements -----------------------------------------------------------------------------
    def _advance(self, slot: Slot, result: Any) -> None:
        try:
            stmt = slot.gen.send(result)
        except StopIteration as done:
            self._finish_ok(slot, str(done.value))
            return
        except Exception as exc:  # a workload bug must not kill the loop
            self._finish_error(slot, exc)
            return
        self._send(slot, stmt, BUSY)

    def _send(self, slot: Slot, stmt: Stmt, state: int) -> None:
        slot.stmt = stmt
        slot.result = slot.error = None
        try:
            self.wire.send(slot, stmt)
            slot.state = state
            self._flush(slot)
        except Exception as exc:
            if state == CLEANUP:
                self._drop(slot)
                slot.state = IDLE
                self._after_op(slot, stamp.now())
            else:
                self._finish_error(slot, exc)

    def _flush(self, slot: Slot) -> None:
        pending = self.wire.flush(slot)
        if pending != slot.writing:
            slot.writing = pending
            self.poller.modify(slot.fd, select.EPOLLIN | (select.EPOLLOUT if pending else 0))

    def _on_ready(self, slot: Slot, mask: int) -> None:
        try:
            if mask & select.EPOLLOUT:
                self._flush(slot)
            if not self.wire.read(slot):
                self._flush(slot)  # a wire may have queued the next part (PostgreSQL: execute after prepare)
                return  # the rest of the reply is still on its way
        except Exception as exc:
            if slot.state == CLEANUP:
                self._drop(slot)
                slot.state = IDLE
                self._after_op(slot, stamp.now())
            elif slot.state == BUSY:
                self._finish_error(slot, exc)
            else:  # input on an idle connection: the server said goodbye (e.g. terminated)
                self._drop(slot)
            return
        self._statement_done(slot)

    def _statement_done(self, slot: Slot) -> None:
        state, stmt, error, value = slot.state, slot.stmt, slot.error, slot.result
        slot.result = None
        if state == CLEANUP:
            slot.state = IDLE
            self._after_op(slot, stamp.now())
            return
        if state != BUSY or stmt is None:
            return
        if error is not None:
            self._finish_error(slot, error)
            return
        self._advance(slot, value)

    # -- outcomes -------------------------------------------------------------------------------
    def _finish_ok(self, slot: Slot, kind: str) -> None:
        now = stamp.now()
        slot.state = IDLE
        slot.gen = None
        self.recorder.record(slot.wid, kind, slot.t_invoke, now, OK, key=slot.ctx.key, node=slot.node,
                             keyed=self.workload.keyed, txn=slot.ctx.recorded_txn())
        slot.backoff = self.spec.backoff_min
        self._after_op(slot, now)

    def _finish_error(self, slot: Slot, exc: BaseException, interrupted: bool = False) -> None:
        now = stamp.now()
        ctx = slot.ctx
        cls = ErrorClass.timeout if interrupted else self.driver.classify(exc)
        gave_up = interrupted or self.driver.client_gave_up(exc)
        outcome = outcome_for(cls, ctx.phase, gave_up) if self.workload.writes else FAIL
        self.recorder.record(slot.wid, ctx.kind or slot.kind, slot.t_invoke, now, outcome, cls.value, first_line(exc),
                             key=ctx.key, node=slot.node, keyed=self.workload.keyed, txn=ctx.recorded_txn())
        if slot.gen is not None:
            slot.gen.close()
            slot.gen = None
        if interrupted or cls in DROP_CONNECTION or slot.conn is None or not self.wire.usable(slot):
            self._drop(slot)
        elif self.wire.in_transaction(slot):
            self._send(slot, ROLLBACK, CLEANUP)  # (a failed send drops the connection and moves on)
            return
        slot.state = IDLE
        self._after_op(slot, now)

    def _after_op(self, slot: Slot, now: float, failed_connect: bool = False) -> None:
        """Schedule the slot's next op (closed loop) or free it for the next arrival (open loop)."""
        if self.stopping:
            return
        if self.rate:
            slot.idle_since = now
            self.idle.append(slot)
            self._start_arrivals(now)
            return
        if failed_connect:
            delay = slot.backoff * (0.5 + slot.ctx.rng.random())
            slot.backoff = min(self.spec.backoff_max, slot.backoff * 2)
        else:
            delay = self.spec.think_time
        if delay > 0:
            heapq.heappush(self.timers, (now + delay, next(self._tie), slot))
        else:
            self._begin(slot, now, now)

    def _enforce_deadlines(self, now: float) -> None:
        for slot in self.slots:
            if slot.state in (BUSY, CLEANUP) and now - slot.t_op > self.deadline:
                if slot.state == CLEANUP:
                    self._drop(slot)
                    slot.state = IDLE
                    self._after_op(slot, now)
                else:
                    self._finish_error(slot, ClientDeadline(f"no reply within {self.deadline:g}s (client deadline)"),
                                       interrupted=True)

    def _drop(self, slot: Slot) -> None:
        if slot.conn is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.poller.unregister(slot.fd)
        self.by_fd.pop(slot.fd, None)
        Driver.close_quietly(slot.conn)
        slot.conn = slot.wire = None
        slot.fd = -1


def _close_result(fut: Future) -> None:
    """A connect that finished after the loop ended: close what it opened."""
    if not fut.cancelled() and fut.exception() is None:
        Driver.close_quietly(fut.result())
