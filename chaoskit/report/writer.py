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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

import chaoskit
from chaoskit import hostmetrics
from chaoskit.errors import escaped
from chaoskit.guard import environment
from chaoskit.hostmetrics import HostSeries
from chaoskit.incomplete import ERROR_FILE, Failures
from chaoskit.playbook.record import DrillResult
from chaoskit.recorder import Recorder, step_values
from chaoskit.report import vocabulary
from chaoskit.report.findings import findings
from chaoskit.report.headline import headline
from chaoskit.report.legacy import CURRENT, upgrade
from chaoskit.report.narrative import log_quotes, narrative, phases_in_words, read_events
from chaoskit.report.observations import observations
from chaoskit.report.plots import latency_histogram, staleness_plot, timeline_plot
from chaoskit.report.rundir import RunDirectory, clean, evidence_ids
from chaoskit.topology.probe import ProbeLog
from chaoskit.workload.checks import LostWrites
from chaoskit.workload.outcomes import client_deadline

SCHEMA_VERSION = CURRENT  # 3: two RTOs (first client back, all clients back); see legacy.py
# what a browser may do with a report: show inline styles and embedded images, fetch nothing, run nothing
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


METHODOLOGY = Path(__file__).parents[1] / "docs" / "methodology.md"


@dataclass(frozen=True)
class Outputs:
    """Which of a drill's derived files are written (`chaoskit run --no-pdf --no-plots`). The
    evidence never depends on them: run.json, events, history, timeline and report.html are always
    written; report.pdf can be made later from run.json (`chaoskit report`), the plots only
    at the drill. run.json says what was left out and why (`not_written`)."""

    pdf: bool = True
    plots: bool = True

    def not_written(self) -> dict[str, str]:
        left = {"report.pdf": "--no-pdf"} if not self.pdf else {}
        return left | ({"plots": "--no-plots"} if not self.plots else {})


def write_run(result: DrillResult, rd: RunDirectory, signed: bool | None = None,
              outputs: Outputs = Outputs()) -> dict[str, Any]:
    """Everything of a finished drill into its run directory; returns run.json's content.
    The inventory is copied from an allow-list of its fields (secrets only as their references), the
    inputs are identified by the SHA-256 of the bytes that were actually loaded.

    Each file is a stage of its own: one that fails (a plot, the history, a template, the PDF, an
    interrupt) is recorded and the others are still written; run.json then says `incomplete` (what
    failed, where and why, with the drill's own failures first), the report says INCOMPLETE in its
    headline, and the tracebacks are in logs/chaoskit-error.txt."""
    run = result.record
    failures = run.failures
    evidence: dict[str, Any] = {}
    with failures.guard("run.json"):
        evidence = _evidence(result)
    if not evidence:  # what is known without the analysis' figures: enough to say what ran and why it stopped
        evidence = _known(result)
    evidence["incomplete"] = failures.summary()
    evidence["not_written"] = outputs.not_written()
    rd.write_json("run.json", evidence)
    with failures.guard("methodology.md"):
        rd.write_text("methodology.md", METHODOLOGY.read_text())  # the evidence carries its own definitions
    with failures.guard("history.jsonl.gz"):
        _history(result, rd)
    with failures.guard("list-append.edn"):
        _transactions(result, rd)
    with failures.guard("timeline"):
        _timeline(result, rd)
    if outputs.plots:
        with failures.guard("plots"):
            _drill_plots(result, rd)
    if failures.summary() != evidence["incomplete"]:
        evidence["incomplete"] = failures.summary()
        rd.write_json("run.json", evidence)
    failures.write(rd.path)
    evidence["incomplete"] = finish_rendering(rd.path, failures,
                                              lambda pdf: render(rd.path, signed=signed, pdf=pdf and outputs.pdf))
    for p in rd.path.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    return evidence


