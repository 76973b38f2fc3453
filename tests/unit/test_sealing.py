"""A drill always seals what it saw: whatever fails after the run directory exists (the analysis, a
report template, the PDF, an interrupt while writing), the directory gets run.json with
`incomplete`, events.jsonl, the report saying INCOMPLETE, the traceback in logs/chaoskit-error.txt,
and a manifest `chaoskit verify` accepts; the command exits 3 with one line on stderr. Drills here
are the shipped-fakes drills of test_run_drill (4 s of real time each)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_run_drill import Lab, playbook
from typer.testing import CliRunner

from chaoskit.drill.session import drill_into
from chaoskit.incomplete import ERROR_FILE, Failures, one_line
from chaoskit.playbook.record import DrillInputs
from chaoskit.recorder import COLUMNS, OK, SEQUENCE, Recorder
from chaoskit.report.manifest import verify


def sealed(tmp_path: Path, lab: Lab) -> Any:
    inputs = DrillInputs(playbook(), lab.inv, "pb.yaml", "inv.yaml")
    return drill_into(tmp_path / "runs", inputs, parts=lab.parts())


def assert_sealed_incomplete(run: Any, stage: str) -> dict[str, Any]:
    """The run directory is whole and verifiable, and says why it is incomplete: `stage` first."""
    ev = json.loads((run.path / "run.json").read_text())
    assert run.incomplete and run.incomplete == ev["incomplete"] and ev["incomplete"].startswith(stage)
    html = (run.path / "report.html").read_text()
    assert "INCOMPLETE" in html and ev["incomplete"].split(":")[0] in html
    assert (run.path / "events.jsonl").exists() and (run.path / "manifest.json").exists()
    assert "Traceback" in (run.path / ERROR_FILE).read_text()
    checked = verify(run.path)
    assert checked.problems == []
    assert any("INCOMPLETE" in n for n in checked.notes) and "INCOMPLETE" in checked.summary()
    return ev


def test_an_analysis_that_raises_leaves_a_sealed_incomplete_run(tmp_path: Path) -> None:
    lab = Lab(tmp_path)

    def truth(*args: Any) -> dict[str, Any]:
        raise RuntimeError("the writer did not answer")

    lab.truth = truth  # type: ignore[method-assign]
    run = sealed(tmp_path, lab)
    ev = assert_sealed_incomplete(run, "analysis: RuntimeError: the writer did not answer")
    # what the drill saw is all there: the fault, its heal, the load's totals, the timeline
    assert [f["kind"] for f in ev["faults_injected"]] == ["pause"] and ev["heal"]["reverted"]
    assert ev["load"]["totals"]["ok"] > 0 and (run.path / "timeline.csv").exists()
    assert ev["results"] == {} and (run.path / "junit.xml").exists() and (run.path / "report.pdf").exists()
    events = [json.loads(line)["kind"] for line in (run.path / "events.jsonl").read_text().splitlines()]
    assert "incomplete" in events and "fault_reverted" in events


def test_a_report_template_that_raises_leaves_the_plain_incomplete_report(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ev: dict[str, Any]) -> list[str]:
        raise KeyError("dip_depth")

    monkeypatch.setattr("chaoskit.report.writer.observations", broken)
    run = sealed(tmp_path, Lab(tmp_path))
    ev = assert_sealed_incomplete(run, "report.html: KeyError: 'dip_depth'")
    # the figures were computed and kept: only their page could not be made
    assert ev["results"]["verdict"] is True
    assert "chaoskit/report/writer.py" in ev["incomplete"]  # where, in chaoskit's own code


def test_a_pdf_that_fails_takes_nothing_else_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pango(html: Path, pdf: Path) -> None:
        pdf.write_bytes(b"%PDF-1.7 half")  # a half-written file is removed, not sealed as the report
        raise OSError("cannot load library 'libpango-1.0-0'")

    monkeypatch.setattr("chaoskit.report.writer.write_pdf", no_pango)
    run = sealed(tmp_path, Lab(tmp_path))
    ev = assert_sealed_incomplete(run, "report.pdf: OSError: cannot load library 'libpango-1.0-0'")
    assert not (run.path / "report.pdf").exists()
    assert (run.path / "junit.xml").exists() and (run.path / "summary.md").exists()
    assert "INCOMPLETE" in (run.path / "summary.md").read_text()
    assert ev["results"]["verdict"] is True


def test_an_interrupt_while_writing_still_seals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("chaoskit.report.writer._plots", interrupted)
    run = sealed(tmp_path, Lab(tmp_path))
    assert_sealed_incomplete(run, "plots: interrupted (Ctrl-C or SIGTERM)")


def test_an_error_escaping_the_drill_after_its_start_is_incomplete_not_a_traceback(tmp_path: Path) -> None:
    """A teardown that raises (the end-of-load read of issue 43's traceback) ends the drill's scopes
    as any error does, and the run is still analysed and sealed."""
    lab = Lab(tmp_path)
    real = lab.load

    def load(*args: Any, **kwargs: Any) -> Any:
        runner = real(*args, **kwargs)
        stop = runner.stop

        def failing_stop() -> None:
            stop()
            raise RuntimeError("dictionary changed size during iteration")

        runner.stop = failing_stop
        return runner

    lab.load = load  # type: ignore[method-assign]
    run = sealed(tmp_path, lab)
    ev = assert_sealed_incomplete(run, "drill: RuntimeError: dictionary changed size during iteration")
    assert ev["heal"]["reverted"] and "load.stop" in lab.log and lab.pool_closed


def test_the_cli_says_one_line_and_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit import cli

    lab = Lab(tmp_path)

    def truth(*args: Any) -> dict[str, Any]:
        raise ValueError("bad\x1b[2J row")

    lab.truth = truth  # type: ignore[method-assign]
    inv = tmp_path / "inv.yaml"
    pb = tmp_path / "pb.yaml"
    pb.write_text(json.dumps(playbook().model_dump(mode="json", by_alias=True)))
    real = drill_into
    monkeypatch.setattr("chaoskit.drill.session.drill_into",
                        lambda root, inputs, **kw: real(root, inputs, progress=kw.get("progress"), parts=lab.parts()))
    res = CliRunner().invoke(cli.app, ["run", str(pb), "-i", str(inv), "--out", str(tmp_path / "runs")])
    assert res.exit_code == 3, res.output
    said = [line for line in res.output.splitlines() if line.startswith("incomplete:")]
    assert len(said) == 1 and "analysis: ValueError: bad\\x1b[2J row" in said[0]
    assert "Traceback" not in res.output
    [run_dir] = (tmp_path / "runs").iterdir()
    assert verify(run_dir).problems == []


def test_one_line_names_the_stage_the_error_and_where() -> None:
    try:
        Recorder(0.0).row(7)
    except KeyError as exc:
        line = one_line("analysis", exc)
    assert line.startswith("analysis: KeyError: 7 (chaoskit/recorder.py:") and line.endswith(" in _row)")
    failures = Failures()
    with failures.guard("plots"):
        raise ValueError("one\ntwo")
    assert failures.summary("drill: X") == "drill: X; plots: ValueError: one (" + failures.lines[0].split(" (")[1]


def test_the_recorder_is_read_while_another_thread_merges() -> None:
    """Issue 43's traceback: totals() read while the collector merged. Every reader, many times,
    against a merging thread: no error, and the totals at the end are exactly what was merged."""
    base = time.time()
    parent = Recorder(base, keep_ops=True)
    batches = []
    for b in range(300):
        child = Recorder(base, keep_ops=True)
        for i in range(40):
            t = base + b * 0.05 + i * 0.001
            child.record(b % 7, "write", t - 0.002, t, OK, key=b * 40 + i + 1, keyed=SEQUENCE)
            if i % 13 == 0:
                child.record(b % 7, "write", t - 0.002, t, "fail", "connection_lost", "lost")
        batches.append(child.drain(base + b * 0.05 + 0.3))
    errors: list[BaseException] = []
    done = threading.Event()

    def merge() -> None:
        try:
            for i, batch in enumerate(batches):
                parent.merge(batch)
                parent.close_before(parent.index(base + i * 0.05))
                parent.keep_around(base + i * 0.05)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def read() -> None:
        try:
            while not done.is_set():
                parent.totals()
                parent.window(base, base + 20)
                parent.to_frame()
                parent.latency_hist()
                parent.closed_until()
                list(parent.ledger_keys(OK))
                parent.ledger_acknowledged()
                len(parent.rows)
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    writer = threading.Thread(target=merge)
    for t in (*readers, writer):
        t.start()
    for t in (writer, *readers):
        t.join(60)
    assert errors == []
    parent.finish()
    totals = parent.totals()
    assert totals["write_ok"] == 300 * 40 and totals["fail"] == 300 * 4
    assert sum(totals[c] for c in COLUMNS if c.startswith("err_")) == 300 * 4
    # sealed: a batch after finish() is counted and left out
    parent.merge(batches[0])
    assert parent.late_batches == 1 and parent.totals() == totals


def test_a_drill_asked_for_no_pdf_and_no_plots_writes_everything_else_and_says_so(tmp_path: Path) -> None:
    """`chaoskit run --no-pdf --no-plots`: no report.pdf, no plots, nothing incomplete; run.json and
    the report say what was left out and how to make the PDF; the run verifies; `chaoskit report`
    then makes the PDF from run.json."""
    from chaoskit.cli import app
    from chaoskit.report.writer import Outputs

    lab = Lab(tmp_path)
    inputs = DrillInputs(playbook(), lab.inv, "pb.yaml", "inv.yaml")
    run = drill_into(tmp_path / "runs", inputs, parts=lab.parts(), outputs=Outputs(pdf=False, plots=False))
    ev = json.loads((run.path / "run.json").read_text())
    assert run.incomplete is None and ev["incomplete"] is None
    assert ev["not_written"] == {"report.pdf": "--no-pdf", "plots": "--no-plots"}
    assert not (run.path / "report.pdf").exists() and not list(run.path.glob("plots/*"))
    for name in ("report.html", "summary.md", "junit.xml", "history.jsonl.gz", "timeline.csv", "events.jsonl"):
        assert (run.path / name).exists(), name
    html = (run.path / "report.html").read_text()
    assert "report.pdf (--no-pdf), plots (--no-plots)" in html and "<img" not in html
    assert verify(run.path).problems == []
    res = CliRunner().invoke(app, ["report", str(run.path)])
    assert res.exit_code == 0, res.output
    assert (run.path / "report.pdf").stat().st_size > 0 and verify(run.path).problems == []


def test_a_drill_writes_its_pdf_and_plots_unless_asked_not_to(tmp_path: Path) -> None:
    run = sealed(tmp_path, Lab(tmp_path))
    ev = json.loads((run.path / "run.json").read_text())
    assert ev["not_written"] == {} and (run.path / "report.pdf").exists()
    assert {p.name for p in run.path.glob("plots/*.png")} == {"timeline.png", "latency_histogram.png"}
    assert "Not written at the drill" not in (run.path / "report.html").read_text()
