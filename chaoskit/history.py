"""The op-level history around each fault, kept in memory with a bound and written as
`history.jsonl.gz` in the run directory, so anyone can recompute RTO and RPO from it without
chaoskit (format: docs/history.md).

Workers record every op (invoke and completion time, outcome, ledger key, node when known); the
controller keeps the last `RECENT_S` seconds of them and, once a fault takes effect, everything in
[t_effect - WINDOW_S, t_effect + WINDOW_S]. Ops outside every window are dropped as they age, so
memory is bounded by the op rate x (RECENT_S + the windows), and by `MAX_KEPT` ops in all.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, TextIO

import numpy as np

from chaoskit.spill import SEGMENT_OPS, OpSpill

FORMAT = "chaoskit-history/1"
WINDOW_S = 30.0
RECENT_S = WINDOW_S + 5.0  # a window opens at t_effect - WINDOW_S: those ops must still be here
MAX_KEPT = 2_000_000


class Op(NamedTuple):
    t_invoke: float
    t_done: float
    worker: int
    kind: str  # write | read
    outcome: str  # ok | fail | info
    seq: int | None  # the ledger key (worker, seq) for ledger writes
    node: str | None  # the member the connection reached, where the driver can tell
    error: str | None  # the error class
    row: int | None = None  # update workload: the row incremented


_NONE = -(1 << 63)  # a column's None (no ledger key, no row)


class _Chunk:
    """One delivery of ops, in columns (~60 bytes an op instead of ~200 as tuples); `pos`: how
    many of them have left the recent horizon already."""

    __slots__ = ("codes", "pos", "row", "seq", "t_done", "t_invoke", "worker")

    def __init__(self, ops: list[tuple], code: Any) -> None:
        self.t_invoke = np.fromiter((o[0] for o in ops), dtype=np.float64, count=len(ops))
        self.t_done = np.fromiter((o[1] for o in ops), dtype=np.float64, count=len(ops))
        self.worker = np.fromiter((o[2] for o in ops), dtype=np.int64, count=len(ops))
        self.seq = np.fromiter((_NONE if o[5] is None else o[5] for o in ops), dtype=np.int64, count=len(ops))
        self.row = np.fromiter((_NONE if len(o) < 9 or o[8] is None else o[8] for o in ops), dtype=np.int64,
                               count=len(ops))
        self.codes = np.array([(code(o[3]), code(o[4]), code(o[6]), code(o[7])) for o in ops],
                              dtype=np.int32).reshape(len(ops), 4)
        self.pos = 0


class OpHistory:
    def __init__(self, window_s: float = WINDOW_S, recent_s: float = RECENT_S, max_kept: int = MAX_KEPT,
                 spill: OpSpill | None = None) -> None:
        """`spill`: where kept ops move, a segment of SEGMENT_OPS at a time (memory then holds at
        most one segment's worth; `kept_ops()` reads them back in order)."""
        self.window_s = window_s
        self.recent_s = recent_s
        self.max_kept = max_kept
        self.windows: list[tuple[float, float]] = []
        self._recent: deque[_Chunk] = deque()
        self._strings: list[str | None] = []  # the chunks' string columns, numbered
        self._numbers: dict[str | None, int] = {}
        self.kept: list[Op] = []  # the kept ops not spilled (all of them without a spill)
        self.spill = spill
        self.dropped = 0  # ops inside a window that did not fit under max_kept
        self._latest = 0.0

    def keep_around(self, t: float) -> None:
        """Keep every op within window_s of `t` (a fault's effect)."""
        self.windows.append((t - self.window_s, t + self.window_s))

    def _keep(self, op: Op) -> None:
        if self.count() < self.max_kept:
            self.kept.append(op)
            if self.spill is not None and len(self.kept) >= SEGMENT_OPS:
                self.spill.write(self.kept)
                self.kept = []
        else:
            self.dropped += 1

    def count(self) -> int:
        """How many ops are kept (spilled or not)."""
        return len(self.kept) + (self.spill.count if self.spill is not None else 0)

    def kept_ops(self) -> Iterator[Op]:
        """Every kept op in order of completion (then worker); after `flush`."""
        if self.spill is None:
            yield from self.kept
            return
        for op in self.spill.merged(self.kept):
            yield Op(*op)

    def _code(self, text: str | None) -> int:
        n = self._numbers.get(text)
        if n is None:
            n = self._numbers[text] = len(self._strings)
            self._strings.append(text)
        return n

    def add(self, ops: Iterable[Op | tuple]) -> None:
        """Ops as they arrive; those older than `recent_s` before the latest leave, in arrival
        order up to the first that is still recent, each kept if a window holds it."""
        ops = list(ops)
        if ops:
            chunk = _Chunk(ops, self._code)
            self._recent.append(chunk)
            self._latest = max(self._latest, float(chunk.t_done.max()))
        self._age(self._latest - self.recent_s)

    def _age(self, horizon: float | None) -> None:
        while self._recent:
            chunk = self._recent[0]
            n = len(chunk.t_done)
            end = n
            if horizon is not None:
                still = np.flatnonzero(chunk.t_done[chunk.pos:] >= horizon)
                end = chunk.pos + int(still[0]) if len(still) else n
            if end > chunk.pos:
                self._judge(chunk, chunk.pos, end)
                chunk.pos = end
            if end < n:
                return
            self._recent.popleft()

    def _judge(self, chunk: _Chunk, a: int, b: int) -> None:
        """Keep the ops a .. b - 1 of `chunk` that a window holds, in their order."""
        if not self.windows:
            return
        done, invoked = chunk.t_done[a:b], chunk.t_invoke[a:b]
        held = np.zeros(b - a, dtype=bool)
        for lo, hi in self.windows:
            held |= (lo <= done) & (invoked <= hi)
        strings = self._strings
        for i in np.flatnonzero(held) + a:
            kind, outcome, node, error = (strings[c] for c in chunk.codes[i])
            seq, row = int(chunk.seq[i]), int(chunk.row[i])
            self._keep(Op(float(chunk.t_invoke[i]), float(chunk.t_done[i]), int(chunk.worker[i]), str(kind),
                          str(outcome), None if seq == _NONE else seq, node, error, None if row == _NONE else row))

    def flush(self) -> None:
        """End of the run: what is still recent is kept if a window holds it."""
        self._age(None)
        self.kept.sort(key=lambda o: (o.t_done, o.worker))

    def write(self, out: TextIO, *, run_id: str, groups: dict[str, list[int]], faults: list[dict[str, Any]],
              present: set[tuple[int, int]] | None, stall_s: float | None = None) -> int:
        """history.jsonl(.gz): a header line, then one line per op in time of completion. A ledger
        write carries `found` (its row is on the writer after the run) when that was read."""
        header = {"format": FORMAT, "run_id": run_id, "window_s": self.window_s, "stall_s": stall_s,
                  "windows": [[lo, hi] for lo, hi in self.windows], "groups": groups,
                  "faults": [{"id": f.get("id"), "t_fault": f.get("t_fault"), "t_open": f.get("t_open"),
                              "window_end": f.get("window_end"), "host": f.get("target_host")} for f in faults],
                  "ops": self.count(), "dropped": self.dropped}
        out.write(json.dumps(header) + "\n")
        group_of = {w: g for g, ws in groups.items() for w in ws}
        for op in self.kept_ops():
            line: dict[str, Any] = {"t_invoke": round(op.t_invoke, 6), "t_done": round(op.t_done, 6),
                                    "worker": op.worker, "group": group_of.get(op.worker), "kind": op.kind,
                                    "outcome": op.outcome}
            if op.seq is not None:
                line["seq"] = op.seq
                if present is not None:
                    line["found"] = (op.worker, op.seq) in present
            if op.node is not None:
                line["node"] = op.node
            if op.error is not None:
                line["error"] = op.error
            if op.row is not None:
                line["row"] = op.row
            out.write(json.dumps(line) + "\n")
        return self.count()
