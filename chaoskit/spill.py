"""Where a long run's records go once they are settled, so the controller's memory stays flat.

A recorder given a spill directory (the run directory's `recorder/`) moves there, as the run goes:
- **closed intervals** older than a few minutes: Parquet segments `intervals-NNNNNN.parquet`, one
  row per 100 ms interval (its index, every count by name, the latency percentiles and the encoded
  HdrHistogram), each segment a complete file the moment it is written, so figures can be read
  from it while the run goes on;
- **ledger columns**: per worker, a file `ledger/<worker>.u32` of little-endian uint32, entry i
  being sequence number i+1 (its acknowledgement time in ms since the run's base, or a marker for
  fail / indeterminate / unset), appended one 4096-entry block at a time once the worker is two
  blocks past it. A dense column indexed by sequence number is read by position (one write's
  outcome) and per worker from end to end (the RPO check); a flat file does both by seek, Parquet
  would have to be decoded whole for the first and cannot be read before its footer is written;
- **the op history around the faults**: Parquet segments `history-NNNNNN.parquet` of the ops it
  keeps, each segment sorted, merged in order when history.jsonl.gz is written.

Nothing here interprets a figure: each class stores and gives back exactly what it was handed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# The spill's Arrow buffers live for one segment write or read: the system allocator gives them
# back, where Arrow's default (mimalloc) kept ~15 MB more resident in benchmarks/recorder_memory.py.
pa.set_memory_pool(pa.system_memory_pool())

SEGMENT_INTERVALS = 3000  # 5 minutes of 100 ms intervals per segment
SEGMENT_OPS = 20_000


class IntervalSpill:
    """Closed intervals, as (index, counts, p50, p99, p99.9, max, encoded histogram)."""

    def __init__(self, directory: Path, columns: Sequence[str]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.columns = list(columns)
        self.segments: list[tuple[int, int, Path]] = []  # (first index, last index, file)
        fields = [pa.field("idx", pa.int64())] + [pa.field(c, pa.uint32()) for c in self.columns]
        fields += [pa.field(n, pa.float32()) for n in ("p50_ms", "p99_ms", "p999_ms", "max_ms")]
        self.schema = pa.schema([*fields, pa.field("hist", pa.binary())])

    def write(self, rows: Sequence[tuple[int, Sequence[int], Sequence[float], bytes]]) -> None:
        """One segment of intervals in index order: (idx, counts, (p50, p99, p999, max), hist)."""
        if not rows:
            return
        data: dict[str, list[Any]] = {"idx": [r[0] for r in rows]}
        for j, name in enumerate(self.columns):
            data[name] = [r[1][j] for r in rows]
        for j, name in enumerate(("p50_ms", "p99_ms", "p999_ms", "max_ms")):
            data[name] = [r[2][j] for r in rows]
        data["hist"] = [r[3] for r in rows]
        path = self.dir / f"intervals-{len(self.segments) + 1:06d}.parquet"
        pq.write_table(pa.table(data, schema=self.schema), path)
        path.chmod(0o600)  # as every file of a run directory
        self.segments.append((rows[0][0], rows[-1][0], path))

    def read(self, lo: float = float("-inf"), hi: float = float("inf"), hist: bool = True
             ) -> Iterator[tuple[int, list[int], tuple[float, ...], bytes | None]]:
        """The spilled intervals with lo <= index < hi, in index order."""
        names = ["idx", *self.columns, "p50_ms", "p99_ms", "p999_ms", "max_ms"] + (["hist"] if hist else [])
        for first, last, path in self.segments:
            if last < lo or first >= hi:
                continue
            table = pq.read_table(path, columns=names).to_pydict()
            n = len(table["idx"])
            for k in range(n):
                idx = table["idx"][k]
                if lo <= idx < hi:
                    counts = [table[c][k] for c in self.columns]
                    pct = tuple(table[c][k] for c in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
                    yield idx, counts, pct, table["hist"][k] if hist else None


class LedgerFile:
    """One worker's spilled ledger blocks: entries 0 .. `length` - 1 as uint32, in a flat file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path.write_bytes(b"")
        self.path.chmod(0o600)
        self.length = 0

    def append(self, values: np.ndarray) -> None:
        with self.path.open("ab") as fh:
            fh.write(values.astype("<u4").tobytes())
        self.length += len(values)

    def put(self, i: int, value: int) -> None:
        """An entry for a position already spilled (kept exact, though a run never does this)."""
        with self.path.open("r+b") as fh:
            fh.seek(4 * i)
            fh.write(np.array([value], dtype="<u4").tobytes())

    def get(self, i: int) -> int:
        with self.path.open("rb") as fh:
            fh.seek(4 * i)
            return int(np.frombuffer(fh.read(4), dtype="<u4")[0])

    def values(self, start: int, end: int) -> np.ndarray:
        """Entries start .. end - 1."""
        end = min(end, self.length)
        if start >= end:
            return np.zeros(0, dtype=np.uint32)
        return np.fromfile(self.path, dtype="<u4", count=end - start, offset=4 * start).astype(np.uint32)


class OpSpill:
    """The ops a history keeps, in sorted segments; read back as one sorted stream."""

    FIELDS = ("t_invoke", "t_done", "worker", "kind", "outcome", "seq", "node", "error", "row")

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.segments: list[Path] = []
        self.count = 0
        self.schema = pa.schema([pa.field("t_invoke", pa.float64()), pa.field("t_done", pa.float64()),
                                 pa.field("worker", pa.int64()), pa.field("kind", pa.string()),
                                 pa.field("outcome", pa.string()), pa.field("seq", pa.int64()),
                                 pa.field("node", pa.string()), pa.field("error", pa.string()),
                                 pa.field("row", pa.int64())])

    def write(self, ops: Sequence[tuple]) -> None:
        """One segment, sorted by (t_done, worker) here."""
        if not ops:
            return
        ops = sorted(ops, key=lambda o: (o[1], o[2]))
        data = {name: [o[j] for o in ops] for j, name in enumerate(self.FIELDS)}
        path = self.dir / f"history-{len(self.segments) + 1:06d}.parquet"
        pq.write_table(pa.table(data, schema=self.schema), path)
        path.chmod(0o600)
        self.segments.append(path)
        self.count += len(ops)

    def _segment(self, path: Path) -> Iterator[tuple]:
        table = pq.read_table(path).to_pydict()
        yield from zip(*(table[name] for name in self.FIELDS), strict=True)

    def merged(self, also: Iterable[tuple] = ()) -> Iterator[tuple]:
        """Every spilled op and `also` (sorted by (t_done, worker)), as one sorted stream."""
        streams = [self._segment(p) for p in self.segments] + [iter(also)]
        return heapq.merge(*streams, key=lambda o: (o[1], o[2]))

