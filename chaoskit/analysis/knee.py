"""Where a load ramp stops paying: peak, saturation (TPS flattens while latency grows), overload.

Pure function of the measured steps so it can be tested on constructed curves.
"""

from __future__ import annotations

import math
from typing import Any


def _latency(step: dict[str, Any]) -> float | None:
    """A step's latency signal: its p99, or, where only a rate-reporting tool measured it (sysbench),
    the median of that tool's per-second p99."""
    own = step.get("p99_ms")
    return own if own is not None else step.get("tool_p99_ms_median_of_seconds")


def find_knee(steps: list[dict[str, Any]], flat_gain: float = 0.10, drop: float = 0.05) -> dict[str, Any]:
    """steps: [{workers, tps, p99_ms}] in increasing workers order.

    - peak: the step with the highest TPS;
    - saturation: the first step after which adding workers raises TPS by less than `flat_gain`
      per doubling of concurrency (so a 1, 4, 16, 64 ladder is judged like 1, 2, 4, 8) while p99
      grows: the recommended concurrency;
    - overload: the first step after the peak whose TPS is more than `drop` below the peak.
    """
    if not steps:
        return {"peak": None, "saturation": None, "overload": None, "recommended_workers": None, "shape": "empty"}
    peak_i = max(range(len(steps)), key=lambda i: steps[i]["tps"])
    saturation_i = None
    for i in range(len(steps) - 1):
        a, b = steps[i], steps[i + 1]
        doublings = max(1.0, math.log2(b["workers"] / a["workers"])) if a["workers"] else 1.0
        gain = (b["tps"] / a["tps"]) ** (1 / doublings) - 1 if a["tps"] else 0.0
        latency_grows = (_latency(b) or 0) >= (_latency(a) or 0)
        if gain < flat_gain and latency_grows:
            saturation_i = i
            break
    overload_i = next((i for i in range(peak_i + 1, len(steps))
                       if steps[i]["tps"] < steps[peak_i]["tps"] * (1 - drop)), None)
    if saturation_i is None:
        shape = "monotone: no knee within the ramp (extend it)"
    elif overload_i is not None:
        shape = "peaked: overload past the peak"
    else:
        shape = "saturating: throughput flattens"
    recommended = steps[saturation_i]["workers"] if saturation_i is not None else None
    return {"peak": steps[peak_i], "saturation": steps[saturation_i] if saturation_i is not None else None,
            "overload": steps[overload_i] if overload_i is not None else None,
            "recommended_workers": recommended, "shape": shape}
