"""The load runner: N workers, each one connection, closed loop or open loop at a fixed rate.

Scaling past one core: workers are spread over `processes` worker processes (default: one per
core, at most one per worker), each recording into its own Recorder, drained to the parent every
200 ms and merged there on absolute interval indices. Processes, because one CPython process
spends the GIL on driver and bookkeeping work.

Inside a process, two executors (`LoadSpec.engine`):
- `loop` (PostgreSQL and MySQL/MariaDB, the default there, for the `deadline` profile): one
  thread drives all its connections without blocking (`chaoskit.workload.loop`; libpq's
  non-blocking API, the MySQL protocol on PyMySQL's socket), like pgbench and sysbench; a thread
  per connection paid a GIL hand-off and a wake-up per reply and reached only 0.58-0.68x of
  pgbench and 0.49-0.75x of sysbench on the lab's 2 shared cores;
- `threads` (DM, whose driver blocks; the other client profiles, whose connection handling is
  the point; TLS MySQL connections): one thread per worker, with a watchdog.

A client group whose load a tool makes (`tool: pgbench | sysbench`) runs in a process of its own
(`chaoskit.workload.tool_group`) that speaks the same protocol: ready, batches, final.

Never hiding an outage (both executors):
- every error is recorded with its class and the worker reconnects with capped backoff
  (50 ms doubling to 250 ms, with jitter): it never dies;
- every op has a client-side deadline (a frozen server still ACKs TCP, so no server-side
  timeout can fire): the watchdog shuts the socket, the loop closes the connection;
- an exception after the commit was sent is `info` (unknown), never `fail`;
- open loop: arrivals are scheduled from the start time independently of responses; latency is
  measured from the scheduled instant (no coordinated omission) and arrivals later than
  `max_lateness` are counted as missed, so during an outage the backlog is measured.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import queue
import random
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.lifeline import die_with_parent
from chaoskit.recorder import FAIL, OK, Recorder
from chaoskit.workload import stamp
from chaoskit.workload.client_cpu import ClientCpu, CpuWindow
from chaoskit.workload.engine import engine
from chaoskit.workload.loop import missed_at_stop
from chaoskit.workload.outcomes import DROP_CONNECTION, client_deadline, connect_error_class, first_line, outcome_for
from chaoskit.workload.source import Inbox, LoadSource, LocalPlant, LocalSource, Watermarks, wait_ready
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import prepare_tool, tool_main
from chaoskit.workload.workloads import OpContext, make_workload

__all__ = ["LoadRunner", "LoadSpec", "outcome_for"]

DRAIN_EVERY = 0.2


class _Worker:
    def __init__(self, wid: int, driver: Driver, workload: Any, spec: LoadSpec, recorder: Recorder,
                 stop: threading.Event, arrivals: Any, t_start: float, group: ClientGroup | None = None) -> None:
        self.wid = wid
        self.group = group or spec.client_groups()[0]
        self.driver = driver
        self.workload = workload
        self.spec = spec
        self.recorder = recorder  # shared by this process's client threads: it holds its own lock
        self.stop = stop
        self.arrivals = arrivals
        self.t_start = t_start
        self.rng = random.Random(hash((spec.run_id, wid)))
        self.ctx = OpContext(worker=wid, rng=self.rng, run_id=spec.run_id, workers=spec.workers)
        self.conn: Any = None
        self.node: str | None = None  # the member self.conn reached
        self.inflight_since: float | None = None
        self.interrupted = False

    def _next_start(self) -> float | None:
        """Closed loop: now. Open loop: the next scheduled arrival (counting missed ones)."""
        if self.arrivals is None:
            return stamp.now()
        rate_share, counter = self.arrivals
        t_free = stamp.now()  # this worker is free for the next arrival from now
        while not self.stop.is_set():
            k = next(counter)
            t_sched = self.t_start + k / rate_share
            now = stamp.now()
            if t_sched > now:
                if self.stop.wait(t_sched - now):
                    return None
                self._dispatched(t_sched, t_free)
                return t_sched
            if now - t_sched <= self.spec.max_lateness:
                self._dispatched(t_sched, t_free)
                return t_sched
            self.recorder.missed(now)
        return None

    def _dispatched(self, t_sched: float, t_free: float) -> None:
        self.recorder.dispatched(stamp.now(), t_sched, t_free)

    def _connect(self, t_invoke: float) -> bool:
        """Reach the writer for the op invoked at t_invoke; a failure is that op's outcome."""
        self.inflight_since = stamp.now()
        try:
            self.conn = self.driver.connect_client()
            self.node = self.driver.node_of(self.conn)
            return True
        except Exception as exc:
            cls = connect_error_class(self.driver, exc)
            self.recorder.record(self.wid, "write" if self.workload.writes else "read", t_invoke, stamp.now(),
                                 FAIL, cls.value, first_line(exc))
            return False
        finally:
            self.inflight_since = None

    def _checkout(self, t_invoke: float) -> bool:
        """A connection for the next op, the way this worker's profile gets one."""
        if self.conn is not None and self.group.validate:  # a pool's test on checkout
            try:
                self.driver.ping(self.conn)
            except Exception:
                self._drop()
        if self.conn is None:
            return self._connect(t_invoke)
        return True

    def _drop(self) -> None:
        Driver.close_quietly(self.conn)
        self.conn, self.node = None, None

    def run(self) -> None:
        backoff = self.spec.backoff_min
        while not self.stop.is_set():
            t_invoke = self._next_start()
            if t_invoke is None:
                break
            if not self._checkout(t_invoke):
                if self.arrivals is None:
                    self.stop.wait(backoff * (0.5 + self.rng.random()))
                backoff = min(self.spec.backoff_max, backoff * 2)
                continue
            self._one_op(t_invoke)
            if self.conn is not None:
                backoff = self.spec.backoff_min
            if self.group.profile == "per-op":
                self._drop()
            if self.arrivals is None and self.spec.think_time:
                self.stop.wait(self.spec.think_time)
        self._drop()

    def _one_op(self, t_invoke: float) -> None:
        ctx = self.ctx
        ctx.phase, ctx.key, ctx.kind, ctx.txn = "pre", None, None, None
        self.interrupted = False
        self.inflight_since = stamp.now()
        kind = "write" if self.workload.writes else "read"
        try:
            kind = self.workload.run(self.conn, ctx)
            t_done = stamp.now()
            self.inflight_since = None
            self.recorder.record(self.wid, kind, t_invoke, t_done, OK, key=ctx.key, node=self.node,
                                 keyed=self.workload.keyed, txn=ctx.recorded_txn())
        except Exception as exc:
            t_done = stamp.now()
            self.inflight_since = None
            cls = ErrorClass.timeout if self.interrupted else self.driver.classify(exc)
            # the client's own socket deadline is a give-up like the watchdog's interrupt: the
            # server may still commit what it was sent
            gave_up = self.interrupted or self.driver.client_gave_up(exc)
            outcome = outcome_for(cls, ctx.phase, gave_up) if self.workload.writes else FAIL
            self.recorder.record(self.wid, ctx.kind or kind, t_invoke, t_done, outcome, cls.value, first_line(exc),
                                 key=ctx.key, node=self.node, keyed=self.workload.keyed, txn=ctx.recorded_txn())
            if cls in DROP_CONNECTION or self.interrupted:
                self._drop()

    def watchdog_check(self, now: float, deadline: float, stopping: bool = False) -> None:
        """The deadline profile's client-side deadline; other profiles wait as long as the server
        and TCP make them (until the load stops)."""
        if not (self.group.client_deadline or stopping):
            return
        since = self.inflight_since
        if since is not None and now - since > deadline and self.conn is not None and not self.interrupted:
            self.interrupted = True
            self.driver.interrupt(self.conn)