def finish_rendering(run_dir: Path, failures: Failures, render_with: Any) -> str | None:
    """Render the run's report files (`render_with(pdf)` returns the failures of its stages); when
    one failed, run.json is updated with it and the reports rendered again from that run.json (so
    they say INCOMPLETE and name its digest; the PDF again only if it was not what failed). The
    `incomplete` line as run.json has it."""
    found = render_with(True)
    if not found:
        return failures.summary()
    failures.lines += found.lines
    failures.tracebacks += found.tracebacks
    failures.write(run_dir)
    run_json = run_dir / "run.json"
    ev = json.loads(run_json.read_text())
    ev["incomplete"] = failures.summary()
    run_json.write_text(json.dumps(clean(ev), indent=2, default=str))
    pdf_failed = any(line.startswith("report.pdf") for line in found.lines)
    if pdf_failed:
        (run_dir / "report.pdf").unlink(missing_ok=True)
    render_with(not pdf_failed)  # its own failures were seen the first time
    return ev["incomplete"]


def write_in_stages(run_dir: Path, run: dict[str, Any], failures: Failures,
                    stages: list[tuple[str, Any]], report: Any, kind: str) -> dict[str, Any]:
    """An import's or an experiment's run directory, each file a stage: run.json, then `stages`
    ((name, writer) pairs: a table, the plots, junit.xml), then report.html from `report(run, ids)`.
    A stage that fails is recorded and the rest written; run.json then says `incomplete` and is
    written again before the report, which names its digest (a report template that fails leaves
    the plain INCOMPLETE report). Returns run.json's content."""
    def run_json() -> None:
        run["incomplete"] = failures.summary()
        (run_dir / "run.json").write_text(json.dumps(clean(run), indent=2, default=str))

    run_json()
    for name, write in stages:
        with failures.guard(name):
            write()
    seen = -1
    for _ in range(2):  # a second time only when the report itself failed: run.json says so first
        if seen == len(failures.lines):
            break
        seen = len(failures.lines)
        run_json()
        ids = evidence_ids(run_dir)
        html = None
        with failures.guard("report.html"):
            html = report(run, ids)
        if html is None:
            html = incomplete_html(run, ids, run.get("incomplete") or failures.summary(), kind)
        (run_dir / "report.html").write_text(html)
    failures.write(run_dir)
    for p in run_dir.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    return run


def write_incomplete(run_dir: Path, ev: dict[str, Any], failures: Failures, kind: str = "Drill") -> dict[str, Any]:
    """The last resort of a run whose writing itself failed outside its stages (an interrupt, a full
    disk): run.json with what is known and why it is incomplete, the tracebacks, and the plain
    INCOMPLETE report, each as far as it goes. Returns run.json's content."""
    ev = {**ev, "incomplete": failures.summary(ev.get("incomplete"))}
    with contextlib.suppress(Exception):
        (run_dir / "run.json").write_text(json.dumps(clean(ev), indent=2, default=str))
    failures.write(run_dir)
    with contextlib.suppress(Exception):
        (run_dir / "report.html").write_text(incomplete_html(ev, evidence_ids(run_dir), ev["incomplete"], kind))
    for p in run_dir.rglob("*"):
        with contextlib.suppress(OSError):
            p.chmod(0o700 if p.is_dir() else 0o600)
    return ev


def _known(result: DrillResult) -> dict[str, Any]:
    """run.json's fields that need nothing but the record (when building the full evidence failed)."""
    inputs, run = result.inputs, result.record
    return clean({"schema_version": SCHEMA_VERSION,
                  "tool": {"name": "chaoskit", "version": chaoskit.__version__, "python": platform.python_version()},
                  "playbook": {"path": inputs.playbook_path, "sha256": inputs.playbook_sha256,
                               "content": inputs.playbook.model_dump(mode="json", by_alias=True)},
                  "inventory": {"path": inputs.inventory_path, "sha256": inputs.inventory.sha256},
                  "operator": inputs.operator, "run_id": run.run_id, "started": run.started, "ended": run.ended,
                  "t0_load_start": run.t0, "aborted": run.aborted, "refused": run.refused,
                  "cluster": {"name": inputs.playbook.cluster},
                  "faults_injected": [f.to_dict() for f in run.faults], "actions": run.actions, "heal": run.heal,
                  "results": {}})


