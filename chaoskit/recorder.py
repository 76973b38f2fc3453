"""The history of a run: every op's outcome and every event, on the control node's clock.

Memory stays bounded however long the run:
- per interval (100 ms by default): counts by outcome and error class, and an HdrHistogram of
  ok-latencies, encoded (~100 bytes) once the interval closes;
- exact outage edges: for each worker, every gap between oks (last ok before, first error,
  first ok after) with the error class that opened it;
- failed/indeterminate ops individually, up to a cap (then only counted);
- ledger writes: per worker a dense column indexed by sequence number holding the ack time in
  ms since the run's base (2 bytes per write, see LedgerColumn), or a marker for fail / info.

Flat in run length with a spill directory (the drill's `recorder/`, see `chaoskit.spill`): closed
intervals older than `keep_closed_s`, ledger blocks a worker is two blocks past and the kept op
history move there as the run goes; every reader folds spilled and in-memory records into the same
figures (and late ops for a spilled interval into that interval), and the running sums of what was
spilled keep the whole-run totals and latency histogram as cheap as before.

Workers in other processes record into their own Recorder and `drain()` it; the parent
`merge()`s the batches. Intervals are keyed by absolute index (floor(t / interval)), so merges
line up exactly across processes.

Threads: a Recorder is written and read by several threads at once (in a worker process, its client
threads record while the drain ships; in the controller, the load's collector merges while the
drill's abort rule, recovery wait and end-of-load read it, the live view ticks and an experiment's
cell reads its window). The rule is the Recorder's own, so no caller has to remember a lock that
lives elsewhere: **every public method takes the recorder's lock** for its whole body (a plain lock,
~0.2 µs an op: no public method calls another), and what it returns is the caller's own (a copy, a
fresh histogram, a list), never a live view of the recorder's containers. The attributes that hold
the run's detail (`gaps`, `errors`, `errors_dropped`, `ledger`, `history`, `row_updates`, `hists`)
are for reading after `finish()`: by then nothing writes any more, because `finish()` seals the
recorder and a batch merged after it (a collector given up on, still delivering) is counted in
`late_batches` and left out, never folded into figures already being read.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from hdrh.histogram import HdrHistogram

from chaoskit.db.base import ErrorClass
from chaoskit.history import OpHistory
from chaoskit.keyranges import KeyRanges
from chaoskit.spill import SEGMENT_INTERVALS, IntervalSpill, LedgerFile, OpSpill
from chaoskit.txnlog import TxnLog, TxnRecord

if TYPE_CHECKING:
    import pandas as pd

OK, FAIL, INFO = "ok", "fail", "info"
# How a workload's op key reads (`Workload.keyed`): each acknowledged op added one row numbered
# `key` for its worker (the ledger), or incremented the version of row `key` (the update workload).
# These are the two shapes of write evidence the recorder stores (per worker: numbered rows, kept
# as runs and spilled; per row: acknowledged and indeterminate increments), not workload names: a
# workload whose check counts rows or versions declares one of them and adds no code here
SEQUENCE, VERSION = "sequence", "version"
STALL = "stall"  # a gap's class when an op was acknowledged only after the stall bound
ERROR_CLASSES = [c.value for c in ErrorClass]
# open loop: `dispatched` arrivals started, `dispatched_late` those the client itself started more
# than DISPATCH_LATE_S after both their scheduled instant and a free connection (its own lag)
COLUMNS = ["ok", "fail", "info", "write_ok", "read_ok", "missed", "dispatched", "dispatched_late",
           *[f"err_{c}" for c in ERROR_CLASSES]]
DISPATCH_LATE_S = 0.010
_COL = {name: i for i, name in enumerate(COLUMNS)}
LEDGER_FAIL = 0xFFFFFFFF
LEDGER_INFO = 0xFFFFFFFE
LEDGER_UNSET = 0xFFFFFFFD
UNDELIVERED_END = (1 << 62) - 1  # the last key of an open-ended undelivered range
HIST_MAX_US = 120_000_000
_ROW = struct.Struct(f"<{len(COLUMNS)}I4f")  # one closed interval: ~100 bytes


_HIST_DIGITS = 2
_HIST_SUB_BITS = math.ceil(math.log2(2 * 10**_HIST_DIGITS))  # 8: values below 256 µs are exact


def _new_hist() -> HdrHistogram:
    return HdrHistogram(1, HIST_MAX_US, _HIST_DIGITS)


@functools.cache
def _bucket_medians() -> np.ndarray:
    """Each bucket's median equivalent value (µs), by bucket index: what HdrHistogram's mean
    weighs a bucket's count with."""
    h = _new_hist()
    return np.array([h._hdr_median_equiv_value(h.get_value_from_index(i)) for i in range(h.counts_len)],
                    dtype=np.int64)


def hist_mean(hist: HdrHistogram) -> float:
    """HdrHistogram's `get_mean_value` (the same integer sum of count x bucket median, divided
    once), as one dot product: the library walks every recorded value in Python, ~7 ms a call."""
    total = hist.get_total_count()
    if not total:
        return 0.0
    counts = np.ctypeslib.as_array(hist.counts).astype(np.int64, copy=False)
    return float(int(counts @ _bucket_medians())) / total