def _child_main(cluster_json: str, inventory_json: str, spec: LoadSpec, group: ClientGroup, worker_ids: list[int],
                base: float, rate_share: float | None, out: Any, go: Any, start_at: Any, stop_evt: Any,
                parent_pid: int) -> None:
    """Entry point of one worker process (all of one client group). It dies with the controller: a
    load nobody watches must never keep writing to a cluster."""
    die_with_parent(parent_pid)
    run_share(cluster_json, inventory_json, spec, group, worker_ids, base, rate_share, out, go, start_at, stop_evt)


def run_share(cluster_json: str, inventory_json: str, spec: LoadSpec, group: ClientGroup, worker_ids: list[int],
              base: float, rate_share: float | None, out: Any, go: Any, start_at: Any, stop_evt: Any) -> None:
    """One share of a client group, in this process: `out.put((kind, pid[, payload]))` says ready,
    each batch and the final batch; `go.wait()` until the start instant `start_at.value`; the load
    ends when `stop_evt` is set. A worker process of the control node and a loader's agent
    (`chaoskit.workload.agent`) both run it; what ends it when its controller is gone is theirs."""
    cluster = Cluster.model_validate_json(cluster_json)
    inventory = Inventory.model_validate_json(inventory_json)
    driver = driver_for(cluster, inventory, connect_timeout=spec.connect_timeout, op_timeout=spec.op_timeout,
                        profile=group.client_profile())
    if driver.family == "mysql":
        driver = driver.tuned(library=spec.mysql_library)
    workload = make_workload(spec.workload, driver, spec.params, spec.run_id)
    workload.prepare()
    recorder = Recorder(base, spec.interval, keep_ops=True, stall_s=client_deadline(spec.op_timeout))
    out.put(("ready", os.getpid()))
    go.wait()
    t_start = start_at.value
    if group.client_deadline and spec.uses_loop(driver.family) and driver.loop_capable():
        _run_loop(driver, workload, spec, recorder, worker_ids, t_start, rate_share, out, stop_evt)
        return
    stop = threading.Event()
    arrivals = (rate_share, itertools.count()) if rate_share else None
    workers = [_Worker(w, driver, workload, spec, recorder, stop, arrivals, t_start, group)
               for w in worker_ids]
    threads = [threading.Thread(target=w.run, name=f"worker-{w.wid}", daemon=True) for w in workers]
    delay = t_start - stamp.now()
    if delay > 0:
        time.sleep(delay)
    for t in threads:
        t.start()
    deadline = client_deadline(spec.op_timeout)
    last_drain = stamp.now()
    while not stop_evt.is_set():
        stop_evt.wait(0.05)
        now = stamp.now()
        for w in workers:
            w.watchdog_check(now, deadline)
        if now - last_drain >= DRAIN_EVERY:
            batch = recorder.drain(now)
            out.put(("batch", os.getpid(), batch))
            last_drain = now
    stop.set()
    if arrivals is not None:
        missed_at_stop(recorder, arrivals[1], arrivals[0], t_start, stamp.now(), spec.max_lateness)
    end = stamp.now() + deadline + 1
    for t in threads:
        while t.is_alive() and stamp.now() < end:
            t.join(0.05)
            for w in workers:
                w.watchdog_check(stamp.now(), deadline, stopping=True)
    batch = recorder.drain(stamp.now(), final=True)
    out.put(("final", os.getpid(), batch))


