"""Evidence that states its own strength: a run directory sealed as a drill seals it (report,
junit, attestation, manifest) and the ways an edit could slip past a manifest alone: run.json
edited and the manifest rewritten to match, the events chain recomputed forward, the last event
line edited with only its manifest entry fixed. Each is named by verify from the records the
editor did not rewrite (attestation, report footer, the manifest's own chain record);
`chaoskit report` refuses an altered run unless told to re-seal it, and then says so; `history`
counts a copied run once and flags one that does not verify."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from chaoskit.drill.session import seal
from chaoskit.report.manifest import verify
from chaoskit.report.rundir import RunDirectory
from chaoskit.report.runs import history
from chaoskit.report.writer import render

EVENTS = 5


def sealed_run(root: Path, run_id: str = "r1", name: str = "drill") -> Path:
    rd = RunDirectory.create(root, name, 1_800_000_000.0)
    for i in range(EVENTS):
        rd.event({"event": "k", "t": float(i)})
    rd.close()
    rd.write_json("run.json", {
        "schema_version": 3, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
            "name": name, "description": "", "load": {"workload": "ledger", "workers": 1}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": "ops@host", "run_id": run_id, "started": 1_800_000_000.0,
        "ended": 1_800_000_060.0, "aborted": None, "ha": {}, "server": {}, "roles_before": [],
        "faults_injected": [], "actions": [],
        "results": {"verdict": True, "faults": [], "checks": {"rpo": {"valid": True}},
                    "slo": {"rto_max": {"target": 30.0, "measured": 10.04, "ok": True,
                                        "judges": "rto_all_clients_s"}}}})
    render(rd.path, signed=False)
    seal(rd.path, None)
    return rd.path


def edit_json(path: Path, change: dict) -> None:
    data = json.loads(path.read_text())
    data.update(change)
    path.write_text(json.dumps(data, indent=2))


def test_a_sealed_run_says_what_was_checked_and_that_it_is_unsigned(tmp_path: Path) -> None:
    d = sealed_run(tmp_path)
    v = verify(d)
    assert v.problems == [] and v.agree == ["the attestation", "the report"]
    head = v.ids["events_head"]
    lines = (d / "events.jsonl").read_text().splitlines()
    assert head == hashlib.sha256(lines[-1].encode()).hexdigest() and v.ids["events"] == EVENTS
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["evidence"] == {"run_json_sha256": hashlib.sha256((d / "run.json").read_bytes()).hexdigest(),
                                    "events": EVENTS, "events_head": head}
    statement = json.loads((d / "attestation.intoto.json").read_text())
    (events,) = [s for s in statement["subject"] if s["name"] == "events.jsonl"]
    assert events["annotations"] == {"chaoskit.events": EVENTS, "chaoskit.events_head": head}
    assert f'<meta name="chaoskit-events-head" content="{head}">' in (d / "report.html").read_text()
    files = len([p for p in d.rglob("*") if p.is_file()]) - 1  # all but manifest.json itself
    assert v.summary() == (
        f"intact: {files} files, events chain {EVENTS} events (head {head[:12]}), run.json sha256 "
        f"{manifest['evidence']['run_json_sha256'][:12]}; the attestation and the report name the same digests; "
        "NOT SIGNED: anyone with write access to this directory could change a file and seal it again")


def test_run_json_edited_and_the_manifest_rewritten_is_caught_by_the_other_records(tmp_path: Path) -> None:
    d = sealed_run(tmp_path)
    old = hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    edit_json(d / "run.json", {"operator": "someone else"})
    new = hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    from chaoskit.report.manifest import write_manifest

    write_manifest(d)  # the editor re-seals the manifest, not the attestation or the report
    assert verify(d).problems == [
        f"attestation.intoto.json: names run.json with sha256 {old[:12]}, the file is {new[:12]}",
        f"report.html: names run.json sha256 {old[:12]}, the file is {new[:12]}"]


def test_a_chain_recomputed_forward_is_not_the_chain_that_was_sealed(tmp_path: Path) -> None:
    d = sealed_run(tmp_path)
    sealed_head = verify(d).ids["events_head"]
    lines = (d / "events.jsonl").read_text().splitlines()
    prev = json.loads(lines[0])["prev"]
    rewritten = []
    for i, line in enumerate(lines):  # event 2 edited, every later link recomputed: the chain holds
        ev = json.loads(line)
        if i == 1:
            ev["t"] = 99.0
        ev["prev"] = prev
        text = json.dumps(ev, sort_keys=True)
        rewritten.append(text)
        prev = hashlib.sha256(text.encode()).hexdigest()
    (d / "events.jsonl").write_text("\n".join(rewritten) + "\n")
    from chaoskit.report.manifest import write_manifest

    write_manifest(d)
    problems = verify(d).problems
    assert not any("chain is broken" in p for p in problems)  # the chain itself holds: only the records tell
    assert f"report.html: names an events chain of {EVENTS} events (head {sealed_head[:12]}), events.jsonl holds " \
           f"{EVENTS} (head {prev[:12]}): not the chain that was sealed" in problems
    assert f"attestation.intoto.json: names the events chain head {sealed_head[:12]}, the chain's is {prev[:12]}" \
           in problems


def test_the_last_event_edited_with_only_its_manifest_entry_fixed(tmp_path: Path) -> None:
    d = sealed_run(tmp_path)
    sealed_head = verify(d).ids["events_head"]
    lines = (d / "events.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    last["t"] = 99.0
    lines[-1] = json.dumps(last, sort_keys=True)  # no line after it refers to it: the chain still holds
    (d / "events.jsonl").write_text("\n".join(lines) + "\n")
    manifest = json.loads((d / "manifest.json").read_text())
    data = (d / "events.jsonl").read_bytes()
    manifest["files"]["events.jsonl"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (d / "manifest.json").write_text(json.dumps(manifest))
    head = hashlib.sha256(lines[-1].encode()).hexdigest()
    assert f"manifest.json: names an events chain of {EVENTS} events (head {sealed_head[:12]}), events.jsonl " \
           f"holds {EVENTS} (head {head[:12]}): not the chain that was sealed" in verify(d).problems


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaoskit.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_report_refuses_an_altered_run_and_reseal_says_so(tmp_path: Path) -> None:
    d = sealed_run(tmp_path)
    old = hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    edit_json(d / "run.json", {"operator": "someone else"})
    new = hashlib.sha256((d / "run.json").read_bytes()).hexdigest()
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    res = cli("report", str(d))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{d}: run.json: changed since the manifest (SHA-256 differs)" in res.stderr
    assert "not re-rendered" in res.stderr
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == before  # nothing rewritten
    res = cli("report", str(d), "--reseal")
    assert res.returncode == 0 and "marked RE-SEALED" in res.stdout, res.stdout + res.stderr
    html = (d / "report.html").read_text()
    assert "RE-SEALED" in html and old in html and new in html
    (entry,) = json.loads((d / "manifest.json").read_text())["resealed"]
    assert (entry["sealed_run_json_sha256"], entry["run_json_sha256"]) == (old, new)
    assert entry["problems"][0] == "run.json: changed since the manifest (SHA-256 differs)"
    res = cli("verify", str(d))
    assert res.returncode == 0 and "RE-SEALED" in res.stdout and f"{old[:12]} -> {new[:12]}" in res.stdout
    # an intact run renders again without a mark
    e = sealed_run(tmp_path / "b")
    res = cli("report", str(e))
    assert res.returncode == 0 and "RE-SEALED" not in res.stdout and "RE-SEALED" not in (e / "report.html").read_text()


def test_the_sign_key_may_come_from_the_environment(tmp_path: Path) -> None:
    env = {**os.environ, "CHAOSKIT_SIGN_KEY": str(tmp_path / "no-such-key")}
    res = cli("run", "playbooks/pg-kill-primary.yaml", "-i", "inventories/lab.yaml", "--dry-run", env=env)
    assert res.returncode == 2 and res.stderr.strip() == f"error: {tmp_path / 'no-such-key'}: --sign-key: no such " \
                                                         "key file", res.stderr


def test_history_counts_a_copy_once_and_flags_a_run_that_does_not_verify(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    a = sealed_run(root, run_id="r1")
    shutil.copytree(a, root / (a.name + "-copy"))
    b = sealed_run(root / "x", run_id="r2")
    shutil.move(b, root / (b.name + "-2"))
    edit_json(root / (b.name + "-2") / "run.json", {"operator": "someone else"})
    data = history(root)
    (entry,) = data["playbooks"].values()
    assert [(r["run"], r["run_id"], r["copies"]) for r in entry["runs"]] == [
        (a.name, "r1", [a.name + "-copy"]), (b.name + "-2", "r2", [])]
    assert entry["runs"][0]["evidence"] == "intact"
    assert entry["runs"][1]["evidence"].startswith("ALTERED: run.json: changed since the manifest")
    assert entry["not_verified"] == [b.name + "-2"]


def test_history_verifies_every_copy_and_lists_an_altered_one(tmp_path: Path) -> None:
    """Issue 43: only the first directory of a run id was verified, so an altered copy was folded
    into the intact original ("not verified: none"). Now each is verified; the figures come from the
    directory that verifies, whichever sorts first."""
    root = tmp_path / "reports"
    a = sealed_run(root, run_id="r1")
    early = root / ("0-" + a.name)  # sorts before the original
    shutil.copytree(a, early)
    edit_json(early / "run.json", {"operator": "someone else"})
    late = root / (a.name + "-copy")
    shutil.copytree(a, late)
    data = history(root)
    (entry,) = data["playbooks"].values()
    (run,) = entry["runs"]
    assert run["run"] == a.name and run["evidence"] == "intact"
    assert run["copies"] == [early.name, late.name]
    assert run["copies_evidence"][late.name] == "intact"
    assert run["copies_evidence"][early.name].startswith("ALTERED: run.json: changed since the manifest")
    assert entry["not_verified"] == [early.name]


def test_junit_for_ci(tmp_path: Path) -> None:
    """The suite says when, how long and where; properties carry the run id, the report and the
    figures; case names are readable and a failure says value, comparator and unit."""
    import xml.etree.ElementTree as ET

    d = sealed_run(tmp_path)
    suite = ET.parse(d / "junit.xml").getroot()
    # started 1,800,000,000.0 = 2027-01-15T08:00:00 UTC, ended 60 s later
    assert (suite.get("timestamp"), suite.get("time")) == ("2027-01-15T08:00:00", "60.000") and suite.get("hostname")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"run_id": "r1", "report": "report.html", "verdict": "PASS", "rto_first_client_s": "",
                     "rto_all_clients_s": "", "lost_acknowledged": ""}
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == ["SLO all clients back <= 30.00 s", "check rpo"]
    assert "[report.html](report.html)" in (d / "summary.md").read_text()


def test_the_pdf_opens_with_the_headline_and_ends_with_the_sign_off(tmp_path: Path) -> None:
    """Page 1: the headline; every page: the running footer with the run id and page n / N; the
    glossary and methodology as an appendix, the sign-off on the last page."""
    import pypdfium2 as pdfium

    d = sealed_run(tmp_path)
    pdf = pdfium.PdfDocument(str(d / "report.pdf"))
    pages = [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]
    assert "what was done" in pages[0] and "verdict" in pages[0]
    assert all("run r1" in p and f"page {i + 1} / {len(pages)}" in p for i, p in enumerate(pages))
    assert any("Appendix B: methodology" in p for p in pages)
    assert "Sign-off" in pages[-1] and "independent reviewer" in pages[-1]
    assert not any("Sign-off" in p for p in pages[:-1])


def test_the_headline_is_in_the_first_screen(tmp_path: Path) -> None:
    """report.html laid out for a 1366 x 768 screen (screen media, as a browser shows it): the
    verdict and every headline row are on the first screen, before any other section."""
    import weasyprint
    from weasyprint.urls import URLFetcher

    d = sealed_run(tmp_path)
    screen = weasyprint.CSS(string="@page { size: 1366px 768px; margin: 0 }")
    doc = weasyprint.HTML(string=(d / "report.html").read_text(), media_type="screen",
                          url_fetcher=URLFetcher(allowed_protocols={"data"})).render(stylesheets=[screen])
    pdf = tmp_path / "screen.pdf"
    doc.write_pdf(str(pdf))
    import pypdfium2 as pdfium

    first = pdfium.PdfDocument(str(pdf))[0].get_textpage().get_text_range()
    for row in ("verdict", "environment", "what was done", "duration", "operator", "evidence"):  # no fault: no RTO
        assert row in first, row
    assert "NOT SIGNED" in first and first.index("NOT SIGNED") < first.index("What was done")
