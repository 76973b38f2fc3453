"""Figures of a sample, defined once for every figure that uses them."""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(values: Sequence[float], p: float) -> float:
    """The p-th percentile of sorted values by nearest rank (rank ceil(p/100 x n), 1-based), to 6 decimals."""
    return round(values[min(len(values) - 1, max(0, math.ceil(p / 100 * len(values)) - 1))], 6)