def _evidence(result: DrillResult) -> dict[str, Any]:
    inputs, run, rec = result.inputs, result.record, result.recorder
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
        "abort_rule": run.abort_rule,
        "results": result.results,
    }
    if run.archive:  # the primary's archiving, read once a second (chaoskit.backup.watch)
        evidence["archive_samples"] = run.archive
    if rec is not None and rec.late_batches:
        evidence["load"]["late_batches"] = rec.late_batches
    if rec is not None and rec.undelivered_why:  # results that never reached the controller (RPO: unknown)
        evidence["load"]["undelivered"] = rec.undelivered_why
    evidence["audit"] = {**inputs.evidence.model_dump(mode="json"), "operator": inputs.operator}
    evidence["findings"] = findings(evidence)
    return clean(evidence)


def _history(result: DrillResult, rd: RunDirectory) -> None:
    rec, run = result.recorder, result.record
    if rec is None or not rec.history.windows:
        return
    present = result.truth.get(LostWrites.reads, {}).get("rows")
    # gzip: the ops of a 40 s drill are ~64 MB of JSON lines, ~4 MB compressed (zcat, pandas read it)
    with gzip.open(rd.file("history.jsonl.gz"), "wt", compresslevel=6) as out:
        rec.history.write(out, run_id=run.run_id, faults=result.results.get("faults", []), present=present,
                          groups={n: g["workers"] for n, g in run.groups.items()},
                          stall_s=client_deadline(result.inputs.playbook.load.op_timeout))


def _transactions(result: DrillResult, rd: RunDirectory) -> None:
    """A list-append run's transactions and its final read, in Jepsen's EDN (for elle-cli)."""
    from chaoskit.elle.edn import to_edn
    from chaoskit.workload.kinds.list_append import Anomalies, history_of

    rec, truth = result.recorder, result.truth.get(Anomalies.reads)
    if rec is None or not rec.txns.count or not truth or "lists" not in truth:
        return
    rd.write_text("list-append.edn", to_edn(history_of(rec, truth)))


def _timeline(result: DrillResult, rd: RunDirectory) -> None:
    rec, run, probe = result.recorder, result.record, result.probe
    if rec is None or probe is None:
        return
    ends = [t + rec.interval for t in rec.to_frame()["t"]]
    rec.write_timeline_csv(str(rd.file("timeline.csv")), t0=run.t0,
                           extra={**_node_columns(probe, ends), **hostmetrics.columns(run.host_metrics, ends)})
    with contextlib.suppress(ImportError, ValueError):  # parquet where an engine is installed
        rec.to_frame().to_parquet(rd.file("timeline.parquet"))


def _drill_plots(result: DrillResult, rd: RunDirectory) -> None:
    rec, run, probe = result.recorder, result.record, result.probe
    if rec is None or probe is None:
        return
    _plots(rec, run.t0, result.results.get("faults", []), result.inputs.playbook.name, rd.path, probe,
           run.host_metrics)
    if "stale_reads" in (result.results.get("checks") or {}):
        from chaoskit.workload.kinds.stale_reads import judge_reads

        group_of = {w: name for name, g in run.groups.items() for w in g["workers"]}
        worst: dict[tuple[str, int], float] = {}  # the stalest read of each group in each 100 ms

        def seen(worker: int, t: float, _writes: int, behind: float) -> None:
            key = (group_of.get(worker, str(worker)), int(t * 10))
            worst[key] = max(worst.get(key, 0.0), behind)

        judge_reads(rec.txns, None, None, set(rec.ledger_undelivered().workers()), on_read=seen)
        staleness_plot([(g, tenth / 10, behind) for (g, tenth), behind in sorted(worst.items())],
                       result.results.get("faults", []), run.t0, rd.path / "plots" / "staleness.png")


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
    cpu = {h: [(t, busy) for t, v in s.samples if (busy := v.get("cpu_busy_pct")) is not None]
           for h, s in sorted((host_metrics or {}).items())}
    timeline_plot(rec.to_frame(), t0, faults, run_dir / "plots" / "timeline.png",
                  f"{name}: throughput, errors, latency and roles", roles=roles, lag=lag,
                  cpu={h: pts for h, pts in cpu.items() if pts})
    hist = rec.latency_hist()
    values = [(it.value_iterated_to / 1000, it.count_at_value_iterated_to) for it in hist.get_recorded_iterator()]
    latency_histogram(values, run_dir / "plots" / "latency_histogram.png")


