"""Write (and re-render) a run directory. run.json is versioned evidence an auditor can keep."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import gzip
import json
import platform
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

import chaoskit
from chaoskit import hostmetrics
from chaoskit.errors import escaped
from chaoskit.guard import environment
from chaoskit.hostmetrics import HostSeries
from chaoskit.playbook.record import DrillResult
from chaoskit.recorder import Recorder, step_values
from chaoskit.report import vocabulary
from chaoskit.report.findings import findings
from chaoskit.report.headline import headline
from chaoskit.report.legacy import CURRENT, upgrade
from chaoskit.report.narrative import log_quotes, narrative, phases_in_words, read_events
from chaoskit.report.observations import observations
from chaoskit.report.plots import latency_histogram, timeline_plot
from chaoskit.report.rundir import RunDirectory, clean, evidence_ids
from chaoskit.topology.probe import ProbeLog
from chaoskit.workload.outcomes import client_deadline

SCHEMA_VERSION = CURRENT  # 3: two RTOs (first client back, all clients back); see legacy.py
# what a browser may do with a report: show inline styles and embedded images, fetch nothing, run nothing
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


METHODOLOGY = Path(__file__).parents[1] / "docs" / "methodology.md"


def write_run(result: DrillResult, rd: RunDirectory, signed: bool | None = None) -> dict[str, Any]:
    """Everything of a finished drill into its run directory; returns run.json's content.
    The inventory is copied from an allow-list of its fields (secrets only as their references), the
    inputs are identified by the SHA-256 of the bytes that were actually loaded."""
    inputs, run, rec, probe = result.inputs, result.record, result.recorder, result.probe
    pb, cluster = inputs.playbook, inputs.cluster
    evidence = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "chaoskit", "version": chaoskit.__version__, "python": platform.python_version()},
        "playbook": {"path": inputs.playbook_path, "sha256": inputs.playbook_sha256,
                     "content": pb.model_dump(mode="json", by_alias=True)},
        "inventory": {"path": inputs.inventory_path, "sha256": inputs.inventory.sha256,
                      "content": inputs.inventory.evidence()},
        "operator": inputs.operator, "run_id": run.run_id,
        "started": run.started, "ended": run.ended, "t0_load_start": run.t0,
        "aborted": run.aborted, "refused": run.refused,
        "allow_production": inputs.allow_production,
        "production_targets": run.preflight.get("production_targets", []),
        "cluster": {"name": pb.cluster, "engine": cluster.engine, "ha": cluster.ha.kind},
        "environment": environment(inputs.inventory, pb.cluster),
        "server": run.preflight.get("server_settings", {}), "ha": run.preflight.get("ha", {}),
        "detection_bound_s": run.preflight.get("detection_bound_s"),
        "preflight_warnings": run.preflight.get("warnings", []),
        "settings_changed": run.settings_changed,
        "clock_offsets": run.preflight.get("clock_offsets", {}),
        "roles_before": run.preflight.get("roles_before", []),
        "faults_injected": [f.to_dict() for f in run.faults], "actions": run.actions, "heal": run.heal,
        "triggered_steps": run.triggered,
        "logs": run.logs,
        "load": {"totals": rec.totals() if rec else {}, "errors_sample": [list(e) for e in (rec.errors[:50] if rec
                                                                                            else [])],
                 "client_cpu": run.client_cpu, "workload": pb.load.workload_name, **_sql_file(pb)},
        "host_metrics": {h: s.summary() for h, s in sorted(run.host_metrics.items())},
        "results": result.results,
    }
    evidence["audit"] = {**inputs.evidence.model_dump(mode="json"), "operator": inputs.operator}
    evidence["findings"] = findings(evidence)
    evidence = clean(evidence)
    rd.write_json("run.json", evidence)
    rd.write_text("methodology.md", METHODOLOGY.read_text())  # the evidence carries its own definitions
    if rec is not None and rec.history.windows:
        present = result.truth.get("ledger_present", {}).get("rows")
        # gzip: the ops of a 40 s drill are ~64 MB of JSON lines, ~4 MB compressed (zcat, pandas read it)
        with gzip.open(rd.file("history.jsonl.gz"), "wt", compresslevel=6) as out:
            rec.history.write(out, run_id=run.run_id, faults=result.results.get("faults", []), present=present,
                              groups={n: g["workers"] for n, g in run.groups.items()},
                              stall_s=client_deadline(pb.load.op_timeout))
    if rec is not None and probe is not None:
        ends = [t + rec.interval for t in rec.to_frame()["t"]]
        rec.write_timeline_csv(str(rd.file("timeline.csv")), t0=run.t0,
                               extra={**_node_columns(probe, ends), **hostmetrics.columns(run.host_metrics, ends)})
        with contextlib.suppress(ImportError, ValueError):  # parquet where an engine is installed
            rec.to_frame().to_parquet(rd.file("timeline.parquet"))
        _plots(rec, run.t0, result.results.get("faults", []), pb.name, rd.path, probe, run.host_metrics)
    render(rd.path, signed=signed)
    for p in rd.path.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    return evidence


def _node_columns(probe: ProbeLog, ends: list[float]) -> dict[str, list[Any]]:
    """Per node, its role (probe) and replication lag in bytes (HA manager) at each interval's end."""
    members = sorted({m for _, m, _ in probe.samples})
    cols: dict[str, list[Any]] = {}
    for m in members:
        samples = [(t, r) for t, mm, r in probe.samples if mm == m]
        cols[f"role_{m}"] = step_values(samples, ends)
        lags = [(t, lag.get(m)) for t, lag, _ in probe.lag]
        if lags:
            cols[f"lag_bytes_{m}"] = step_values(lags, ends)
        delays = [(t, s[m][2]) for t, s in probe.replication if m in s]  # None once it is the primary
        if delays:  # replay delay (PostgreSQL) or Seconds_Behind_Master (MySQL)
            cols[f"replica_delay_s_{m}"] = step_values(delays, ends)
        states = [(t, s[m][0]) for t, s in probe.replication if m in s]
        if states and any(st not in ("streaming", "primary") for _, st in states):
            cols[f"replica_state_{m}"] = step_values(states, ends)
        positions = [(t, p) for t, mm, p in probe.positions if mm == m]
        if positions:
            cols[f"position_{m}"] = step_values(positions, ends)
    return cols