def _pack(counts: list[int], hist: HdrHistogram) -> bytes:
    """A closed interval's row: its counts and its ok-latency percentiles (ms) from `hist`."""
    if hist.get_total_count():
        p50, p99, p999 = (hist.get_value_at_percentile(p) / 1000 for p in (50, 99, 99.9))
        mx = hist.get_max_value() / 1000
    else:
        p50 = p99 = p999 = mx = math.nan
    return _ROW.pack(*counts, p50, p99, p999, mx)


@dataclass
class Gap:
    """A worker's stretch without a successful op."""

    worker: int
    last_ok_before: float | None
    first_err: float
    first_err_class: str
    first_ok_after: float | None = None
    errors: int = 1


@dataclass
class Batch:
    """What a worker process ships to the parent."""

    intervals: list[tuple[int, list[int], bytes]] = field(default_factory=list)
    errors: list[tuple] = field(default_factory=list)
    errors_dropped: int = 0
    gaps: list[Gap] = field(default_factory=list)
    ledger: list[tuple[int, int, bytes]] = field(default_factory=list)  # worker, first seq, array bytes
    ops: list[tuple] = field(default_factory=list)  # history.Op tuples, when the source keeps them
    rows: dict[int, list[int]] = field(default_factory=dict)  # update: row -> [acknowledged, indeterminate]
    txns: list[TxnRecord] = field(default_factory=list)  # list-append: every transaction (chaoskit.txnlog)
    watermark: int = -1  # intervals below this index are complete in this batch's source


class _Open:
    """An interval still receiving ops. Latencies are counted per HdrHistogram bucket (a dict
    increment, ~10x cheaper than hdrh's pure-Python record_value on the hot path) and folded into
    a histogram once, when the interval is shipped or closed: the result is the same histogram."""

    __slots__ = ("counts", "lat", "merged")

    def __init__(self) -> None:
        self.counts = [0] * len(COLUMNS)
        self.lat: dict[int, int] = {}
        self.merged: HdrHistogram | None = None

    def hist(self) -> HdrHistogram:
        hist = self.merged if self.merged is not None else _new_hist()
        for value, count in self.lat.items():
            hist.record_value(value, count)
        self.lat = {}
        self.merged = hist
        return hist


