"""An experiment's run directory: run.json, results.csv, plots, report.html."""

from __future__ import annotations

import base64
import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from chaoskit.hostmetrics import HOST_CPU_PREFIX
from chaoskit.incomplete import Failures
from chaoskit.report.headlines import conditions, headlines
from chaoskit.report.writer import CSP, template_env, write_in_stages


def write_experiment(result: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The experiment's files, each a stage (`write_in_stages`): a stage that fails (or a cell that
    failed during the run: `result["failures"]`) leaves the rest written and run.json `incomplete`.
    Returns run.json's content."""
    (run_dir / "plots").mkdir(parents=True, exist_ok=True)
    failures = result.pop("failures", None) or Failures()
    with failures.guard("headlines"):
        result["headlines"] = headlines(result)
        result["conditions"] = conditions(result)
    result.setdefault("cells", [])
    cells = result["cells"]
    kind = result["experiment"]["kind"]
    name = result["experiment"].get("name", "experiment")

    def table() -> None:
        if cells:
            with open(run_dir / "results.csv", "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(cells[0]))
                writer.writeheader()
                writer.writerows(cells)

    def plots() -> None:
        if kind in ("sweep", "ramp"):
            knee = None if result.get("knees") else result.get("knee")  # one knee line only for one ladder
            _lines(cells, run_dir / "plots" / "tps_vs_workers.png", "tps", "TPS (median of repeats)", knee,
                   f"{name}: throughput by concurrency")
            if any(c.get("p99_ms") is not None for c in cells):
                _lines(cells, run_dir / "plots" / "p99_vs_workers.png", "p99_ms", "p99 latency (ms)", None,
                       f"{name}: p99 latency by concurrency")
            elif any(c.get("tool_p99_ms_median_of_seconds") is not None for c in cells):
                _lines(cells, run_dir / "plots" / "p99_vs_workers.png", "tool_p99_ms_median_of_seconds",
                       "the tool's p99 per second, median (ms)", None,
                       f"{name}: the tool's p99 latency by concurrency")
            if kind == "sweep":
                _heatmap(cells, run_dir / "plots" / "heatmap_tps.png", f"{name}: TPS (median) per cell")
        else:
            _bars(cells, run_dir / "plots" / "compare_tps.png", f"{name}: TPS per target (median, min-max)")

    def report(r: dict[str, Any], ids: dict[str, Any]) -> str:
        images = {p.stem: base64.b64encode(p.read_bytes()).decode()
                  for p in sorted((run_dir / "plots").glob("*.png"))}
        headers, rows = results_table(cells)
        return template_env().get_template("experiment.html.j2").render(r=r, images=images, csp=CSP, ids=ids,
                                                                        headers=headers, rows=rows)

    result = {"schema_version": 1, **result}
    stages = [("results.csv", table), ("plots", plots), ("junit.xml", lambda: _junit(result, run_dir / "junit.xml"))]
    return write_in_stages(run_dir, result, failures, stages, report, "Experiment")


_COLUMNS = (  # (cell key, header, format); a column whose cells are all empty is left out
    ("target", "target", "{}"), ("synchronous_mode", "commit", "mode"), ("workload", "workload", "{}"),
    ("delay_ms", "delay", "{:g} ms"), ("workers", "workers", "{}"), ("tps", "TPS (median)", "{:,.0f}"),
    ("tps_min", "TPS min-max", "range"), ("mean_ms", "avg", "{:.2f} ms"), ("p50_ms", "p50", "{:.2f} ms"),
    ("p90_ms", "p90", "{:.2f} ms"), ("p99_ms", "p99", "{:.2f} ms"),
    ("p999_ms", "p99.9", "{:.2f} ms"),
    ("tool_p99_ms_median_of_seconds", "tool's p99 per second (median)", "{:.2f} ms"),
    ("tool_p99_ms_worst_second", "tool's p99 (worst second)", "{:.2f} ms"), ("error_rate", "errors", "{:.2%}"),
    ("proxy_added_p50_ms", "relay added p50", "{:.2f} ms"), ("proxy_added_p99_ms", "relay added p99", "{:.2f} ms"),
    ("client_cpu_cores", "client CPU", "{:.2f} cores"), ("client_saturated", "client-bound", "yesno"),
    ("repeats", "repeats", "{}"))


def results_table(cells: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The cells as a table a person reads (units, rounded, no empty columns); the raw values stay in
    run.json and results.csv."""
    hosts = sorted({k for cell in cells for k in cell if k.startswith(HOST_CPU_PREFIX)})
    # each host's CPU busy % over the cell's window, before the client's own CPU
    at = next(i for i, c in enumerate(_COLUMNS) if c[0] == "client_cpu_cores")
    columns = [*_COLUMNS[:at], *((k, f"CPU {k.removeprefix(HOST_CPU_PREFIX)}", "{:.0f} %") for k in hosts),
               *_COLUMNS[at:]]
    cols = [c for c in columns if any(cell.get(c[0]) is not None for cell in cells)]

    def fmt(cell: dict[str, Any], key: str, form: str) -> str:
        v = cell.get(key)
        if v is None:
            return "-"
        if form == "mode":
            return "sync" if v else "async"
        if form == "yesno":
            return "YES: the knee ignores it" if v else "no"
        if form == "range":
            return f"{cell['tps_min']:,.0f}-{cell['tps_max']:,.0f}"
        return form.format(v)

    return [h for _, h, _ in cols], [[fmt(cell, k, f) for k, _, f in cols] for cell in cells]


def _junit(result: dict[str, Any], path: Path) -> None:
    """For CI: the experiment completed, its settings were restored, and every cell has a result."""
    name = result["experiment"].get("name", "experiment")
    cases: list[tuple[str, bool, str]] = [
        ("experiment.completed", not result.get("aborted"), str(result.get("aborted") or "")),
        ("settings.restored", not result.get("settings_restore_errors"),
         json.dumps(result.get("settings_restore_errors") or "", default=str)),
        ("evidence.complete", not result.get("incomplete"), str(result.get("incomplete") or ""))]
    for i, cell in enumerate(result.get("cells") or []):
        what = ", ".join(f"{k}={v}" for k, v in cell.items() if k in ("workload", "workers", "delay_ms",
                                                                        "synchronous_mode", "target"))
        cases.append((f"cell[{i}] {what}", cell.get("tps") is not None, "no throughput measured"))
    suite = ET.Element("testsuite", name=f"chaoskit.{name}", tests=str(len(cases)),
                       failures=str(sum(1 for _, ok, _ in cases if not ok)))
    for case, ok, text in cases:
        tc = ET.SubElement(suite, "testcase", classname=f"chaoskit.{name}", name=case)
        if not ok:
            ET.SubElement(tc, "failure", message="failed").text = text
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def _series(cells: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Cells grouped into one line per everything but concurrency: delay, then the sync/async
    mode and the workload where the grid varies them."""
    modes = {c.get("synchronous_mode") for c in cells}
    workloads = {c.get("workload") for c in cells}
    out: dict[str, list[dict[str, Any]]] = {}
    for c in sorted(cells, key=lambda c: (str(c.get("synchronous_mode")), str(c.get("workload")),
                                         c.get("delay_ms", 0), c["workers"])):
        label = f"delay {c.get('delay_ms', 0):g} ms"
        if len(modes) > 1:
            label += ", sync" if c.get("synchronous_mode") else ", async"
        if len(workloads) > 1:
            label += f", {c.get('workload')}"
        out.setdefault(label, []).append(c)
    return out


def _lines(cells: list[dict[str, Any]], path: Path, key: str, label: str, knee: dict[str, Any] | None,
           title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.set_title(title)
    for name, series in _series(cells).items():
        pts = [c for c in series if c[key] is not None]
        if pts:
            xs = [c["workers"] for c in pts]
            ax.plot(xs, [c[key] for c in pts], marker="o", label=name)
            if key == "tps":
                ax.fill_between(xs, [c["tps_min"] for c in pts], [c["tps_max"] for c in pts], alpha=0.15)
    if knee and knee.get("saturation") and key == "tps":
        ax.axvline(knee["saturation"]["workers"], color="red", ls="--", label="knee (recommended)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers (concurrency)")
    ax.set_ylabel(label)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _heatmap(cells: list[dict[str, Any]], path: Path, title: str) -> None:
    series = _series(cells)
    workers = sorted({c["workers"] for c in cells})
    grid = [[next((c["tps"] for c in row if c["workers"] == w), 0) for w in workers] for row in series.values()]
    fig, ax = plt.subplots(figsize=(6.5, max(3.0, 0.5 * len(series) + 1.5)))
    ax.set_title(title)
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(workers)), [str(w) for w in workers])
    ax.set_yticks(range(len(series)), list(series))
    ax.set_xlabel("workers")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(im, label="TPS")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(cells: list[dict[str, Any]], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_title(title)
    labels = [f"{c['target']}\n{c['workload']} x{c['workers']}"
              + (f"\n+{c['delay_ms']:g} ms" if c.get("delay_ms") is not None else "") for c in cells]
    tps = [c["tps"] for c in cells]
    err = [[c["tps"] - c["tps_min"] for c in cells], [c["tps_max"] - c["tps"] for c in cells]]
    ax.bar(range(len(cells)), tps, yerr=err, capsize=4)
    ax.set_xticks(range(len(cells)), labels, fontsize=8)
    ax.set_ylabel("TPS (median, min-max over repeats)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