def _plots(rec: Recorder, t0: float, faults: list[dict[str, Any]], name: str, run_dir: Path,
           probe: ProbeLog | None = None, host_metrics: dict[str, HostSeries] | None = None) -> None:
    roles = list(probe.samples) if probe is not None else None
    lag = [(t, values) for t, values, _ in probe.lag] if probe is not None else None
    cpu = {h: [(t, v["cpu_busy_pct"]) for t, v in s.samples if v.get("cpu_busy_pct") is not None]
           for h, s in sorted((host_metrics or {}).items())}
    timeline_plot(rec.to_frame(), t0, faults, run_dir / "plots" / "timeline.png",
                  f"{name}: throughput, errors, latency and roles", roles=roles, lag=lag,
                  cpu={h: pts for h, pts in cpu.items() if pts})
    hist = rec.latency_hist()
    values = [(it.value_iterated_to / 1000, it.count_at_value_iterated_to) for it in hist.get_recorded_iterator()]
    latency_histogram(values, run_dir / "plots" / "latency_histogram.png")


def render(run_dir: Path, resealed: dict[str, Any] | None = None, signed: bool | None = None) -> None:
    """report.html, summary.md and junit.xml from run.json (also used by `chaoskit report`). The
    report names run.json's digest and the events chain's head it was rendered from (verify
    checks them); `resealed` says, on the report, that it was re-rendered from a run that no
    longer verified, and what had changed. `signed`: whether the seal that follows signs (shown in
    the headline; None: not known)."""
    ids = evidence_ids(run_dir)
    ev = upgrade(json.loads((run_dir / "run.json").read_text()))
    ev["findings"] = findings(ev)  # from the results as they read now, never a stale list
    head = headline(ev, signed)
    ev["observations"] = observations(ev)
    story = {"events": narrative(read_events(run_dir), ev), "phases": phases_in_words(ev), "logs": log_quotes(ev)}
    images = {}
    for png in sorted((run_dir / "plots").glob("*.png")):
        images[png.stem] = base64.b64encode(png.read_bytes()).decode()
    env = template_env()
    html = env.get_template("report.html.j2").render(
        ev=ev, images=images, csp=CSP, ids=ids, resealed=resealed, head=head, story=story, signed=signed,
        glossary=vocabulary.GLOSSARY, methodology=_methodology_html(run_dir))
    (run_dir / "report.html").write_text(_header_rows(html))
    (run_dir / "summary.md").write_text(markdown_env().get_template("summary.md.j2").render(ev=ev, head=head))
    write_pdf(run_dir / "report.html", run_dir / "report.pdf")
    _junit(ev, run_dir / "junit.xml")


