"""Live progress and end-of-run summary of a load (rich), shared by `load`, `run` and experiments."""

from __future__ import annotations

import math
import time
from typing import Any

from rich.table import Table

from chaoskit.recorder import ERROR_CLASSES, Recorder


def live_line(recorder: Recorder, t_start: float, now: float | None = None) -> str:
    now = now or time.time()
    w = recorder.window(now - 1.2, now - 0.2)
    errs = {c: w[f"err_{c}"] for c in ERROR_CLASSES if w[f"err_{c}"]}
    err_txt = ", ".join(f"{k}={v}" for k, v in errs.items()) or "none"
    p99 = w["p99_ms"]
    return (f"t={now - t_start:6.1f}s  tps={w['tps']:8.0f}  p99={p99 if not math.isnan(p99) else 0:7.2f} ms  "
            f"errors: {err_txt}")


def summary(recorder: Recorder, t_start: float, t_end: float) -> dict[str, Any]:
    totals = recorder.totals()
    hist = recorder.latency_hist()
    seconds = max(1e-9, t_end - t_start)
    n = hist.get_total_count()
    pct = {f"p{p}_ms": round(hist.get_value_at_percentile(p) / 1000, 3) if n else None for p in (50, 99, 99.9)}
    return {
        "seconds": round(seconds, 3), "ops_ok": totals["ok"], "ops_fail": totals["fail"], "ops_info": totals["info"],
        "missed_arrivals": totals["missed"], "tps": round(totals["ok"] / seconds, 1), **pct,
        "errors": {c: totals[f"err_{c}"] for c in ERROR_CLASSES if totals[f"err_{c}"]},
    }


def summary_table(s: dict[str, Any], title: str) -> Table:
    t = Table(title=title)
    t.add_column("figure")
    t.add_column("value", justify="right")
    for key in ("seconds", "ops_ok", "ops_fail", "ops_info", "missed_arrivals", "tps", "p50_ms", "p99_ms",
                "p99.9_ms"):
        t.add_row(key, str(s[key]))
    t.add_row("errors", ", ".join(f"{k}={v}" for k, v in s["errors"].items()) or "none")
    return t