class LedgerColumn:
    """One worker's ledger: entry i is seq i+1, holding its ack time in ms since the run's base,
    or LEDGER_FAIL / LEDGER_INFO / LEDGER_UNSET.

    Stored in blocks of 4096 entries as 2-byte offsets from the block's first ack (a worker's
    acks are in time order), so a busy worker costs 2 bytes per write; a block spanning more
    than ~65 s (a slow worker: few entries) is promoted to 4-byte absolute values. With a spill
    file, a block the worker is two blocks past moves there (`spill`), so memory holds at most
    the last few blocks per worker however long the run.
    """

    BLOCK = 4096
    _H: ClassVar[dict[int, int]] = {LEDGER_FAIL: 0xFFFF, LEDGER_INFO: 0xFFFE, LEDGER_UNSET: 0xFFFD}
    _H_BACK: ClassVar[dict[int, int]] = {v: k for k, v in _H.items()}

    def __init__(self, file: LedgerFile | None = None) -> None:
        self.blocks: list[array | None] = []
        self.bases: list[int | None] = []
        self.length = 0
        self.file = file
        self.spilled = 0  # blocks moved to the file (their list entries are None)

    def __len__(self) -> int:
        return self.length

    def set(self, i: int, value: int) -> None:
        b, o = divmod(i, self.BLOCK)
        if b < self.spilled:
            assert self.file is not None
            self.file.put(i, value)
            return
        while len(self.blocks) <= b:
            self.blocks.append(array("H", [0xFFFD]) * self.BLOCK)
            self.bases.append(None)
        block = self.blocks[b]
        assert block is not None
        if i >= self.length:
            self.length = i + 1
        if block.typecode == "I":
            block[o] = value
            return
        if value >= LEDGER_UNSET:
            block[o] = self._H[value]
            return
        base = self.bases[b]
        if base is None:
            base = self.bases[b] = value
        off = value - base
        if 0 <= off < 0xFFFD:
            block[o] = off
            return
        full = array("I", (self._decode_h(x, base) for x in block))
        full[o] = value
        self.blocks[b] = full

    @classmethod
    def _decode_h(cls, x: int, base: int | None) -> int:
        if x >= 0xFFFD:
            return cls._H_BACK[x]
        return (base or 0) + x

    def get(self, i: int) -> int:
        if i >= self.length:
            return LEDGER_UNSET
        b, o = divmod(i, self.BLOCK)
        if b < self.spilled:
            assert self.file is not None
            return self.file.get(i)
        block = self.blocks[b]
        assert block is not None
        x = block[o]
        return x if block.typecode == "I" else self._decode_h(x, self.bases[b])

    def _block_values(self, b: int) -> np.ndarray:
        """Block b (in memory) as absolute uint32 values."""
        block = self.blocks[b]
        assert block is not None
        if block.typecode == "I":
            return np.frombuffer(block, dtype=np.uint32).copy()
        raw = np.frombuffer(block, dtype=np.uint16)
        out = raw.astype(np.uint32) + np.uint32(self.bases[b] or 0)
        for short, full in self._H_BACK.items():
            out[raw == short] = full
        return out

    def values(self, start: int = 0) -> np.ndarray:
        """Entries from `start` as absolute uint32 values (for shipping and scans)."""
        parts: list[np.ndarray] = []
        spilled = self.spilled * self.BLOCK
        if start < spilled:
            assert self.file is not None
            parts.append(self.file.values(start, spilled))
        for b in range(max(self.spilled, start // self.BLOCK), len(self.blocks)):
            lo = max(0, start - b * self.BLOCK)
            hi = min(self.BLOCK, self.length - b * self.BLOCK)
            if hi > lo:
                parts.append(self._block_values(b)[lo:hi])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def spill(self) -> None:
        """Move every block the worker is two blocks past to the file (none without a file)."""
        if self.file is None:
            return
        while self.length > (self.spilled + 2) * self.BLOCK:
            self.file.append(self._block_values(self.spilled))
            self.blocks[self.spilled] = None
            self.bases[self.spilled] = None
            self.spilled += 1


class ErrorLog:
    """The kept errors, each (t, worker, kind, outcome, class, message), held in columns with the
    strings numbered once: ~32 bytes an error instead of ~120 as a tuple each (200,000 are kept).
    Reads as a list of those tuples: len, index, slice, iteration."""

    def __init__(self) -> None:
        self._t = array("d")
        self._worker = array("q")
        self._fields = array("I")  # kind, outcome, class, message: 4 string numbers per error
        self._strings: list[str] = []
        self._number: dict[str, int] = {}

    def _n(self, text: str) -> int:
        n = self._number.get(text)
        if n is None:
            n = self._number[text] = len(self._strings)
            self._strings.append(text)
        return n

    def append(self, error: tuple) -> None:
        t, worker, kind, outcome, cls, message = error
        self._t.append(t)
        self._worker.append(worker)
        self._fields.extend((self._n(kind), self._n(outcome), self._n(cls), self._n(message)))

    def extend(self, errors: Iterable[tuple]) -> None:
        for error in errors:
            self.append(error)

    def __len__(self) -> int:
        return len(self._t)

    def _at(self, i: int) -> tuple:
        s, f = self._strings, self._fields
        return (self._t[i], self._worker[i], s[f[4 * i]], s[f[4 * i + 1]], s[f[4 * i + 2]], s[f[4 * i + 3]])

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(len(self)))]
        return self._at(range(len(self))[i])

    def __iter__(self) -> Iterator[tuple]:
        return (self._at(i) for i in range(len(self)))

    def sort_by_time(self) -> None:
        """In time order (stable: errors at the same instant keep their order)."""
        order = sorted(range(len(self)), key=self._t.__getitem__)
        self._t = array("d", (self._t[i] for i in order))
        self._worker = array("q", (self._worker[i] for i in order))
        self._fields = array("I", (self._fields[4 * i + k] for i in order for k in range(4)))