def _run_loop(driver: Any, workload: Any, spec: LoadSpec, recorder: Recorder, worker_ids: list[int],
              t_start: float, rate_share: float | None, out: Any, stop_evt: Any) -> None:
    from chaoskit.workload.my_loop import MyLoop
    from chaoskit.workload.pg_loop import PgLoop

    delay = t_start - stamp.now()
    if delay > 0:
        time.sleep(delay)
    loop = (PgLoop if driver.family == "postgres" else MyLoop)(driver, workload, spec, recorder, worker_ids, t_start,
                                                               rate_share)
    last_drain = [stamp.now()]

    def drain(now: float) -> None:
        if now - last_drain[0] >= DRAIN_EVERY:
            out.put(("batch", os.getpid(), recorder.drain(now)))
            last_drain[0] = now

    loop.run(stop_evt.is_set, drain)
    out.put(("final", os.getpid(), recorder.drain(stamp.now(), final=True)))


class SharedFlag:
    """A one-way flag between the controller and its worker processes (`go`, `stop`): one byte of
    shared memory, polled. Not a multiprocessing Event: its `set()` waits for every process
    sleeping in `wait()` to wake, and a worker killed while waiting (SIGTERM to the process group)
    never does, so the controller hung in `stop()` with its faults unhealed until their dead-man."""

    def __init__(self, ctx: Any) -> None:
        self._value = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout: float | None = None, poll: float = 0.005) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._value.value:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(poll if left is None else min(poll, left))
        return True


