"""An experiment's headline comparisons in words and percent, as the engineers who ran these by hand
wrote them ("sync commit with 5 ms replica delay: -88 % TPS at 4 workers, -78 % at 16"; "the gap
grows from 35 % at 1 ms to 52 % at 5 ms"). Derived from the cells (medians over repeats) only, so
every sentence can be checked against the results table beside it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def change(new: float, old: float) -> str:
    """Relative change in whole percent with its sign ("-88 %", "+7 %"); "n/a" without a base."""
    if not old:
        return "n/a"
    value = round((new / old - 1) * 100)
    return f"{value:+d} %" if value else "0 %"


def _ms(v: Any) -> str:
    return "?" if v is None else f"{v:.2f} ms"


def _at_workers(parts: list[tuple[int, str]]) -> str:
    """"-88 % at 4 workers, -78 % at 16" """
    return ", ".join(f"{text} at {w} workers" if i == 0 else f"{text} at {w}" for i, (w, text) in enumerate(parts))


def _mode(value: Any) -> str:
    return "sync" if value is True else "async" if value is False else ""


def _series_label(mode: Any, workload: Any, modes: set, workloads: set) -> str:
    bits = []
    if len(modes) > 1:
        bits.append(f"{_mode(mode)} commit")
    if len(workloads) > 1:
        bits.append(f"workload {workload}")
    return ", ".join(bits)


def _delay_effects(cells: list[dict[str, Any]]) -> Iterable[str]:
    """Each added delay against the smallest delay of the same series, per concurrency."""
    modes = {c.get("synchronous_mode") for c in cells}
    workloads = {c.get("workload") for c in cells}
    delays = sorted({c.get("delay_ms", 0) for c in cells})
    if len(delays) < 2:
        return
    base_delay = delays[0]
    for mode in sorted(modes, key=str):
        for workload in sorted(workloads, key=str):
            series = {(c["delay_ms"], c["workers"]): c for c in cells
                      if c.get("synchronous_mode") == mode and c.get("workload") == workload}
            label = _series_label(mode, workload, modes, workloads)
            for d in delays[1:]:
                parts = [(w, change(series[(d, w)]["tps"], series[(base_delay, w)]["tps"]))
                         for w in sorted({w for (dd, w) in series if dd == d})
                         if (base_delay, w) in series]
                if not parts:
                    continue
                w0 = parts[0][0]
                lat = (f"; p50 {_ms(series[(base_delay, w0)].get('p50_ms'))} -> {_ms(series[(d, w0)].get('p50_ms'))} "
                       f"at {w0} workers")
                base = f"{base_delay:g} ms" if base_delay else "no delay"
                yield (f"{label + ': ' if label else ''}{d:g} ms delay vs {base}: TPS {_at_workers(parts)}{lat}")


def _sync_vs_async(cells: list[dict[str, Any]]) -> Iterable[str]:
    """Synchronous against asynchronous commit at each delay, and how the gap moves with the delay."""
    if {c.get("synchronous_mode") for c in cells} != {True, False}:
        return
    workloads = sorted({c.get("workload") for c in cells}, key=str)
    for workload in workloads:
        by = {(c["synchronous_mode"], c.get("delay_ms", 0), c["workers"]): c for c in cells
              if c.get("workload") == workload}
        delays = sorted({d for _, d, _ in by})
        workers = sorted({w for _, _, w in by})
        prefix = f"workload {workload}, " if len(workloads) > 1 else ""
        for d in delays:
            parts = [(w, change(by[(True, d, w)]["tps"], by[(False, d, w)]["tps"])) for w in workers
                     if (True, d, w) in by and (False, d, w) in by]
            if parts:
                yield f"{prefix}sync vs async commit at {d:g} ms delay: TPS {_at_workers(parts)}"
        if len(delays) < 2:
            continue
        for w in workers:
            gaps = [(d, 1 - by[(True, d, w)]["tps"] / by[(False, d, w)]["tps"]) for d in delays
                    if (True, d, w) in by and (False, d, w) in by and by[(False, d, w)]["tps"]]
            if len(gaps) < 2:
                continue
            (d0, g0), (d1, g1) = gaps[0], gaps[-1]
            a, b = round(g0 * 100), round(g1 * 100)
            trend = "grows" if b > a else "shrinks" if b < a else "stays"
            where = (f"from {a} % at {d0:g} ms to {b} % at {d1:g} ms" if trend != "stays"
                     else f"at {a} % from {d0:g} to {d1:g} ms")
            yield f"{prefix}at {w} workers the sync/async TPS gap {trend} {where}"


def _ramp(result: dict[str, Any]) -> Iterable[str]:
    """Per workload when the ladder ran several (each has its own knee), prefixed with its name."""
    knees = result.get("knees") or {None: result.get("knee")}
    for workload, knee in knees.items():
        cells = [c for c in result["cells"] if workload is None or c.get("workload") == workload]
        for line in _ramp_one(knee or {}, cells):
            yield f"{workload}: {line}" if workload else line


def _ramp_one(knee: dict[str, Any], cells: list[dict[str, Any]]) -> Iterable[str]:
    steps = sorted((c for c in cells if c.get("tps") is not None), key=lambda c: c["workers"])
    if not knee or len(steps) < 2:
        return
    peak = knee.get("peak") or max(steps, key=lambda c: c["tps"])
    first = steps[0]
    growth = peak["tps"] / first["tps"] if first["tps"] else None
    text = f"peak {peak['tps']:,.0f} TPS at {peak['workers']} workers"
    if peak["workers"] == first["workers"]:
        text += " (the first step: more workers only lowered it)"
    elif growth:
        plural = "s" if first["workers"] != 1 else ""
        text += f" ({growth:.1f}x the {first['tps']:,.0f} TPS of {first['workers']} worker{plural})"
    if knee.get("recommended_workers") is not None:
        text += f"; recommended concurrency {knee['recommended_workers']}"
    yield text
    last = steps[-1]
    if last["workers"] > peak["workers"]:
        p99 = f", p99 {_ms(peak.get('p99_ms'))} -> {_ms(last.get('p99_ms'))}" if peak.get("p99_ms") else ""
        yield (f"beyond the peak, {last['workers']} workers: TPS {change(last['tps'], peak['tps'])} "
               f"against the peak{p99}")


def _compare(result: dict[str, Any]) -> Iterable[str]:
    for name, v in (result.get("comparison") or {}).items():
        if v.get("relative_tps_change_median") is None:
            continue
        target, _, base = name.partition("_vs_")
        med = round(v["relative_tps_change_median"] * 100)
        lo, hi = round(v["min"] * 100), round(v["max"] * 100)
        yield (f"{target} against {base}: TPS {med:+d} % (median of {v['repeats']} repeat"
               f"{'s' if v['repeats'] != 1 else ''}; {lo:+d} % to {hi:+d} %)")


def _pct(fraction: float) -> str:
    value = round(fraction * 100)
    return f"{value:+d} %" if value else "0 %"


def _compare_by_delay(result: dict[str, Any]) -> Iterable[str]:
    """One sentence per route: its TPS (and median latency) against the base at each added delay,
    "pgbouncer against direct: TPS -3 % with no added delay, -10 % at +1 ms; p50 ..." """
    by_delay = result.get("comparison_by_delay") or {}
    for name in dict.fromkeys(n for cmp in by_delay.values() for n in cmp):
        target, _, base = name.partition("_vs_")
        tps, p50, repeats = [], [], set()
        for delay, cmp in by_delay.items():
            v = cmp.get(name) or {}
            if v.get("relative_tps_change_median") is None:
                continue
            where = "with no added delay" if float(delay) == 0 else f"at +{delay} ms"
            tps.append(f"{_pct(v['relative_tps_change_median'])} {where}")
            if v.get("relative_p50_change_median") is not None:
                p50.append(f"{_pct(v['relative_p50_change_median'])} {where}")
            repeats.add(v["repeats"])
        if not tps:
            continue
        n = min(repeats)
        yield (f"{target} against {base}: TPS {', '.join(tps)}" + (f"; p50 latency {', '.join(p50)}" if p50 else "")
               + f" (median of {n} repeat{'s' if n != 1 else ''} at each delay)")


def headlines(result: dict[str, Any]) -> list[str]:
    """The sentences for an experiment's report and terminal output, most telling first."""
    cells = [c for c in result.get("cells") or [] if c.get("tps") is not None]
    kind = (result.get("experiment") or {}).get("kind")
    if not cells:
        return []
    if kind == "compare":
        return [*_compare(result), *_compare_by_delay(result)]
    if kind == "ramp":
        return list(_ramp(result))
    return [*_sync_vs_async(cells), *_delay_effects(cells)]


