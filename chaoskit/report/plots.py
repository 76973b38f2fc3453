"""Throughput and latency over time with fault windows shaded and phase marks; latency histogram."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

MARK_STYLE = {"t_fault": ("red", "fault"), "t_detect": ("orange", "detect"), "t_promoted": ("purple", "promoted"),
              "t_first_ok": ("green", "first ok"), "t_recovered": ("blue", "recovered")}


def timeline_plot(df: pd.DataFrame, t0: float, faults: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    x = df["t"] - t0
    ax1.plot(x, df["write_ok"].rolling(10, min_periods=1).sum(), lw=1.2, label="writes ok/s (1 s rolling)")
    errs = df[[c for c in df.columns if c.startswith("err_")]].sum(axis=1).rolling(10, min_periods=1).sum()
    ax1.plot(x, errs, lw=1, color="crimson", label="errors/s")
    ax2.plot(x, df["p99_ms"], lw=1, label="p99 ms")
    ax2.plot(x, df["p50_ms"], lw=1, label="p50 ms")
    ax2.set_yscale("log")
    for f in faults:
        end = f.get("t_reverted") or f.get("t_recovered") or f.get("t_first_ok")
        if f.get("t_fault") and end:
            for ax in (ax1, ax2):
                ax.axvspan(f["t_fault"] - t0, end - t0, color="red", alpha=0.08)
        for key, (color, label) in MARK_STYLE.items():
            if f.get(key):
                for ax in (ax1, ax2):
                    ax.axvline(f[key] - t0, color=color, lw=0.9, ls="--", label=label if ax is ax1 else None)
    ax1.set_ylabel("ops/s")
    ax2.set_ylabel("latency (ms, log)")
    ax2.set_xlabel("seconds since load start")
    ax1.set_title(title)
    ax1.legend(loc="upper right", fontsize=7, ncol=3)
    ax2.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_histogram(values_ms: list[tuple[float, int]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if values_ms:
        xs, ws = zip(*values_ms, strict=True)
        ax.hist(xs, bins=60, weights=ws, log=True)
    ax.set_xlabel("ok-op latency (ms)")
    ax.set_ylabel("ops (log)")
    ax.set_title("latency histogram, whole run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
