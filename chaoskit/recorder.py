"""The history of a run: every op's outcome and every event, on the control node's clock.

Memory stays bounded however long the run:
- per interval (100 ms by default): counts by outcome and error class, and an HdrHistogram of
  ok-latencies, encoded (~100 bytes) once the interval closes;
- exact outage edges: for each worker, every gap between oks (last ok before, first error,
  first ok after) with the error class that opened it;
- failed/indeterminate ops individually, up to a cap (then only counted);
- ledger writes: per worker a dense column indexed by sequence number holding the ack time in
  ms since the run's base (2 bytes per write, see LedgerColumn), or a marker for fail / info.

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

import math
import struct
import sys
import threading
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hdrh.histogram import HdrHistogram

from chaoskit.db.base import ErrorClass
from chaoskit.history import OpHistory

if TYPE_CHECKING:
    import pandas as pd

OK, FAIL, INFO = "ok", "fail", "info"
# How a workload's op key reads (`Workload.keyed`): each acknowledged op added one row numbered
# `key` for its worker (the ledger), or incremented the version of row `key` (the update workload)
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
HIST_MAX_US = 120_000_000
_ROW = struct.Struct(f"<{len(COLUMNS)}I4f")  # one closed interval: ~100 bytes


_HIST_DIGITS = 2
_HIST_SUB_BITS = math.ceil(math.log2(2 * 10**_HIST_DIGITS))  # 8: values below 256 µs are exact


def _new_hist() -> HdrHistogram:
    return HdrHistogram(1, HIST_MAX_US, _HIST_DIGITS)


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
    than ~65 s (a slow worker: few entries) is promoted to 4-byte absolute values.
    """

    BLOCK = 4096
    _H: ClassVar[dict[int, int]] = {LEDGER_FAIL: 0xFFFF, LEDGER_INFO: 0xFFFE, LEDGER_UNSET: 0xFFFD}
    _H_BACK: ClassVar[dict[int, int]] = {v: k for k, v in _H.items()}

    def __init__(self) -> None:
        self.blocks: list[array] = []
        self.bases: list[int | None] = []
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def set(self, i: int, value: int) -> None:
        b, o = divmod(i, self.BLOCK)
        while len(self.blocks) <= b:
            self.blocks.append(array("H", [0xFFFD]) * self.BLOCK)
            self.bases.append(None)
        block = self.blocks[b]
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
        block = self.blocks[b]
        x = block[o]
        return x if block.typecode == "I" else self._decode_h(x, self.bases[b])

    def values(self, start: int = 0) -> array:
        """Entries from `start` as absolute values (for shipping and scans)."""
        out = array("I")
        for i in range(start, self.length):
            out.append(self.get(i))
        return out