def conditions(result: dict[str, Any]) -> list[str]:
    """Sentences on how the figures were measured rather than what they say (the report's and
    terminal's notes under the headlines)."""
    return list(_control_node_shared([c for c in result.get("cells") or [] if c.get("tps") is not None]))


CONTROL_BUSY_PCT = 90.0


def _control_node_shared(cells: list[dict[str, Any]]) -> Iterable[str]:
    """The control node (where the load runs) nearly full while the load itself was not the limit:
    it shared the machine (on a lab, with the databases themselves). Said, not marked: the cell's
    client_saturated rules stand, but a closed loop starved of CPU would not show it."""
    busy = [c for c in cells if (c.get("cpu_busy_pct_control") or 0) >= CONTROL_BUSY_PCT
            and not c.get("client_saturated")]
    if not busy:
        return
    worst = max(busy, key=lambda c: c["cpu_busy_pct_control"])
    where = ", ".join(f"{_cell_name(c)} ({c['cpu_busy_pct_control']:.0f} %)" for c in busy[:6])
    more = f" and {len(busy) - 6} more" if len(busy) > 6 else ""
    cores = worst.get("client_cpu_cores")
    used = f", though the load's own processes used {cores:.2f} cores" if cores is not None else ""
    yield (f"The control node, where the load runs, was at least {CONTROL_BUSY_PCT:.0f} % busy in {where}{more}"
           f"{used}: it shared its CPU with other work (on a lab, the databases themselves). A closed loop cannot "
           "say whether its pace suffered; an open loop (rate) says it as client_dispatch_late_pct.")


def _cell_name(c: dict[str, Any]) -> str:
    target = f"{c['target']} " if c.get("target") else ""
    delay = f" +{c['delay_ms']:g} ms" if c.get("delay_ms") else ""
    return f"{target}{c.get('workload')} x{c.get('workers')}{delay}"