def render(run_dir: Path, resealed: dict[str, Any] | None = None, signed: bool | None = None,
           pdf: bool = True) -> Failures:
    """report.html, summary.md, junit.xml and report.pdf from run.json (also used by `chaoskit
    report`). The report names run.json's digest and the events chain's head it was rendered from
    (verify checks them); `resealed` says, on the report, that it was re-rendered from a run that no
    longer verified, and what had changed. `signed`: whether the seal that follows signs (shown in
    the headline; None: not known).

    Each file is a stage: the failures are returned, never raised. A report template that fails
    leaves a plain report that says INCOMPLETE and why (`incomplete.html.j2`); junit.xml is written
    before the PDF, so a PDF that fails takes nothing else with it."""
    failures = Failures()
    ids = evidence_ids(run_dir)
    ev = upgrade(json.loads((run_dir / "run.json").read_text()))
    head: list[tuple[str, str]] = headline(ev, signed)
    html: str | None = None
    with failures.guard("report.html"):
        ev["findings"] = findings(ev)  # from the results as they read now, never a stale list
        ev["observations"] = observations(ev)
        story = {"events": narrative(read_events(run_dir), ev), "phases": phases_in_words(ev),
                 "logs": log_quotes(ev)}
        images = {}
        for png in sorted((run_dir / "plots").glob("*.png")):
            images[png.stem] = base64.b64encode(png.read_bytes()).decode()
        html = _header_rows(template_env().get_template("report.html.j2").render(
            ev=ev, images=images, csp=CSP, ids=ids, resealed=resealed, head=head, story=story, signed=signed,
            glossary=vocabulary.GLOSSARY, methodology=_methodology_html(run_dir)))
    (run_dir / "report.html").write_text(html if html is not None else
                                         incomplete_html(ev, ids, failures.summary(ev.get("incomplete"))))
    with failures.guard("summary.md"):
        (run_dir / "summary.md").write_text(markdown_env().get_template("summary.md.j2").render(ev=ev, head=head))
    with failures.guard("junit.xml"):
        _junit(ev, run_dir / "junit.xml")
    if pdf:
        with failures.guard("report.pdf"):
            write_pdf(run_dir / "report.html", run_dir / "report.pdf")
    return failures


def incomplete_html(ev: dict[str, Any], ids: dict[str, Any], why: str | None, kind: str = "Drill") -> str:
    """A plain report for a run whose own report could not be rendered: INCOMPLETE, why, what run.json
    knows of the run, and the digests it was rendered from (verify checks them)."""
    name = str(((ev.get("playbook") or {}).get("content") or {}).get("name") or ev.get("name") or "run")
    facts = [("started", _ts(ev.get("started"))), ("ended", _ts(ev.get("ended"))),
             ("run id", str(ev.get("run_id") or "—")), ("aborted", str(ev.get("aborted") or "no")),
             ("faults", "; ".join(f"{f.get('kind')} on {f.get('host')} at {_ts(f.get('t_effect'))}, reverted "
                                  f"{_ts(f.get('t_reverted'))}" for f in ev.get("faults_injected") or []) or "none"),
             ("verdict of the checks", vocabulary.verdict_word((ev.get("results") or {}).get("verdict")))]
    return template_env().get_template("incomplete.html.j2").render(
        kind=kind, name=name, why=why or "the report could not be rendered", facts=facts, ids=ids, csp=CSP,
        error_file=ERROR_FILE)


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
    # `x is given`: recorded and not null (`is not none` holds for a key the record lacks, which then
    # fails in a format: a run.json from another stage or an older chaoskit must still render)
    env.tests["given"] = lambda v: v is not None and not isinstance(v, jinja2.Undefined)
    env.globals.update(label=vocabulary.label, shown=vocabulary.shown, slo_figure=vocabulary.slo_figure,
                       verdict_word=vocabulary.verdict_word, check_sentence=vocabulary.check_sentence,
                       check_rows=vocabulary.check_rows, restore_lines=vocabulary.restore_lines,
                       archive_line=vocabulary.archive_line)


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
    if t is None or _missing(t):
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
                               "verdict": "INCOMPLETE" if ev.get("incomplete") else
                               vocabulary.verdict_word(res.get("verdict"))}
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
    if ev.get("incomplete"):
        cases.append(("evidence complete", False, ev["incomplete"]))
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
