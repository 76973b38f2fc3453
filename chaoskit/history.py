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
from collections.abc import Iterable
from typing import Any, NamedTuple, TextIO

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


class OpHistory:
    def __init__(self, window_s: float = WINDOW_S, recent_s: float = RECENT_S, max_kept: int = MAX_KEPT) -> None:
        self.window_s = window_s
        self.recent_s = recent_s
        self.max_kept = max_kept
        self.windows: list[tuple[float, float]] = []
        self._recent: deque[Op] = deque()
        self.kept: list[Op] = []
        self.dropped = 0  # ops inside a window that did not fit under max_kept
        self._latest = 0.0

    def keep_around(self, t: float) -> None:
        """Keep every op within window_s of `t` (a fault's effect)."""
        self.windows.append((t - self.window_s, t + self.window_s))

    def _in_window(self, op: Op) -> bool:
        return any(lo <= op.t_done and op.t_invoke <= hi for lo, hi in self.windows)

    def _keep(self, op: Op) -> None:
        if len(self.kept) < self.max_kept:
            self.kept.append(op)
        else:
            self.dropped += 1

    def add(self, ops: Iterable[Op | tuple]) -> None:
        for op in ops:
            op = Op(*op)
            self._recent.append(op)
            if op.t_done > self._latest:
                self._latest = op.t_done
        horizon = self._latest - self.recent_s
        while self._recent and self._recent[0].t_done < horizon:
            op = self._recent.popleft()
            if self._in_window(op):
                self._keep(op)

    def flush(self) -> None:
        """End of the run: what is still recent is kept if a window holds it."""
        while self._recent:
            op = self._recent.popleft()
            if self._in_window(op):
                self._keep(op)
        self.kept.sort(key=lambda o: (o.t_done, o.worker))

    def write(self, out: TextIO, *, run_id: str, groups: dict[str, list[int]], faults: list[dict[str, Any]],
              present: set[tuple[int, int]] | None, stall_s: float | None = None) -> int:
        """history.jsonl(.gz): a header line, then one line per op in time of completion. A ledger
        write carries `found` (its row is on the writer after the run) when that was read."""
        header = {"format": FORMAT, "run_id": run_id, "window_s": self.window_s, "stall_s": stall_s,
                  "windows": [[lo, hi] for lo, hi in self.windows], "groups": groups,
                  "faults": [{"id": f.get("id"), "t_fault": f.get("t_fault"), "t_open": f.get("t_open"),
                              "window_end": f.get("window_end"), "host": f.get("target_host")} for f in faults],
                  "ops": len(self.kept), "dropped": self.dropped}
        out.write(json.dumps(header) + "\n")
        group_of = {w: g for g, ws in groups.items() for w in ws}
        for op in self.kept:
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
        return len(self.kept)
