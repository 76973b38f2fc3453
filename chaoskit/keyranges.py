"""A set of ledger keys (worker, sequence number) held as each worker's runs of consecutive numbers.

The rows a run's ledger holds after recovery are read this way (`(worker, first, last)` per run of
consecutive sequence numbers, counted by the database), so a day's 400 million writes come back as
a few ranges per worker instead of a set of 400 million pairs. It answers what the RPO check and
the history's `found` ask: membership, size, one worker's keys as a mask.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import numpy as np


class KeyRanges:
    """Per worker, sorted disjoint inclusive ranges of sequence numbers."""

    def __init__(self, ranges: dict[int, list[tuple[int, int]]] | None = None) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for worker, spans in (ranges or {}).items():
            for lo, hi in spans:
                self._add(worker, lo, hi)
        self._normalise()

    @classmethod
    def of(cls, keys: Iterable[tuple[int, int]] | KeyRanges) -> KeyRanges:
        """From a set of (worker, seq) keys (or an existing KeyRanges, returned as it is)."""
        if isinstance(keys, KeyRanges):
            return keys
        out = cls()
        for worker, seq in keys:
            out._add(int(worker), int(seq), int(seq))
        out._normalise()
        return out

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, int, int]]) -> KeyRanges:
        """From (worker, first, last) rows, in any order, overlapping or not."""
        out = cls()
        for worker, lo, hi in runs:
            out._add(int(worker), int(lo), int(hi))
        out._normalise()
        return out

    def _add(self, worker: int, lo: int, hi: int) -> None:
        self._ranges.setdefault(worker, []).append((lo, hi))

    def _normalise(self) -> None:
        for worker, spans in self._ranges.items():
            spans.sort()
            merged: list[tuple[int, int]] = []
            for lo, hi in spans:
                if merged and lo <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
                else:
                    merged.append((lo, hi))
            self._ranges[worker] = merged
        self._starts = {w: [lo for lo, _ in spans] for w, spans in self._ranges.items()}

    def workers(self) -> list[int]:
        return sorted(self._ranges)

    def ranges(self, worker: int) -> list[tuple[int, int]]:
        return list(self._ranges.get(worker, ()))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        worker, seq = key
        starts = self._starts.get(worker)
        if not starts:
            return False
        i = bisect.bisect_right(starts, seq) - 1
        return i >= 0 and seq <= self._ranges[worker][i][1]

    def __len__(self) -> int:
        return sum(hi - lo + 1 for spans in self._ranges.values() for lo, hi in spans)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for worker in self.workers():
            for lo, hi in self._ranges[worker]:
                for seq in range(lo, hi + 1):
                    yield worker, seq

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyRanges):
            return self._ranges == other._ranges
        if isinstance(other, set | frozenset):
            return self == KeyRanges.of(other)
        return NotImplemented

    def restricted(self, workers: set[int]) -> KeyRanges:
        return KeyRanges({w: s for w, s in self._ranges.items() if w in workers})

    def mask(self, worker: int, size: int) -> np.ndarray:
        """Position i is True when (worker, i + 1) is held, for i < size."""
        out = np.zeros(size, dtype=bool)
        for lo, hi in self._ranges.get(worker, ()):
            if lo > size:
                break
            out[max(lo, 1) - 1:min(hi, size)] = True
        return out

    def outside(self, worker: int, size: int) -> list[tuple[int, int]]:
        """The held ranges of `worker` outside sequence numbers 1 .. size (keys no write of the
        history had)."""
        out = []
        for lo, hi in self._ranges.get(worker, ()):
            if lo < 1:
                out.append((lo, min(hi, 0)))
            if hi > size:
                out.append((max(lo, size + 1), hi))
        return out

    def within(self, worker: int, lo: int, hi: int) -> list[tuple[int, int]]:
        """The held parts of `worker`'s lo .. hi."""
        out = []
        for a, b in self._ranges.get(worker, ()):
            if b < lo:
                continue
            if a > hi:
                break
            out.append((max(a, lo), min(b, hi)))
        return out

    def without(self, worker: int, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """`spans` less what is held for `worker`."""
        out = []
        for lo, hi in spans:
            at = lo
            for a, b in self.within(worker, lo, hi):
                if a > at:
                    out.append((at, a - 1))
                at = b + 1
            if at <= hi:
                out.append((at, hi))
        return out

    def __repr__(self) -> str:
        return f"KeyRanges({self._ranges!r})"
