"""Knee detection on constructed curves: flat, monotone, peaked, noisy."""

from __future__ import annotations

from chaoskit.analysis.knee import find_knee


def curve(tps: list[float], p99: list[float] | None = None) -> list[dict]:
    workers = [8, 16, 32, 64, 128, 256][: len(tps)]
    p99 = p99 or [5.0 * (i + 1) for i in range(len(tps))]
    return [{"workers": w, "tps": t, "p99_ms": p} for w, t, p in zip(workers, tps, p99, strict=True)]


def test_flat_saturates_at_first_step() -> None:
    k = find_knee(curve([1000, 1010, 1005, 1012, 1008]))
    assert k["recommended_workers"] == 8 and k["overload"] is None and k["shape"].startswith("saturating")


def test_monotone_has_no_knee() -> None:
    k = find_knee(curve([100, 200, 400, 800, 1600]))
    assert k["recommended_workers"] is None and k["peak"]["workers"] == 128 and k["shape"].startswith("monotone")


def test_peaked_has_saturation_peak_and_overload() -> None:
    k = find_knee(curve([1000, 1900, 2500, 2600, 2000, 1500]))
    assert k["saturation"]["workers"] == 32 and k["peak"]["workers"] == 64 and k["overload"]["workers"] == 128
    assert k["recommended_workers"] == 32 and k["shape"].startswith("peaked")


def test_noisy_plateau_is_not_an_overload() -> None:
    k = find_knee(curve([1000, 1800, 2400, 2450, 2380, 2420]))
    assert k["recommended_workers"] == 32
    assert k["overload"] is None  # 2380 is within 5% of the 2450 peak


def test_flat_gain_needs_growing_latency() -> None:
    k = find_knee(curve([1000, 1050, 2000], p99=[10, 8, 12]))  # latency fell: not saturated yet
    assert k["saturation"] is None or k["saturation"]["workers"] != 8


def test_a_sparse_ladder_is_judged_per_doubling() -> None:
    # measured on the lab (1, 4, 16, 64 workers): +13 % from 16 to 64 is two doublings of +6.5 %
    steps = [{"workers": 1, "tps": 1484, "p99_ms": 1.4}, {"workers": 4, "tps": 3639, "p99_ms": 2.6},
             {"workers": 16, "tps": 6663, "p99_ms": 5.7}, {"workers": 64, "tps": 7558, "p99_ms": 24.6}]
    knee = find_knee(steps)
    assert knee["recommended_workers"] == 16 and knee["shape"].startswith("saturating")
    # the same +13 % over a single doubling is still growth worth having
    dense = [dict(s, workers=w) for s, w in zip(steps, (1, 2, 4, 8), strict=True)]
    assert find_knee(dense)["recommended_workers"] is None


def test_edges_of_the_knee() -> None:
    assert find_knee([]) == {"peak": None, "saturation": None, "overload": None, "recommended_workers": None,
                             "shape": "empty"}
    # a step at 0 TPS (nothing worked at the start) counts as no gain, and a step at 0 workers as one doubling
    steps = [{"workers": 0, "tps": 0.0, "p99_ms": 1.0}, {"workers": 1, "tps": 500.0, "p99_ms": 2.0}]
    assert find_knee(steps)["recommended_workers"] == 0
    # gain exactly at the bound is not flat: 1 -> 2 workers, +12.5 % (exact in binary), latency grows
    steps = [{"workers": 1, "tps": 1000.0, "p99_ms": 1.0}, {"workers": 2, "tps": 1125.0, "p99_ms": 2.0},
             {"workers": 4, "tps": 1150.0, "p99_ms": 4.0}]
    assert find_knee(steps, flat_gain=0.125)["recommended_workers"] == 2  # 1125 -> 1150 is +2.2 %
    # equal p99 counts as growing; a missing p99 reads as 0
    steps = [{"workers": 1, "tps": 1000.0, "p99_ms": 3.0}, {"workers": 2, "tps": 1010.0, "p99_ms": 3.0}]
    assert find_knee(steps)["recommended_workers"] == 1
    steps = [{"workers": 1, "tps": 1000.0, "p99_ms": 3.0}, {"workers": 2, "tps": 1010.0, "p99_ms": None}]
    assert find_knee(steps)["recommended_workers"] is None
    steps = [{"workers": 1, "tps": 1000.0, "p99_ms": None}, {"workers": 2, "tps": 1010.0, "p99_ms": 0.5}]
    assert find_knee(steps)["recommended_workers"] == 1
    # overload is strictly more than `drop` below the peak: exactly 5 % below is not
    steps = [{"workers": 1, "tps": 1000.0, "p99_ms": 1.0}, {"workers": 2, "tps": 950.0, "p99_ms": 2.0}]
    assert find_knee(steps)["overload"] is None