class Recorder:
    def __init__(self, base: float, interval: float = 0.1, max_errors: int = 200_000, keep_ops: bool = False,
                 stall_s: float | None = None, spill_dir: Path | None = None, keep_closed_s: float = 300.0) -> None:
        """`spill_dir`: where closed intervals older than `keep_closed_s`, ledger blocks and the
        kept op history move as the run goes (`chaoskit.spill`); without it all stays in memory."""
        self.base = base  # wall-clock origin of ledger ack times
        self.interval = interval
        self.max_errors = max_errors
        self._open: dict[int, _Open] = {}
        self._rows: dict[int, bytes] = {}  # idx -> packed counts + p50, p99, p99.9, max (ms)
        self.hists: dict[int, bytes] = {}  # the closed intervals in memory (with a spill: the recent ones)
        self.spill_dir = spill_dir
        self._ispill = IntervalSpill(spill_dir, COLUMNS) if spill_dir is not None else None
        self._keep_closed = max(1, round(keep_closed_s / interval))
        self._spilled_until = -(1 << 62)  # intervals at or below this index are spilled (or late)
        self._spilled_counts = [0] * len(COLUMNS)  # of every spilled interval, as spilled
        self._spilled_hist = _new_hist()
        # late ops for intervals already spilled: idx -> (counts, histogram), folded in when read
        self._late: dict[int, tuple[list[int], HdrHistogram]] = {}
        self._max_closed: int | None = None
        self.errors = ErrorLog()  # (t, worker, kind, outcome, class, message)
        self.errors_dropped = 0
        self.gaps: list[Gap] = []
        self._open_gap: dict[int, Gap] = {}
        self._last_ok: dict[int, float] = {}
        self.ledger: dict[int, LedgerColumn] = {}
        self._ledger_shipped: dict[int, int] = {}
        self._errors_shipped = 0
        self.keep_ops = keep_ops  # every op as a history.Op, shipped with the batches
        # An op acknowledged after longer than this is an outage for the client that waited (a
        # pool client waits out a frozen server where a deadline client gives up): a gap of class
        # "stall" from the moment it exceeded the bound to its acknowledgement.
        self.stall_s = stall_s
        self.ops: list[tuple] = []
        self._txns: list[TxnRecord] = []  # recorded here, not yet drained
        self.txns = TxnLog(spill_dir)  # every transaction merged (a workload that records them)
        # the ops around each fault (history.jsonl)
        self.history = OpHistory(spill=OpSpill(spill_dir / "history") if spill_dir is not None else None)
        # update workload: per row, how many increments were acknowledged / indeterminate
        self.row_updates: dict[int, list[int]] = {}
        self._gaps_shipped = 0
        self._lock = threading.Lock()  # see the module's docstring: every public method holds it
        self._finished = False
        self.late_batches = 0  # batches merged after finish(): left out (the load runner says why)
        # per worker, the ledger keys whose outcomes never reached this recorder (a batch lost on
        # its way, a source ended without its final batch, a batch after finish): rows present
        # there were written by ops chaoskit did not hear the end of; never phantoms, never lost
        self._undelivered: dict[int, list[tuple[int, int]]] = {}
        self.undelivered_why: list[str] = []

    # -- recording (hot path) --------------------------------------------------------------
    def index(self, t: float) -> int:
        """Interval of a timestamp (true division: `t // 0.1` floors 1e6 to 9999999)."""
        return math.floor(t / self.interval)

    def _slot(self, t: float) -> _Open:
        idx = self.index(t)
        slot = self._open.get(idx)
        if slot is None:
            slot = self._open[idx] = _Open()
        return slot

    def record(self, worker: int, kind: str, t_invoke: float, t_done: float, outcome: str,
               error_class: str | None = None, message: str = "", key: int | None = None,
               node: str | None = None, keyed: str | None = None,
               txn: tuple[tuple[Any, ...], ...] | None = None) -> None:
        """One op: `kind` is write|read; the op is booked in the interval where it completed.
        `key` is what it wrote, read as its workload declares (`keyed`): SEQUENCE, the number of
        the one row it added for this worker (lost writes are counted per key); VERSION, the id of
        the row whose version it incremented (lost updates are counted per row). `txn`: the
        op's micro-operations, for a workload that records its transactions (list-append)."""
        with self._lock:
            if txn is not None:
                self._txns.append((worker, t_invoke, t_done, outcome, txn))
            ledger_seq = key if keyed == SEQUENCE else None
            row = key if keyed == VERSION else None
            if self.keep_ops:
                self.ops.append((t_invoke, t_done, worker, kind, outcome, ledger_seq, node,
                                 None if outcome == OK else error_class or ErrorClass.other.value, row))
            if row is not None and outcome != FAIL:
                counts = self.row_updates.get(row)
                if counts is None:
                    counts = self.row_updates[row] = [0, 0]
                counts[0 if outcome == OK else 1] += 1
            slot = self._slot(t_done)
            counts = slot.counts
            if outcome == OK:
                counts[0] += 1
                counts[3 if kind == "write" else 4] += 1
                us = min(HIST_MAX_US, max(1, int((t_done - t_invoke) * 1e6)))
                shift = us.bit_length() - _HIST_SUB_BITS  # keep the bits the histogram's bucket keeps
                if shift > 0:
                    us = us >> shift << shift
                lat = slot.lat
                lat[us] = lat.get(us, 0) + 1
                self._worker_ok(worker, t_invoke, t_done)
            else:
                counts[1 if outcome == FAIL else 2] += 1
                cls = error_class or ErrorClass.other.value
                counts[_COL["err_" + cls]] += 1
                gap = self._open_gap.get(worker)
                if gap is None:
                    self._open_gap[worker] = Gap(worker, self._last_ok.get(worker), t_done, cls)
                else:
                    gap.errors += 1
                if len(self.errors) < self.max_errors:
                    self.errors.append((t_done, worker, kind, outcome, cls, sys.intern(message[:200])))
                else:
                    self.errors_dropped += 1
            if ledger_seq is not None:
                self._ledger_put(worker, ledger_seq, t_done, outcome)

    def _worker_ok(self, worker: int, t_invoke: float, t_done: float) -> None:
        """An acknowledged op ends the worker's open gap (or, acknowledged after the stall bound,
        is one)."""
        gap = self._open_gap.pop(worker, None)
        if gap is None and self.stall_s is not None and t_done - t_invoke > self.stall_s:
            gap = Gap(worker, self._last_ok.get(worker), t_invoke + self.stall_s, STALL, errors=0)
        if gap is not None:
            gap.first_ok_after = t_done
            self.gaps.append(gap)
        self._last_ok[worker] = t_done

    def record_rate(self, worker: int, kind: str, t_end: float, ok: int) -> None:
        """`ok` ops a rate-only source (sysbench's interval report) says were acknowledged in the
        interval ending at `t_end`: counted in the interval holding t_end, with no latency (none
        is known per op), and as one acknowledgement of `worker` at t_end for its outage edges, so
        a gap it closes is as late as the report, never earlier than the truth."""
        if ok <= 0:
            return
        with self._lock:
            counts = self._slot(t_end).counts
            counts[0] += ok
            counts[3 if kind == "write" else 4] += ok
            self._worker_ok(worker, t_end, t_end)

    def missed(self, t: float, count: int = 1) -> None:
        """Open-loop arrivals that never started (the backlog exceeded its bound)."""
        with self._lock:
            self._slot(t).counts[_COL["missed"]] += count

    def dispatched(self, t: float, t_sched: float, t_free: float) -> None:
        """An open-loop arrival started at `t`: due at `t_sched`, its connection free since `t_free`.
        The client's own lag is `t - max(t_sched, t_free)`: what it took to start an op that nothing
        outside it held back (a late reply makes a backlog, which is the server's, never this)."""
        with self._lock:
            counts = self._slot(t).counts
            counts[_COL["dispatched"]] += 1
            if t - max(t_sched, t_free) > DISPATCH_LATE_S:
                counts[_COL["dispatched_late"]] += 1

    def _column(self, worker: int) -> LedgerColumn:
        col = self.ledger.get(worker)
        if col is None:
            spill = LedgerFile(self.spill_dir / "ledger" / f"{worker}.u32") if self.spill_dir is not None else None
            col = self.ledger[worker] = LedgerColumn(spill)
        return col

    def _ledger_put(self, worker: int, seq: int, t: float, outcome: str) -> None:
        col = self._column(worker)
        if outcome == OK:
            value = max(0, min(LEDGER_UNSET - 1, int((t - self.base) * 1000)))
        else:
            value = LEDGER_FAIL if outcome == FAIL else LEDGER_INFO
        col.set(seq - 1, value)
        if col.file is not None:
            col.spill()

    # -- closing intervals and moving batches ----------------------------------------------
    def close_before(self, idx: int) -> None:
        with self._lock:
            self._close_before(idx)

    def _close_before(self, idx: int) -> None:
        for i in sorted(k for k in self._open if k < idx):
            slot = self._open.pop(i)
            self._store(i, slot.counts, slot.hist())
        self._spill_intervals()

    def _spill_intervals(self, everything: bool = False) -> None:
        """Move the closed intervals older than `keep_closed_s` before the newest to the spill, a
        segment at a time (`everything`: all of them, at the end)."""
        if self._ispill is None or not self._rows:
            return
        if not everything and len(self._rows) < self._keep_closed + SEGMENT_INTERVALS:
            return
        horizon = (1 << 62) if everything else max(self._rows) - self._keep_closed
        old = sorted(k for k in self._rows if k < horizon)
        for at in range(0, len(old), SEGMENT_INTERVALS):
            chunk = old[at:at + SEGMENT_INTERVALS]
            rows = []
            for i in chunk:
                counts, *pct = self._row(i)
                rows.append((i, counts, pct, self.hists[i]))
            self._ispill.write(rows)
            for i, counts, _, encoded in rows:
                self._spilled_counts = [a + b for a, b in zip(self._spilled_counts, counts, strict=True)]
                self._spilled_hist.add(HdrHistogram.decode(encoded))
                del self._rows[i], self.hists[i]
            self._spilled_until = max(self._spilled_until, chunk[-1])

    def keep_around(self, t: float) -> None:
        """Keep the op-level history within its window of `t` (a fault's effect, a switchover)."""
        with self._lock:
            self.history.keep_around(t)

    def _store(self, idx: int, counts: list[int], hist: HdrHistogram) -> None:
        self._max_closed = idx if self._max_closed is None else max(self._max_closed, idx)
        if idx <= self._spilled_until and idx not in self._rows:  # late for a spilled interval
            late = self._late.get(idx)
            if late is None:
                self._late[idx] = (list(counts), hist)
            else:
                self._late[idx] = ([a + b for a, b in zip(late[0], counts, strict=True)], late[1])
                late[1].add(hist)
            return
        if idx in self._rows:  # a late op for a closed interval: fold it in
            old_counts = self._row(idx)[0]
            counts = [a + b for a, b in zip(old_counts, counts, strict=True)]
            old = HdrHistogram.decode(self.hists[idx])
            old.add(hist)
            hist = old
        self._rows[idx] = _pack(counts, hist)
        self.hists[idx] = hist.encode()

    @property
    def rows(self) -> dict[int, bytes]:
        """The closed intervals (a copy; with a spill, read back from it too)."""
        with self._lock:
            return {idx: _ROW.pack(*counts, *pct) for idx, counts, pct, _ in self._closed()}

    def row(self, idx: int) -> tuple[list[int], float, float, float, float]:
        with self._lock:
            return self._row(idx)

    def _row(self, idx: int) -> tuple[list[int], float, float, float, float]:
        if idx in self._rows:
            values = _ROW.unpack(self._rows[idx])
        else:
            found = next(self._closed(idx, idx + 1), None) if idx <= self._spilled_until else None
            if found is None:
                raise KeyError(idx)
            values = (*found[1], *found[2])
        n = len(COLUMNS)
        return list(values[:n]), values[n], values[n + 1], values[n + 2], values[n + 3]

    def _mem_keys(self, lo: float, hi: float) -> list[int]:
        if hi - lo <= len(self._rows):
            return [i for i in range(int(lo), int(hi)) if i in self._rows]
        return sorted(i for i in self._rows if lo <= i < hi)

    def _closed(self, lo: float = -math.inf, hi: float = math.inf, hist: bool = False
                ) -> Iterator[tuple[int, list[int], tuple[float, ...], bytes | None]]:
        """Every closed interval with lo <= index < hi, in index order: (index, counts, (p50, p99,
        p99.9, max), its encoded histogram when `hist`). Spilled ones are read back with the late
        ops that came for them folded in, exactly as they would have been in memory."""
        if self._ispill is not None and lo <= self._spilled_until:
            late = sorted(i for i in self._late if lo <= i < hi)
            li = 0
            for idx, counts, pct, encoded in self._ispill.read(lo, hi, hist=hist or bool(late)):
                while li < len(late) and late[li] < idx:
                    yield self._late_row(late[li], None, hist)
                    li += 1
                if li < len(late) and late[li] == idx:
                    assert encoded is not None
                    yield self._late_row(idx, (counts, encoded), hist)
                    li += 1
                else:
                    yield idx, counts, pct, encoded if hist else None
            for k in late[li:]:
                yield self._late_row(k, None, hist)
        n = len(COLUMNS)
        for idx in self._mem_keys(lo, hi):
            values = _ROW.unpack(self._rows[idx])
            yield idx, list(values[:n]), tuple(values[n:]), self.hists[idx] if hist else None

    def _late_row(self, idx: int, spilled: tuple[list[int], bytes] | None, hist: bool
                  ) -> tuple[int, list[int], tuple[float, ...], bytes | None]:
        counts, late = self._late[idx]
        combined = _new_hist()
        if spilled is not None:
            combined.add(HdrHistogram.decode(spilled[1]))
            counts = [a + b for a, b in zip(spilled[0], counts, strict=True)]
        combined.add(late)
        values = _ROW.unpack(_pack(counts, combined))
        n = len(COLUMNS)
        return idx, list(values[:n]), tuple(values[n:]), combined.encode() if hist else None

    def drain(self, now: float, final: bool = False) -> Batch:
        """Everything new since the last drain; intervals ending before `now` - one interval."""
        with self._lock:
            watermark = self.index(now) - 1 if not final else 1 << 62
            batch = Batch(watermark=watermark)
            batch.ops, self.ops = self.ops, []
            batch.rows, self.row_updates = self.row_updates, {}
            batch.txns, self._txns = self._txns, []
            for i in sorted(k for k in self._open if k < watermark):
                slot = self._open.pop(i)
                batch.intervals.append((i, slot.counts, slot.hist().encode()))
            batch.errors = self.errors[self._errors_shipped:]
            self._errors_shipped = len(self.errors)
            batch.errors_dropped, self.errors_dropped = self.errors_dropped, 0
            batch.gaps = self.gaps[self._gaps_shipped:]
            self._gaps_shipped = len(self.gaps)
            if final:
                batch.gaps = batch.gaps + list(self._open_gap.values())
            for worker, col in self.ledger.items():
                start = self._ledger_shipped.get(worker, 0)
                if len(col) > start:
                    batch.ledger.append((worker, start + 1, col.values(start).tobytes()))
                    self._ledger_shipped[worker] = len(col)
            return batch

    def merge(self, batch: Batch) -> None:
        with self._lock:
            if self._finished:
                self.late_batches += 1
                self._unheard_batch(batch)
                return
            self._merge(batch)

    def _unheard(self, worker: int, lo: int, hi: int) -> None:
        if hi >= lo:
            self._undelivered.setdefault(worker, []).append((lo, hi))

    def _unheard_batch(self, batch: Batch) -> None:
        """Every ledger key `batch` carries (4 bytes an entry) as unknown, and every worker whose
        transactions it carries (a list-append read may show their appends: indeterminate ones)."""
        for worker, first_seq, raw in batch.ledger:
            self._unheard(worker, first_seq, first_seq + len(raw) // 4 - 1)
        for worker in sorted({t[0] for t in batch.txns}):
            self._unheard(worker, 1, UNDELIVERED_END)

    def undelivered(self, workers: Iterable[int], why: str) -> None:
        """These workers' source ended without delivering all it had: their ledger keys past what
        arrived are unknown (`ledger_undelivered`), and `why` is kept for the evidence."""
        with self._lock:
            for worker in workers:
                col = self.ledger.get(worker)
                self._unheard(worker, (len(col) if col is not None else 0) + 1, UNDELIVERED_END)
            self.undelivered_why.append(why)

    def failed_batch(self, batch: Batch, why: str) -> None:
        """A batch that could not be merged (the collector's error, said by the load runner): its
        ledger keys are unknown from here on (part of it may be in)."""
        with self._lock:
            self._unheard_batch(batch)
            self.undelivered_why.append(why)

    def ledger_undelivered(self) -> KeyRanges:
        """The ledger keys whose outcomes never arrived, per worker (empty when everything did)."""
        with self._lock:
            return KeyRanges({w: list(spans) for w, spans in self._undelivered.items()})

    def _merge(self, batch: Batch) -> None:
        for idx, counts, encoded in batch.intervals:
            slot = self._open.get(idx)
            if slot is None:
                slot = self._open[idx] = _Open()
            slot.counts = [a + b for a, b in zip(slot.counts, counts, strict=True)]
            slot.hist().add(HdrHistogram.decode(encoded))
        kept = batch.errors[: max(0, self.max_errors - len(self.errors))]  # room before extending
        self.errors.extend(kept)
        self.errors_dropped += batch.errors_dropped + len(batch.errors) - len(kept)
        self.gaps.extend(batch.gaps)
        if batch.ops:
            self.history.add(batch.ops)
        self.txns.add(batch.txns)
        for row, (acked, info) in batch.rows.items():
            counts = self.row_updates.setdefault(row, [0, 0])
            counts[0] += acked
            counts[1] += info
        for worker, first_seq, raw in batch.ledger:
            incoming = array("I")
            incoming.frombytes(raw)
            col = self._column(worker)
            # a worker ships its ledger from where its last batch ended: a hole is a batch that
            # never arrived
            self._unheard(worker, len(col) + 1, first_seq - 1)
            for i, value in enumerate(incoming, start=first_seq - 1):
                col.set(i, value)
            col.spill()

    def finish(self) -> None:
        """Close every interval and every open gap (an outage lasting to the end has no first ok);
        seal the recorder: a later `merge` is counted in `late_batches` and left out."""
        with self._lock:
            self._close_before(1 << 62)
            self.history.add(self.ops)
            self.ops = []
            self.history.flush()
            self.txns.add(self._txns)
            self._txns = []
            self.txns.close()  # its spill file whole before the run directory is sealed
            self.gaps.extend(self._open_gap.values())
            self._open_gap.clear()
            self.gaps.sort(key=lambda g: (g.first_err, g.worker))
            self.errors.sort_by_time()
            self._finished = True

    @property
    def finished(self) -> bool:
        return self._finished

    # -- reading ---------------------------------------------------------------------------
    def totals(self) -> dict[str, int]:
        counts = [0] * len(COLUMNS)
        with self._lock:
            parts = [self._spilled_counts, *(c for c, _ in self._late.values()),
                     *(self._row(idx)[0] for idx in self._rows), *(slot.counts for slot in self._open.values())]
            for part in parts:
                counts = [a + b for a, b in zip(counts, part, strict=True)]
        return dict(zip(COLUMNS, counts, strict=True))

    def window(self, t_from: float, t_to: float, latency: bool = True) -> dict[str, Any]:
        """Totals, rate and (`latency`) ok-latency mean and percentiles over the closed intervals
        in [t_from, t_to). Without `latency` no histogram is read: what the abort rule judges ten
        times a second needs the counts only."""
        lo, hi = self.index(t_from), self.index(t_to)
        counts = [0] * len(COLUMNS)
        hist = _new_hist()
        seen = 0
        with self._lock:
            for _, row, _, encoded in self._closed(lo, hi, hist=latency):
                seen += 1
                counts = [a + b for a, b in zip(counts, row, strict=True)]
                if latency:
                    assert encoded is not None
                    hist.add(HdrHistogram.decode(encoded))
        totals = dict(zip(COLUMNS, counts, strict=True))
        span = max(self.interval, (hi - lo) * self.interval)
        if not latency:
            return {**totals, "tps": totals["ok"] / span, "intervals": seen}
        lat = {f"p{p}_ms": (hist.get_value_at_percentile(p) / 1000 if hist.get_total_count() else math.nan)
               for p in (50, 90, 99, 99.9)}
        lat["mean_ms"] = hist_mean(hist) / 1000 if hist.get_total_count() else math.nan
        return {**totals, "tps": totals["ok"] / span, "intervals": seen, **lat}

    def latency_hist(self, t_from: float | None = None, t_to: float | None = None) -> HdrHistogram:
        """ok-latency histogram (µs) of the closed intervals within [t_from, t_to)."""
        total = _new_hist()
        lo = -math.inf if t_from is None else t_from / self.interval
        hi = math.inf if t_to is None else t_to / self.interval
        with self._lock:
            if lo == -math.inf and hi == math.inf:  # the whole run: the spill's sum is kept as it goes
                total.add(self._spilled_hist)
                for _, late in self._late.values():
                    total.add(late)
                for encoded in self.hists.values():
                    total.add(HdrHistogram.decode(encoded))
                return total
            lo_i = math.ceil(lo) if lo != -math.inf else lo  # idx >= lo and idx < hi, for integer idx
            hi_i = math.ceil(hi) if hi != math.inf else hi
            for _, _, _, kept in self._closed(lo_i, hi_i, hist=True):
                assert kept is not None
                total.add(HdrHistogram.decode(kept))
        return total

    def closed_until(self) -> float | None:
        """The end of the last closed interval (None before any closed): how far every source of the
        load has delivered."""
        with self._lock:
            return (self._max_closed + 1) * self.interval if self._max_closed is not None else None

    def ledger_workers(self) -> list[int]:
        with self._lock:
            return sorted(self.ledger)

    def ledger_column(self, worker: int) -> np.ndarray:
        """One worker's ledger as uint32 values (index i: sequence number i + 1): the ack time in ms
        since `base`, or LEDGER_FAIL / LEDGER_INFO / LEDGER_UNSET. Empty for a worker never seen."""
        with self._lock:
            col = self.ledger.get(worker)
            return col.values() if col is not None else np.zeros(0, dtype=np.uint32)

    def ledger_acknowledged(self) -> dict[int, list[tuple[int, int]]]:
        """Per worker, the acknowledged sequence numbers as inclusive ranges."""
        return {worker: runs(self.ledger_column(worker) < LEDGER_UNSET) for worker in self.ledger_workers()}

    def ledger_outcome(self, worker: int, seq: int) -> tuple[str, float | None]:
        """(ok|fail|info|unknown, ack time on the control clock or None)."""
        with self._lock:
            col = self.ledger.get(worker)
            if col is None or seq < 1 or seq > len(col):
                return "unknown", None
            v = col.get(seq - 1)
        if v == LEDGER_FAIL:
            return FAIL, None
        if v == LEDGER_INFO:
            return INFO, None
        if v == LEDGER_UNSET:
            return "unknown", None
        return OK, self.base + v / 1000

    def ledger_keys(self, outcome: str) -> Iterable[tuple[int, int]]:
        target = {FAIL: LEDGER_FAIL, INFO: LEDGER_INFO}.get(outcome)
        for worker in self.ledger_workers():
            values = self.ledger_column(worker)  # the column as it is now; the scan runs on the copy
            hits = values < LEDGER_UNSET if target is None else values == target
            for i in np.flatnonzero(hits):
                yield worker, int(i) + 1

    def to_frame(self) -> pd.DataFrame:
        """One row per closed interval (gaps filled with zero rows): rates per second, latencies in ms."""
        import pandas as pd

        with self._lock:
            closed = [(idx, counts, pct) for idx, counts, pct, _ in self._closed()]
        if not closed:
            return pd.DataFrame(columns=["t", *COLUMNS, "tps", "p50_ms", "p99_ms", "p999_ms", "max_ms"])
        records = []
        empty = [0] * len(COLUMNS)
        nan4 = (math.nan, math.nan, math.nan, math.nan)
        previous = closed[0][0] - 1
        for idx, counts, pct in closed:
            for gap in range(previous + 1, idx):
                records.append([gap * self.interval, *empty, *nan4])
            records.append([idx * self.interval, *counts, *pct])
            previous = idx
        df = pd.DataFrame.from_records(records, columns=["t", *COLUMNS, "p50_ms", "p99_ms", "p999_ms", "max_ms"])
        df.insert(len(COLUMNS) + 1, "tps", df["ok"] / self.interval)
        return df

    def write_timeline_csv(self, path: str, t0: float | None = None,
                           extra: dict[str, list[Any]] | None = None) -> None:
        """timeline.csv; `extra` adds columns (one value per interval row), e.g. per-node role and lag."""
        df = self.to_frame()
        for name, values in (extra or {}).items():
            if len(values) == len(df):
                df[name] = values
        origin = t0 if t0 is not None else (df["t"].iloc[0] if len(df) else 0.0)
        df.insert(1, "t_rel_s", (df["t"] - origin).round(3))
        errs = [c for c in df.columns if c.startswith("err_")]
        df["errors_per_s"] = df[errs].sum(axis=1) / self.interval if errs else 0
        df.to_csv(path, index=False, float_format="%.3f")


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The runs of True in `mask` as inclusive 1-based ranges (position i is number i + 1)."""
    if not len(mask):
        return []
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1) + 1
    ends = np.flatnonzero(edges == -1)
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def step_values(samples: list[tuple[float, Any]], ends: list[float]) -> list[Any]:
    """A series sampled at its own instants (time-ordered) read at each interval's end: the last
    value at or before it (None before the first); how timeline.csv carries roles, lag and host
    metrics beside the load's intervals."""
    out, i, current = [], 0, None
    for end in ends:
        while i < len(samples) and samples[i][0] <= end:
            current = samples[i][1]
            i += 1
        out.append(current)
    return out


def error_rate(counts: dict[str, Any]) -> float:
    """(fail + info) / all ops, rounded to 6 places, 0 with no ops: the one formula of the drill's
    abort rule, the error-rate SLO and an experiment cell's error rate (a recorder's `window` or
    `totals`)."""
    ops = counts["ok"] + counts["fail"] + counts["info"]
    return round((counts["fail"] + counts["info"]) / ops, 6) if ops else 0.0