class Recorder:
    def __init__(self, base: float, interval: float = 0.1, max_errors: int = 200_000, keep_ops: bool = False,
                 stall_s: float | None = None) -> None:
        self.base = base  # wall-clock origin of ledger ack times
        self.interval = interval
        self.max_errors = max_errors
        self._open: dict[int, _Open] = {}
        self._rows: dict[int, bytes] = {}  # idx -> packed counts + p50, p99, p99.9, max (ms)
        self.hists: dict[int, bytes] = {}
        self.errors: list[tuple] = []  # (t, worker, kind, outcome, class, message)
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
        self.history = OpHistory()  # the ops around each fault (history.jsonl)
        # update workload: per row, how many increments were acknowledged / indeterminate
        self.row_updates: dict[int, list[int]] = {}
        self._gaps_shipped = 0
        self._lock = threading.Lock()  # see the module's docstring: every public method holds it
        self._finished = False
        self.late_batches = 0  # batches merged after finish(): left out (the load runner says why)

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
               node: str | None = None, keyed: str | None = None) -> None:
        """One op: `kind` is write|read; the op is booked in the interval where it completed.
        `key` is what it wrote, read as its workload declares (`keyed`): SEQUENCE, the number of
        the one row it added for this worker (lost writes are counted per key); VERSION, the id of
        the row whose version it incremented (lost updates are counted per row)."""
        with self._lock:
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

    def _ledger_put(self, worker: int, seq: int, t: float, outcome: str) -> None:
        col = self.ledger.get(worker)
        if col is None:
            col = self.ledger[worker] = LedgerColumn()
        if outcome == OK:
            value = max(0, min(LEDGER_UNSET - 1, int((t - self.base) * 1000)))
        else:
            value = LEDGER_FAIL if outcome == FAIL else LEDGER_INFO
        col.set(seq - 1, value)

    # -- closing intervals and moving batches ----------------------------------------------
    def close_before(self, idx: int) -> None:
        with self._lock:
            self._close_before(idx)

    def _close_before(self, idx: int) -> None:
        for i in sorted(k for k in self._open if k < idx):
            slot = self._open.pop(i)
            self._store(i, slot.counts, slot.hist())

    def keep_around(self, t: float) -> None:
        """Keep the op-level history within its window of `t` (a fault's effect, a switchover)."""
        with self._lock:
            self.history.keep_around(t)

    def _store(self, idx: int, counts: list[int], hist: HdrHistogram) -> None:
        if idx in self._rows:  # a late op for a closed interval: fold it in
            old_counts = self._row(idx)[0]
            counts = [a + b for a, b in zip(old_counts, counts, strict=True)]
            old = HdrHistogram.decode(self.hists[idx])
            old.add(hist)
            hist = old
        if hist.get_total_count():
            p50, p99, p999 = (hist.get_value_at_percentile(p) / 1000 for p in (50, 99, 99.9))
            mx = hist.get_max_value() / 1000
        else:
            p50 = p99 = p999 = mx = math.nan
        self._rows[idx] = _ROW.pack(*counts, p50, p99, p999, mx)
        self.hists[idx] = hist.encode()

    @property
    def rows(self) -> dict[int, bytes]:
        """The closed intervals (a copy)."""
        with self._lock:
            return dict(self._rows)

    def row(self, idx: int) -> tuple[list[int], float, float, float, float]:
        with self._lock:
            return self._row(idx)

    def _row(self, idx: int) -> tuple[list[int], float, float, float, float]:
        values = _ROW.unpack(self._rows[idx])
        n = len(COLUMNS)
        return list(values[:n]), values[n], values[n + 1], values[n + 2], values[n + 3]

    def drain(self, now: float, final: bool = False) -> Batch:
        """Everything new since the last drain; intervals ending before `now` - one interval."""
        with self._lock:
            watermark = self.index(now) - 1 if not final else 1 << 62
            batch = Batch(watermark=watermark)
            batch.ops, self.ops = self.ops, []
            batch.rows, self.row_updates = self.row_updates, {}
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
                return
            self._merge(batch)

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
        for row, (acked, info) in batch.rows.items():
            counts = self.row_updates.setdefault(row, [0, 0])
            counts[0] += acked
            counts[1] += info
        for worker, first_seq, raw in batch.ledger:
            incoming = array("I")
            incoming.frombytes(raw)
            col = self.ledger.setdefault(worker, LedgerColumn())
            for i, value in enumerate(incoming, start=first_seq - 1):
                col.set(i, value)

    def finish(self) -> None:
        """Close every interval and every open gap (an outage lasting to the end has no first ok);
        seal the recorder: a later `merge` is counted in `late_batches` and left out."""
        with self._lock:
            self._close_before(1 << 62)
            self.history.add(self.ops)
            self.ops = []
            self.history.flush()
            self.gaps.extend(self._open_gap.values())
            self._open_gap.clear()
            self.gaps.sort(key=lambda g: (g.first_err, g.worker))
            self.errors.sort(key=lambda e: e[0])
            self._finished = True

    @property
    def finished(self) -> bool:
        return self._finished

    # -- reading ---------------------------------------------------------------------------
    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(COLUMNS, 0)
        with self._lock:
            for idx in self._rows:
                for name, v in zip(COLUMNS, self._row(idx)[0], strict=True):
                    out[name] += v
            for slot in self._open.values():
                for name, v in zip(COLUMNS, slot.counts, strict=True):
                    out[name] += v
        return out

    def window(self, t_from: float, t_to: float) -> dict[str, Any]:
        """Totals, rate and ok-latency percentiles over the closed intervals in [t_from, t_to)."""
        lo, hi = self.index(t_from), self.index(t_to)
        totals = dict.fromkeys(COLUMNS, 0)
        hist = _new_hist()
        seen = 0
        with self._lock:
            for idx in range(lo, hi):
                if idx not in self._rows:
                    continue
                seen += 1
                for name, v in zip(COLUMNS, self._row(idx)[0], strict=True):
                    totals[name] += v
                hist.add(HdrHistogram.decode(self.hists[idx]))
        span = max(self.interval, (hi - lo) * self.interval)
        lat = {f"p{p}_ms": (hist.get_value_at_percentile(p) / 1000 if hist.get_total_count() else math.nan)
               for p in (50, 90, 99, 99.9)}
        lat["mean_ms"] = hist.get_mean_value() / 1000 if hist.get_total_count() else math.nan
        return {**totals, "tps": totals["ok"] / span, "intervals": seen, **lat}

    def latency_hist(self, t_from: float | None = None, t_to: float | None = None) -> HdrHistogram:
        """ok-latency histogram (µs) of the closed intervals within [t_from, t_to)."""
        total = _new_hist()
        lo = -math.inf if t_from is None else t_from / self.interval
        hi = math.inf if t_to is None else t_to / self.interval
        with self._lock:
            for idx, encoded in self.hists.items():
                if lo <= idx < hi:
                    total.add(HdrHistogram.decode(encoded))
        return total

    def closed_until(self) -> float | None:
        """The end of the last closed interval (None before any closed): how far every source of the
        load has delivered."""
        with self._lock:
            return (max(self._rows) + 1) * self.interval if self._rows else None

    def ledger_acknowledged(self) -> dict[int, list[tuple[int, int]]]:
        """Per worker, the acknowledged sequence numbers as inclusive ranges."""
        out: dict[int, list[tuple[int, int]]] = {}
        with self._lock:
            columns = [(worker, col.values()) for worker, col in self.ledger.items()]
        for worker, values in columns:
            ranges: list[tuple[int, int]] = []
            start = None
            for i, v in enumerate(values):
                acked = v < LEDGER_UNSET
                if acked and start is None:
                    start = i + 1
                elif not acked and start is not None:
                    ranges.append((start, i))
                    start = None
            if start is not None:
                ranges.append((start, len(values)))
            out[worker] = ranges
        return out

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
        with self._lock:  # the columns as they are now; the scan runs on the copy
            columns = [(worker, col.values()) for worker, col in self.ledger.items()]
        for worker, values in columns:
            for i, v in enumerate(values):
                if (target is None and v < LEDGER_UNSET) or v == target:
                    yield worker, i + 1

    def to_frame(self) -> pd.DataFrame:
        """One row per closed interval (gaps filled with zero rows): rates per second, latencies in ms."""
        import pandas as pd

        with self._lock:
            rows = dict(self._rows)
        if not rows:
            return pd.DataFrame(columns=["t", *COLUMNS, "tps", "p50_ms", "p99_ms", "p999_ms", "max_ms"])
        first, last = min(rows), max(rows)
        records = []
        empty = ([0] * len(COLUMNS), math.nan, math.nan, math.nan, math.nan)
        n = len(COLUMNS)
        for idx in range(first, last + 1):
            if idx in rows:
                values = _ROW.unpack(rows[idx])
                counts, p50, p99, p999, mx = list(values[:n]), *values[n:]
            else:
                counts, p50, p99, p999, mx = empty
            records.append([idx * self.interval, *counts, p50, p99, p999, mx])
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
