"""Write (and re-render) a run directory. run.json is versioned evidence an auditor can keep."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import platform
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2
import yaml

import chaoskit
from chaoskit.report.plots import latency_histogram, timeline_plot

SCHEMA_VERSION = 1
_REDACT_KEYS = ("password", "secret", "token", "passwd")


def sha256_file(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<redacted>" if any(r in str(k).lower() for r in _REDACT_KEYS) and not isinstance(v, dict)
                    else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_run(ctx: Any, run_dir: Path) -> dict[str, Any]:
    """Everything of a finished RunContext into `run_dir`; returns run.json's content."""
    rec = ctx.recorder
    pb = ctx.playbook
    inv_raw = yaml.safe_load(Path(ctx.inventory_path).read_text())
    evidence = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "chaoskit", "version": chaoskit.__version__, "python": platform.python_version()},
        "playbook": {"path": ctx.playbook_path, "sha256": sha256_file(ctx.playbook_path),
                     "content": pb.model_dump(mode="json", by_alias=True)},
        "inventory": {"path": ctx.inventory_path, "sha256": sha256_file(ctx.inventory_path),
                      "content": redact(inv_raw)},
        "operator": ctx.operator, "run_id": ctx.run_id,
        "started": ctx.started, "ended": ctx.ended, "t0_load_start": ctx.t0,
        "aborted": ctx.aborted,
        "cluster": {"name": pb.cluster, "kind": ctx.inventory.clusters[pb.cluster].kind},
        "server": ctx.preflight.get("server_settings", {}), "ha": ctx.preflight.get("ha", {}),
        "clock_offsets": ctx.preflight.get("clock_offsets", {}),
        "roles_before": ctx.preflight.get("roles_before", []),
        "faults_injected": [f.to_dict() for f in ctx.faults], "actions": ctx.actions, "heal": ctx.heal,
        "load": {"totals": rec.totals() if rec else {}, "errors_sample": [list(e) for e in (rec.errors[:50] if rec
                                                                                            else [])]},
        "results": ctx.results,
    }
    evidence = _clean(evidence)
    (run_dir / "run.json").write_text(json.dumps(evidence, indent=2, sort_keys=False, default=str))
    with open(run_dir / "events.jsonl", "w") as fh:
        for ev in sorted(ctx.events, key=lambda e: e.get("t") or 0):
            fh.write(json.dumps(_clean(ev), default=str) + "\n")
    if rec is not None:
        node_columns = _node_columns(ctx, rec)
        rec.write_timeline_csv(str(run_dir / "timeline.csv"), t0=ctx.t0, extra=node_columns)
        with contextlib.suppress(ImportError, ValueError):  # parquet where an engine is installed
            rec.to_frame().to_parquet(run_dir / "timeline.parquet")
        _plots(ctx, run_dir)
    render(run_dir)
    return evidence


def _node_columns(ctx: Any, rec: Any) -> dict[str, list[Any]]:
    """Per node, its role (probe) and replication lag in bytes (HA manager) at each interval's end."""
    probe = ctx.probe.log if ctx.probe is not None else None
    if probe is None:
        return {}
    ends = [t + rec.interval for t in rec.to_frame()["t"]]
    members = sorted({m for _, m, _ in probe.samples})
    cols: dict[str, list[Any]] = {}
    for m in members:
        samples = [(t, r) for t, mm, r in probe.samples if mm == m]
        cols[f"role_{m}"] = _step_values(samples, ends)
        lags = [(t, lag.get(m)) for t, lag, _ in probe.lag]
        if lags:
            cols[f"lag_bytes_{m}"] = _step_values(lags, ends)
    return cols


def _step_values(samples: list[tuple[float, Any]], ends: list[float]) -> list[Any]:
    out, i, current = [], 0, None
    for end in ends:
        while i < len(samples) and samples[i][0] <= end:
            current = samples[i][1]
            i += 1
        out.append(current)
    return out


def _plots(ctx: Any, run_dir: Path) -> None:
    rec = ctx.recorder
    df = rec.to_frame()
    faults = (ctx.results or {}).get("faults", [])
    timeline_plot(df, ctx.t0, faults, run_dir / "plots" / "timeline.png", f"{ctx.playbook.name}: throughput and "
                                                                              "latency")
    hist = rec.latency_hist()
    values = [(it.value_iterated_to / 1000, it.count_at_value_iterated_to) for it in hist.get_recorded_iterator()]
    latency_histogram(values, run_dir / "plots" / "latency_histogram.png")


def render(run_dir: Path) -> None:
    """report.html, summary.md and junit.xml from run.json (also used by `chaoskit report`)."""
    ev = json.loads((run_dir / "run.json").read_text())
    images = {}
    for png in sorted((run_dir / "plots").glob("*.png")):
        images[png.stem] = base64.b64encode(png.read_bytes()).decode()
    env = jinja2.Environment(loader=jinja2.PackageLoader("chaoskit.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]))
    env.filters["ts"] = _ts
    env.filters["sec"] = lambda v: "—" if v is None else f"{v:.3f} s"
    (run_dir / "report.html").write_text(env.get_template("report.html.j2").render(ev=ev, images=images))
    (run_dir / "summary.md").write_text(env.get_template("summary.md.j2").render(ev=ev))
    _junit(ev, run_dir / "junit.xml")


def _ts(t: float | None) -> str:
    import datetime as dt

    if t is None:
        return "—"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _junit(ev: dict[str, Any], path: Path) -> None:
    res = ev.get("results") or {}
    name = ev["playbook"]["content"]["name"]
    suite = ET.Element("testsuite", name=f"chaoskit.{name}")
    cases = []
    for slo, v in (res.get("slo") or {}).items():
        cases.append((f"slo.{slo}", v.get("ok"), f"target {v.get('target')} measured {v.get('measured')}"))
    for check, v in (res.get("checks") or {}).items():
        cases.append((f"check.{check}", v.get("valid"), json.dumps({k: v.get(k) for k in list(v)[:8]}, default=str)))
    if ev.get("aborted"):
        cases.append(("run.completed", False, ev["aborted"]))
    failures = 0
    for case_name, ok, text in cases:
        tc = ET.SubElement(suite, "testcase", classname=f"chaoskit.{name}", name=case_name)
        if ok is not True:
            failures += 1
            ET.SubElement(tc, "failure", message=("unknown" if ok == "unknown" else "failed")).text = text
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