_HEADER_ROW = re.compile(r"(<table[^>]*>\s*)(<tr>(?:\s*<th>(?:(?!</th>).)*</th>)+\s*</tr>)", re.S)


def _header_rows(html: str) -> str:
    """A table's first row of headers becomes its <thead>: the PDF repeats it on every page the
    table spans."""
    return _HEADER_ROW.sub(r"\1<thead>\2</thead>", html)


def _methodology_html(run_dir: Path) -> markupsafe.Markup:
    """The run's own methodology.md (the definitions as of the chaoskit that made it) as HTML, for
    the report's appendix; markdown only: any HTML in it is shown as text."""
    from markdown_it import MarkdownIt

    source = run_dir / "methodology.md"
    text = source.read_text(errors="replace") if source.exists() else METHODOLOGY.read_text()
    return markupsafe.Markup(MarkdownIt("commonmark", {"html": False}).enable("table").render(text))


def write_pdf(html: Path, pdf: Path) -> None:
    """report.pdf: the same report, paginated (A4 landscape), plots embedded (WeasyPrint)."""
    import logging

    import weasyprint
    from weasyprint.urls import URLFetcher

    logging.getLogger("weasyprint").setLevel(logging.ERROR)  # CSS it does not support is not news
    # the report embeds everything it shows (data: URIs): nothing is fetched from anywhere
    fetcher = URLFetcher(allowed_protocols={"data"})
    weasyprint.HTML(string=html.read_text(), base_url=str(html.parent), url_fetcher=fetcher).write_pdf(str(pdf))


def template_env() -> jinja2.Environment:
    """HTML templates, every value escaped (autoescape on for every template, not by file suffix:
    `report.html.j2` does not end in .html, and a playbook description or a database error text
    must never become markup)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("chaoskit.report", "templates"), autoescape=True,
                             finalize=_shown_in_html)
    _vocabulary(env)
    return env


def _vocabulary(env: jinja2.Environment) -> None:
    """Filters and helpers both kinds of template share: one name and unit per figure."""
    env.filters["ts"] = _ts
    env.filters["sec"] = _sec
    env.filters["num"] = _num
    env.filters["fault_name"] = vocabulary.fault_name
    env.filters["group_maker"] = vocabulary.group_maker
    env.globals.update(label=vocabulary.label, shown=vocabulary.shown, slo_figure=vocabulary.slo_figure,
                       verdict_word=vocabulary.verdict_word, check_sentence=vocabulary.check_sentence,
                       check_rows=vocabulary.check_rows)


def markdown_env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("chaoskit.report", "templates"), autoescape=False,
                             finalize=_shown)
    _vocabulary(env)
    return env


def _shown(value: Any) -> Any:
    """Every value summary.md prints: a string's control characters shown escaped (a server's
    error text or a log line quoted in a finding must not drive the terminal that shows it, and
    a newline must not start a heading of its own)."""
    return escaped(value) if isinstance(value, str) else value


def _shown_in_html(value: Any) -> Any:
    """Every value report.html prints, before autoescape: as in summary.md, except that a newline
    stays (whitespace in HTML; a description keeps its lines) and our own markup is ours."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return "\n".join(escaped(part) for part in value.split("\n"))
    return value