class LoadRunner:
    """Start, observe and stop the load; the parent's Recorder receives everything. The load comes
    from sources (`chaoskit.workload.source`): the control node's worker processes by default,
    or those given (`sources`, the fakes of chaoskit/testing in unit tests)."""

    def __init__(self, cluster: Cluster, inventory: Inventory, spec: LoadSpec, recorder: Recorder,
                 driver: Driver | None = None, tool_dir: Path | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 sources: list[LoadSource] | None = None,
                 make_sources: Callable[[LoadRunner], list[LoadSource]] | None = None) -> None:
        """`tool_dir`: where a tool group keeps what its tool wrote (`<tool_dir>/<group>/`; default
        a temporary directory); `on_event`: what a tool group has to say (its clients' restarts)
        and what the collector says of its sources (silent, back, lost); `make_sources`: the
        sources made from this runner's shares at the start instead of the control node's worker
        processes (`chaoskit.workload.agent.agent_sources`: each share a load agent)."""
        self.cluster = cluster
        self._tmp = None if tool_dir is not None or not self.tool_groups(spec) else \
            tempfile.TemporaryDirectory(prefix="chaoskit-tools-")
        self.tool_dir = tool_dir if tool_dir is not None else Path(self._tmp.name) if self._tmp else None
        self.on_event = on_event
        self.inventory = inventory
        self.spec = spec
        self.recorder = recorder  # merged into by the collector thread, read by the drill's: it holds its own lock
        # the controller's own connections (schema, snapshots); each worker process makes its own
        self.driver = (driver or driver_for(cluster, inventory)).tuned(connect_timeout=spec.connect_timeout,
                                                                        op_timeout=max(spec.op_timeout, 60.0))
        self.workload = make_workload(spec.workload, self.driver, spec.params, spec.run_id)
        self.before: dict[int, int] | None = None  # update: every row's version before the load
        self._given = sources
        self.make_sources = make_sources
        self.sources: list[LoadSource] = []
        self._plant: LocalPlant | None = None
        self._inbox: Inbox = Inbox()
        self._marks: Watermarks | None = None
        self._seen_alive: float | None = None  # the collector's: the last instant a source was alive
        self._told_unheard: set[str] = set()  # sources whose missing results the recorder was told
        self._stopping = False
        self._collector: threading.Thread | None = None
        self._last_batch = 0.0  # when the collector last heard from a source (see _await_finals)
        self.undelivered: str | None = None  # why some source's last results never arrived
        self.t_start: float | None = None
        self.t_end: float | None = None

    @staticmethod
    def tool_groups(spec: LoadSpec) -> list[ClientGroup]:
        return [g for g in spec.client_groups() if engine(g.tool).external()]

    def route(self, group: ClientGroup) -> Cluster:
        """A group with a route reaches the same members through another cluster's endpoints."""
        return self.inventory.clusters[group.route] if group.route else self.cluster

    def setup(self) -> None:
        """Create and fill the workload's tables on the current writer; each tool group's own
        tables (pgbench -i) through its route."""
        conn = self.driver.connect_writer()
        try:
            self.workload.setup(conn)
            snapshot = getattr(self.workload, "snapshot", None)
            if snapshot is not None:
                self.before = snapshot(conn)
        finally:
            Driver.close_quietly(conn)
        for group in self.tool_groups(self.spec):
            assert self.tool_dir is not None
            prepare_tool(group, self.route(group), self.inventory, self.spec, self.tool_dir / group.name)

    def shares(self) -> list[tuple[ClientGroup, list[int]]]:
        """(group, worker ids) per worker process: a deadline group as its engine spreads it (the
        loop: one process per LOOP_WORKERS workers), other profiles' threads in one process each."""
        spec = self.spec
        out: list[tuple[ClientGroup, list[int]]] = []
        for group in spec.client_groups():
            if engine(group.tool).external():
                continue
            ids = list(group.worker_ids)
            if group.client_deadline:
                nproc = replace(spec, workers=group.workers).process_count(self.driver.family)
            else:
                nproc = 1 if not spec.processes else min(spec.processes, group.workers)
            out += [(group, ids[i::nproc]) for i in range(nproc)]
        return out

    def local_sources(self) -> list[LoadSource]:
        """The control node's worker processes: one per share of chaoskit's own clients, one per
        tool group."""
        spec = self.spec
        ctx = mp.get_context("spawn")
        self._plant = plant = LocalPlant(ctx, SharedFlag)
        inventory_json = self.inventory.model_dump_json()
        out: list[LoadSource] = []
        for group, share in self.shares():
            rate_share = spec.rate * len(share) / spec.workers if spec.rate else None
            out.append(LocalSource(plant, _child_main, (
                self.route(group).model_dump_json(), inventory_json, spec, group, share, self.recorder.base,
                rate_share), builtin=True, label=f"{group.name}/{share[0]}", workers=tuple(share)))
        for group in self.tool_groups(spec):
            assert self.tool_dir is not None
            raw = self.tool_dir / group.name
            raw.mkdir(parents=True, exist_ok=True)
            rate_share = spec.rate * group.workers / spec.workers if spec.rate else None
            out.append(LocalSource(plant, tool_main, (
                self.route(group).model_dump_json(), inventory_json, spec, group, str(raw), self.recorder.base,
                rate_share), builtin=False, label=f"{group.name}/{group.tool}", workers=tuple(group.worker_ids)))
        return out

    def start(self, start_delay: float = 0.2) -> float:
        if self._given is not None:
            self.sources = list(self._given)
        elif self.make_sources is not None:
            self.sources = self.make_sources(self)
        else:
            self.sources = self.local_sources()
        for source in self.sources:
            source.launch(self._inbox)
        try:
            wait_ready(self.sources, self._inbox)
        except RuntimeError:
            self._abort()
            raise
        self.t_start = time.time() + start_delay
        self._marks = Watermarks([s.name for s in self.sources], self.t_start)
        for source in self.sources:
            source.go(self.t_start)
        self._say_remote("load_sources")
        self._collector = threading.Thread(target=self._collect, name="load-collector", daemon=True)
        self._collector.start()
        return self.t_start

    def cpu_window(self) -> CpuWindow:
        """The load's processes, to measure their CPU over a window (`chaoskit.workload.client_cpu`):
        chaoskit's own worker processes are each bound to one core, a tool group's are not."""
        own = {pid for s in self.sources if s.builtin for pid in s.pids()}
        return CpuWindow([pid for s in self.sources for pid in s.pids()], one_core=own)

    def _say_remote(self, kind: str) -> None:
        """The sources on other hosts as they are now: where, how read, their clocks (at the start:
        `load_sources`), and what they delivered, how late, how often over SSH (at the end:
        `load_sources_ended`)."""
        remote = [s.describe() for s in self.sources if s.clock_offset_s or s.clock_uncertainty_s]
        if remote:
            self._say(kind, sources=remote)

    def _say(self, kind: str, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event({"kind": kind, "t": time.time(), **fields})

    def _collect(self) -> None:
        """Merge every delivery into the recorder and close the intervals every live source has
        delivered (`Watermarks`): a source silent for SILENT_S is left out until it speaks again,
        its late ops folded into the closed intervals; one that ended without its final batch holds
        nothing back. Closed intervals are what the abort rule and the live view judge
        (`Recorder.closed_until`)."""
        marks = self._marks
        assert marks is not None
        self._seen_alive = None  # the last instant a source was alive
        late: dict[str, int] = {}  # per source, intervals it delivered after they had closed
        while marks.finals() < len(self.sources):
            try:
                if self._collect_one(marks, late):
                    break
            except Exception as exc:  # one delivery failed: said, its ledger keys unknown, the rest goes on
                with contextlib.suppress(Exception):
                    self._say("load_delivery_failed", error=f"{type(exc).__name__}: {exc}"[:300],
                              where=traceback.format_exc(limit=-2).strip().splitlines()[-3:])
        if late:
            self._say("load_late_folded", intervals=late,
                      note="intervals closed before these sources delivered them (a source silent for "
                           f"{marks.silent_s:g} s is left out of the close rule); their ops are folded in")
        for name in marks.unfinished():
            self._say("load_source_lost", source=name, why=self._source(name).lost() or "it sent no final batch")
        self._mark_unfinished("it sent no final batch")

    def _mark_unfinished(self, why: str) -> None:
        """The sources without their final batch: their workers' ledger keys past what arrived are
        unknown to the RPO check (never phantoms)."""
        assert self._marks is not None
        for source in self.sources:
            h = self._marks.heard.get(source.name)
            if h is not None and not h.final and source.name not in self._told_unheard:
                self._told_unheard.add(source.name)
                self.recorder.undelivered(source.workers, f"{source.name}: {why}")

    def _can_deliver(self, marks: Watermarks) -> dict[str, bool]:
        """Per source: still running, or ended cleanly with its final batch not here yet (on its
        way: it is waited for, never called lost)."""
        return {s.name: s.alive() or (not marks.heard[s.name].final and s.ended_cleanly()) for s in self.sources}

    def _collect_one(self, marks: Watermarks, late: dict[str, int]) -> bool:
        """One turn of the collector; True when it is done (every source ended and nothing came)."""
        alive = {s.name: s.alive() for s in self.sources}
        now = time.time()
        for name in marks.newly_lost(now, self._can_deliver(marks)):
            self._say("load_source_lost", source=name, why=self._source(name).lost())
        if not self._stopping:
            for name in marks.newly_silent(now, alive):
                self._say("load_source_silent", source=name, silent_s=marks.silent_s,
                          note="left out of the close rule until it speaks again; its late ops fold in")
        try:
            got = self._inbox.get(timeout=0.2)
        except queue.Empty:
            # done when no source could deliver for over a second, judged after the wait (which a
            # busy host can stretch past a second) and never while a clean final is on its way
            now = time.time()
            if any(self._can_deliver(marks).values()) or self._seen_alive is None:
                self._seen_alive = now
            return now - self._seen_alive > 1.0
        now = self._last_batch = time.time()
        if got.kind == "unreadable":  # the pump could not read a word (which source's is unknown)
            self._say("load_delivery_unreadable", error=got.payload,
                      note="a batch lost this way leaves a hole in its workers' ledger: the RPO check says so")
            return False
        if got.source not in alive:
            return False
        if got.kind == "event":  # a tool group's word (a client restarted), not a batch
            marks.spoke(got.source, now)
            if self.on_event is not None:
                self.on_event(got.payload)
            return False
        if got.kind not in ("batch", "final"):
            return False
        batch = got.payload
        silent_for = marks.delivered(got.source, batch.watermark, now, final=got.kind == "final")
        if silent_for is not None:
            self._say("load_source_back", source=got.source, silent_for_s=round(silent_for, 3))
        closed = self.recorder.closed_until()  # what it delivers for intervals closed without it
        if closed is not None and batch.intervals and batch.intervals[0][0] < self.recorder.index(closed):
            edge = self.recorder.index(closed)
            late[got.source] = late.get(got.source, 0) + sum(1 for idx, _, _ in batch.intervals if idx < edge)
        try:
            self.recorder.merge(batch)
        except Exception as exc:
            self.recorder.failed_batch(batch, f"{got.source}: a batch could not be merged ({type(exc).__name__})")
            raise
        upto = marks.close_before({s.name: s.alive() for s in self.sources})
        if upto is not None and got.kind != "final":
            self.recorder.close_before(upto)
        return False

    def _source(self, name: str) -> LoadSource:
        return next(s for s in self.sources if s.name == name)

    def stop(self) -> None:
        if not self.sources:
            return
        self._stopping = True
        for source in self.sources:
            source.stop()
        if self._collector is not None:
            self._await_finals()
        for source in self.sources:
            source.join(5)
        self._say_remote("load_sources_ended")
        if self._plant is not None:
            self._plant.close()
        self.t_end = time.time()
        self.recorder.finish()
        if self._tmp is not None:
            self._tmp.cleanup()

    def _await_finals(self) -> None:
        """Wait for every source's final batch. A source still shipping (a tool group whose reader
        fell behind books its backlog after the stop) is waited for as long as batches keep coming;
        one silent for op_timeout + 15 s is given up, and that is said (`undelivered`, and an
        event): ops it had not shipped are missing from the figures, never counted as not done."""
        assert self._collector is not None and self._marks is not None
        quiet = self.spec.op_timeout + 15
        self._last_batch = time.time()  # silence counts from the stop
        while self._collector.is_alive() and time.time() - self._last_batch <= quiet:
            self._collector.join(timeout=1.0)
        if self._collector.is_alive():
            self.undelivered = (f"{len(self.sources) - self._marks.finals()} load source(s) sent no results for "
                                f"{quiet:g} s after the load's stop and were ended: what they had not sent is missing")
            if self.on_event is not None:
                self.on_event({"kind": "load_undelivered", "t": time.time(), "why": self.undelivered})
            self._mark_unfinished(f"given up {quiet:g} s after the load's stop")

    def _abort(self) -> None:
        for source in self.sources:
            source.kill()
        if self._plant is not None:
            self._plant.close()

    def run_measured(self, warmup: float, measure: float) -> tuple[float, ClientCpu]:
        """start, discard `warmup`, measure the load's own CPU over the next `measure` seconds,
        stop; the start instant and the generator's CPU over the measured window."""
        t0 = self.start()
        try:
            time.sleep(max(0.0, t0 + warmup - time.time()))
            cpu = self.cpu_window()
            cpu.begin()
            time.sleep(max(0.0, t0 + warmup + measure - time.time()))
            used = cpu.end()
        finally:
            self.stop()
        return t0, used

    def run_for(self, seconds: float, on_tick: Any = None) -> None:
        """start, wait `seconds` (calling on_tick every 0.5 s), stop."""
        t0 = self.start()
        try:
            while time.time() < t0 + seconds:
                time.sleep(min(0.5, max(0.0, t0 + seconds - time.time())))
                if on_tick is not None:
                    on_tick(self)
        finally:
            self.stop()
