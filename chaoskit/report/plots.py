"""The run on one time axis (throughput, errors, latency, roles, lag) with the faults, outages and
phase marks labelled; the latency histogram."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches
import matplotlib.pyplot as plt
import pandas as pd

from chaoskit.report.vocabulary import fault_name

MARK_STYLE = {"t_fault": ("red", "fault"), "t_detect": ("orange", "detection"), "t_promoted": ("purple", "promoted"),
              "t_first_ok": ("green", "first client back"), "t_recovered": ("blue", "recovered"),
              "t_rejoined": ("saddlebrown", "old primary rejoined")}
ROLE_COLORS = {"primary": "tab:green", "replica": "tab:blue", "down": "tab:red"}


def _lanes(ax: Any, samples: list[tuple[float, str, str]], origin: float, x_end: float, key_box: Any) -> list[str]:
    """One lane per member: its role as the probe saw it, a bar from each sample to the next."""
    members = sorted({m for _, m, _ in samples})
    for lane, member in enumerate(members):
        mine = [(t - origin, r) for t, m, r in samples if m == member]
        for i, (t, role) in enumerate(mine):
            end = mine[i + 1][0] if i + 1 < len(mine) else x_end
            if end > t:
                ax.broken_barh([(t, end - t)], (lane - 0.4, 0.8), color=ROLE_COLORS.get(role, "lightgray"))
    ax.set_yticks(range(len(members)), members)
    ax.set_ylim(-0.6, max(len(members), 1) - 0.4)
    handles = [matplotlib.patches.Patch(color=c, label=r) for r, c in ROLE_COLORS.items()]
    _legend(ax, key_box, title="role", handles=handles)
    return members


def timeline_plot(df: pd.DataFrame, t0: float, faults: list[dict[str, Any]], path: Path, title: str,
                  roles: list[tuple[float, str, str]] | None = None,
                  lag: list[tuple[float, dict[str, int | None]]] | None = None,
                  cpu: dict[str, list[tuple[float, float]]] | None = None) -> None:
    """Throughput, errors (failed and unknown apart, on their own axis), latency, each member's
    role and the replicas' lag (and, right under the throughput, each host's CPU busy %: a
    busy host explains a dip), on one x axis in seconds since the (first) fault, as every table
    of the report counts. Each fault is a labelled band to its revert, its outage (fault to first
    client back) a darker one; the phase marks are labelled lines, their labels staggered so that
    marks a few milliseconds apart stay readable. Legends sit outside the data."""
    timed = [f for f in faults if f.get("t_fault")]
    origin = min((f["t_fault"] for f in timed), default=t0)
    outage = next((f for f in timed if f.get("outage") and f.get("t_first_ok")), None)
    lanes = bool(roles)
    c = 1 if cpu else 0  # the CPU panel's row, when there is one, shifts the rows under it
    rows = (4 + (1 if lag else 0) if lanes else 3) + c
    ratios = [3] + ([1.4] * c) + [1.4, 2] + ([1.6] if lanes else []) + ([1.2] if lanes and lag else [])
    # column 0: the panels on one x axis; column 1: the outage zoomed (beside the throughput, so
    # it covers no data) and every legend (outside the data)
    fig = plt.figure(figsize=(13, 2.0 * rows + 1.4))  # the same height as `height` below
    grid = fig.add_gridspec(rows, 2, width_ratios=[4, 1.25], height_ratios=ratios, wspace=0.08)
    ax_tps = fig.add_subplot(grid[0, 0])
    axes = [ax_tps] + [fig.add_subplot(grid[r, 0], sharex=ax_tps) for r in range(1, rows)]
    keys = [fig.add_subplot(grid[r, 1]) for r in range(1, rows)]  # legend boxes of rows 1..
    for k in keys:
        k.axis("off")
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    ax_err, ax_lat = axes[1 + c], axes[2 + c]
    if cpu:
        ax_cpu = axes[1]
        for host, points in cpu.items():
            ax_cpu.plot([t - origin for t, _ in points], [v for _, v in points], lw=1, label=host)
        ax_cpu.set_ylim(0, 100)
        ax_cpu.set_ylabel("CPU busy %")
        _legend(ax_cpu, keys[0], title="host")
    x = df["t"] - origin
    x_end = float(x.max()) + 0.1 if len(x) else 0.0
    tps = df["write_ok"].rolling(10, min_periods=1).sum()
    ax_tps.plot(x, tps, lw=1.2, label="writes ok/s (1 s rolling)")
    ax_err.plot(x, df["fail"].rolling(10, min_periods=1).sum(), lw=1, color="crimson", label="failed/s")
    ax_err.plot(x, df["info"].rolling(10, min_periods=1).sum(), lw=1, color="darkorange", label="unknown outcome/s")
    ax_lat.plot(x, df["p99_ms"], lw=1, label="p99 ms (ok ops)")
    ax_lat.plot(x, df["p50_ms"], lw=1, label="p50 ms (ok ops)")
    ax_lat.set_yscale("log")
    top = float(tps.max()) if len(tps) and tps.max() > 0 else 1.0
    ax_tps.set_ylim(0, top * 1.75)  # headroom: the mark labels stand above the data, never on it
    x_lo = float(x.min()) if len(x) else 0.0
    data_axes = [ax_tps, ax_err, ax_lat] + ([axes[1]] if cpu else [])
    for n, f in enumerate(timed, start=1):
        start = f["t_fault"] - origin
        end = f.get("t_reverted") or f.get("t_recovered") or f.get("t_first_ok")
        what = fault_name(f)
        for ax in data_axes:
            if end:
                ax.axvspan(start, end - origin, color="red", alpha=0.07, label=f"fault {n}: {what}" if ax is ax_tps
                           else None)
            if f.get("outage") and f.get("t_first_ok"):
                ax.axvspan(start, f["t_first_ok"] - origin, color="red", alpha=0.18,
                           label=f"outage {n}: fault to first client back" if ax is ax_tps else None)
        level = 0
        for key, (color, label) in MARK_STYLE.items():
            if not f.get(key):
                continue
            at = f[key] - origin
            for ax in data_axes:
                ax.axvline(at, color=color, lw=0.9, ls="--")
            # a label near the right edge is written leftwards from its line, so it stays in the panel
            right = x_end > x_lo and (at - x_lo) / (x_end - x_lo) > 0.7
            ax_tps.annotate(f"{label} {at:+.2f} s", xy=(at, 1.0), xycoords=("data", "axes fraction"),
                            xytext=(-3 if right else 3, -10 - 11 * level), textcoords="offset points", fontsize=7,
                            color=color, ha="right" if right else "left",
                            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85})
            level = (level + 1) % 5
    zoom = fig.add_subplot(grid[0, 1])
    if outage is not None:  # the failover itself: its marks are often milliseconds apart
        lo, hi = outage["t_fault"] - origin - 0.5, outage["t_first_ok"] - origin + 1.5
        zoom.plot(x, tps, lw=1)
        for key, (color, _) in MARK_STYLE.items():
            if outage.get(key) and lo <= outage[key] - origin <= hi:
                zoom.axvline(outage[key] - origin, color=color, lw=0.9, ls="--")
        zoom.axvspan(outage["t_fault"] - origin, outage["t_first_ok"] - origin, color="red", alpha=0.18)
        zoom.set_xlim(lo, hi)
        zoom.set_ylim(0, top * 1.1)
        zoom.set_title("zoom: the outage", fontsize=8)
        zoom.set_xlabel("seconds since the fault", fontsize=7)
        zoom.tick_params(labelsize=6)
        zoom.yaxis.tick_right()
    else:
        zoom.axis("off")
    if lanes:
        _lanes(axes[3 + c], roles or [], origin, x_end, keys[2 + c])
        axes[3 + c].set_ylabel("role")
    if lanes and lag:
        ax_lag = axes[4 + c]
        members = sorted({m for _, values in lag for m in values})
        for member in members:
            lags = [(t - origin, v.get(member)) for t, v in lag]
            ax_lag.plot([p[0] for p in lags], [p[1] / 1e6 if p[1] is not None else float("nan") for p in lags],
                        lw=1, label=member)
        ax_lag.set_ylabel("lag (MB)")
        _legend(ax_lag, keys[3 + c], title="replica")
    ax_tps.set_ylabel("ops/s")
    ax_err.set_ylabel("errors/s")
    ax_lat.set_ylabel("latency (ms, log)")
    axes[-1].set_xlabel("seconds since the fault" if timed else "seconds since the load started")
    fig.suptitle(title)
    handles, labels = ax_tps.get_legend_handles_labels()
    ax_tps.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=3, fontsize=7, frameon=False)
    _legend(ax_err, keys[0 + c])
    _legend(ax_lat, keys[1 + c])
    height = 2.0 * rows + 1.4
    legend_rows = -(-len(labels) // 3)  # each a line of the legend above the throughput panel
    fig.subplots_adjust(left=0.06, right=0.97, top=1 - (0.5 + 0.2 * legend_rows) / height, bottom=0.6 / height,
                        hspace=0.25)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _legend(ax: Any, box: Any, title: str | None = None, handles: list[Any] | None = None) -> None:
    """The legend of a panel, drawn in its own box of the right-hand column."""
    if handles is None:
        handles, _ = ax.get_legend_handles_labels()
    box.legend(handles=handles, loc="upper left", fontsize=7, title=title, title_fontsize=7, frameon=False)


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


def staleness_plot(points: list[tuple[str, float, float]], faults: list[dict[str, Any]], origin: float,
                   path: Path) -> None:
    """Reads through a read route: the stalest read (seconds) of each client group in each 100 ms,
    against seconds from the start, the faults' windows shaded."""
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for f in faults:
        if f.get("t_fault") is not None:
            end = f.get("t_recovered") or f.get("t_reverted") or f["t_fault"]
            ax.axvspan(f["t_fault"] - origin, end - origin, color="#f4cccc", alpha=0.5, lw=0)
    for group in sorted({g for g, _, _ in points}):
        xs = [t - origin for g, t, _ in points if g == group]
        ys = [v for g, _, v in points if g == group]
        ax.plot(xs, ys, lw=0.8, marker=".", ms=2, label=group)
    ax.set_xlabel("seconds from the start (shaded: fault until recovery)")
    ax.set_ylabel("stalest read per 100 ms (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Reads through read routes: how far behind each read was")
    if points:
        ax.legend(loc="upper right", fontsize=8, markerscale=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