def _missing(v: Any) -> bool:
    return v is None or isinstance(v, jinja2.Undefined) or not isinstance(v, int | float)


def _num(v: Any) -> str:
    """A count with thousands separators; "—" when it was not recorded."""
    return "—" if _missing(v) or isinstance(v, bool) else f"{v:,}"


def _sec(v: Any) -> str:
    return "—" if _missing(v) else f"{v:.3f} s"


def _ts(t: float | None) -> str:
    if _missing(t):
        return "—"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _junit(ev: dict[str, Any], path: Path) -> None:
    """One case per SLO (named by the figure it judges: "SLO all clients back <= 30.00 s"), per check
    and per fault revert; a failure says the value, comparator and unit."""
    res = ev.get("results") or {}
    name = ev["playbook"]["content"]["name"]
    suite = ET.Element("testsuite", name=f"chaoskit.{name}")
    started, ended = ev.get("started"), ev.get("ended")
    if isinstance(started, int | float):
        suite.set("timestamp", dt.datetime.fromtimestamp(started, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        if isinstance(ended, int | float):
            suite.set("time", f"{ended - started:.3f}")
    suite.set("hostname", socket.gethostname())
    props = ET.SubElement(suite, "properties")
    figures: dict[str, Any] = {"run_id": ev.get("run_id"), "report": "report.html",
                               "verdict": vocabulary.verdict_word(res.get("verdict"))}
    for key in ("rto_first_client_s", "rto_all_clients_s"):
        figures[key] = vocabulary.worst_over_outages(res, key)
    figures["lost_acknowledged"] = (res.get("rpo") or {}).get("lost_acknowledged")
    for key, value in figures.items():
        ET.SubElement(props, "property", name=key, value="" if value is None else str(value))
    cases = []
    for slo, v in (res.get("slo") or {}).items():
        cases.append((vocabulary.slo_test_name(slo, v), v.get("ok"), vocabulary.slo_sentence(slo, v)))
    for check, v in (res.get("checks") or {}).items():
        text = v.get("text") or v.get("error") or json.dumps({k: v.get(k) for k in list(v)[:8]}, default=str)
        cases.append((f"check {check}", v.get("valid"), text))
    for f in ev.get("faults_injected") or []:
        reverted = f.get("t_reverted") is not None
        cases.append((f"fault {f.get('kind')} on {f.get('host')} reverted", reverted,
                      "reverted" if reverted else "no revert recorded"))
    if ev.get("aborted"):
        cases.append(("run completed", False, ev["aborted"]))
    failures = 0
    for case_name, ok, text in cases:
        tc = ET.SubElement(suite, "testcase", classname=f"chaoskit.{name}", name=case_name)
        if ok is not True:
            failures += 1
            ET.SubElement(tc, "failure", message=("unknown" if ok == "unknown" else "failed")).text = text
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def _sql_file(pb: Any) -> dict[str, Any]:
    """The user's SQL file a run's load ran: where it was, its SHA-256, and its copy in the run."""
    sql = pb.load.workload_params().sql
    if sql is None:
        return {}
    import hashlib

    return {"sql_file": {"path": sql.path, "sha256": hashlib.sha256(sql.text.encode()).hexdigest(),
                         "kept": sql.kept_as}}
