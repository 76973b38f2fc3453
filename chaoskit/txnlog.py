"""Every transaction of a workload that records its micro-operations (list-append, stale-reads),
kept whole for the run: their checkers need all of them, not the windows around faults the op history
keeps. In memory, or with a spill directory as JSON lines in `txns.jsonl` there (about 100 bytes
a transaction), read back in the order they arrived.

A transaction is `(worker, t_invoke, t_done, outcome, ops)`, `ops` a tuple of `("append", key,
value)` and `("r", key, values or None)` (list-append), or `("set", register, value)` and
`("get", register, value)` (stale-reads); `t_invoke`/`t_done` on the control clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

TxnRecord = tuple[int, float, float, str, tuple[tuple[Any, ...], ...]]
FILE = "txns.jsonl"


def _ops(raw: list[list[Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple((f, k, tuple(v) if isinstance(v, list) else v) for f, k, v in raw)


class TxnLog:
    def __init__(self, spill_dir: Path | None = None) -> None:
        self.path = spill_dir / FILE if spill_dir is not None else None
        self._mem: list[TxnRecord] = []
        self._out: TextIO | None = None
        self.count = 0

    def add(self, txns: Iterable[TxnRecord]) -> None:
        txns = list(txns)
        if not txns:
            return
        self.count += len(txns)
        if self.path is None:
            self._mem.extend(txns)
            return
        if self._out is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = self.path.open("a", encoding="utf-8")
        self._out.write("".join(json.dumps(t, separators=(",", ":")) + "\n" for t in txns))

    def __iter__(self) -> Iterator[TxnRecord]:
        if self.path is None:
            yield from self._mem
            return
        if self._out is not None:
            self._out.flush()
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                w, t0, t1, outcome, ops = json.loads(line)
                yield w, t0, t1, outcome, _ops(ops)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
