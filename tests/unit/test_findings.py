"""Findings from a drill's evidence, and the audit fields from the playbook and the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chaoskit.playbook.models import Audit
from chaoskit.report.findings import findings


def test_each_failure_is_a_finding_with_severity_and_pointer() -> None:
    ev = {"results": {"slo": {"rto_max": {"target": 30.0, "measured": 41.2, "ok": False},
                              "rpo_max_writes": {"target": 0, "measured": 0, "ok": True}},
                      "checks": {"rpo": {"valid": True}, "split_brain": {"valid": False},
                                 "replica_convergence": {"valid": "unknown", "error": "pg3: timeout"}}},
          "heal": {"not_verified": [{"id": "abc", "host": "pg1", "error": "still in effect after its revert"}]},
          "aborted": None}
    assert findings(ev) == [
        {"id": "F1", "severity": "medium", "what": "SLO not met: all clients back 41.20 s > 30.00 s: FAIL (rto_max)",
         "evidence": "run.json results.slo.rto_max", "owner": None, "due": None},
        {"id": "F2", "severity": "high", "what": "check split_brain failed", "evidence":
         "run.json results.checks.split_brain", "owner": None, "due": None},
        {"id": "F3", "severity": "medium", "what": "check replica_convergence undecided: pg3: timeout",
         "evidence": "run.json results.checks.replica_convergence", "owner": None, "due": None},
        {"id": "F4", "severity": "high", "what": "fault abc on pg1 not verified reverted: still in effect after "
         "its revert", "evidence": "run.json heal.not_verified", "owner": None, "due": None}]
    assert findings({"results": {}, "aborted": "interrupted"})[0]["what"] == (
        "the drill was aborted: interrupted (every fault healed)")
    assert findings({"results": {"slo": {}, "checks": {"rpo": {"valid": True}}}}) == []


def test_audit_fields_in_the_playbook_and_their_validation() -> None:
    a = Audit.model_validate({"participants": ["DBA on call", "SRE"], "scope": "pg cluster of payments",
                              "change_ref": "CHG-1234", "objectives": ["RTO under 30 s"],
                              "independent_testers": True})
    assert a.participants == ("DBA on call", "SRE") and a.operator is None


def test_report_shows_scope_findings_and_sign_off(tmp_path: Path) -> None:
    import json

    from chaoskit.report.writer import render

    (tmp_path / "plots").mkdir()
    ev = {"schema_version": 2, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
        "name": "x", "description": "", "load": {"workload": "ledger", "workers": 1}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": "ops@host", "run_id": "r", "started": 0, "ended": 1, "aborted": None,
        "ha": {}, "server": {}, "roles_before": [], "faults_injected": [], "actions": [],
        "audit": {"operator": "ops@host", "participants": ["A. DBA", "B. SRE"], "scope": "payments pg",
                  "change_ref": "CHG-42", "objectives": ["RTO < 30 s"], "independent_testers": False},
        # a stale list, contradicting the results: the report shows the findings the results give
        "findings": [{"id": "F1", "severity": "low", "what": "nothing much", "evidence": "run.json x",
                      "owner": None, "due": None}],
        "results": {"verdict": False, "faults": [], "checks": {"rpo": {"valid": False, "text": "2 lost"}}, "slo": {}}}
    (tmp_path / "run.json").write_text(json.dumps(ev))
    render(tmp_path)
    html = (tmp_path / "report.html").read_text()
    for text in ("A. DBA, B. SRE", "CHG-42", "payments pg", "RTO &lt; 30 s", "check rpo failed: 2 lost",
                 "independent reviewer"):
        assert text in html, text
    assert "nothing much" not in html


def test_the_playbook_description_is_quoted_line_by_line_in_summary_md(tmp_path: Path) -> None:
    """A folded description ends in a newline, a literal one keeps several: summary.md quotes each
    line (no "\\n" shown for the end of a line, and a line cannot start a heading of its own);
    a control character inside a line is still shown escaped."""
    import json

    from chaoskit.report.writer import render

    (tmp_path / "plots").mkdir()
    ev = {"schema_version": 2, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
        "name": "x", "description": "Kills the primary.\n# not a heading\nbell \x07 here\n",
        "load": {"workload": "ledger", "workers": 1}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": "ops@host", "run_id": "r", "started": 0, "ended": 1, "aborted": None,
        "ha": {}, "server": {}, "roles_before": [], "faults_injected": [], "actions": [],
        "results": {"verdict": True, "faults": [], "checks": {}, "slo": {}}}
    (tmp_path / "run.json").write_text(json.dumps(ev))
    render(tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "> Kills the primary.\n> # not a heading\n> bell \\x07 here\n" in md, md
    assert "primary.\\n" not in md


def test_cli_audit_values_are_validated(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "run", "playbooks/pg-kill-primary.yaml", "-i",
                          "inventories/lab.yaml", "--dry-run", "--change-ref", "x\x1b[31m"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("error: command line: --change-ref: ")


def test_the_drill_summary_prints_host_text_as_text() -> None:
    """An HA manager's answer is data: MHA's "[error][/usr/share/perl5/MHA/ManagerUtil.pm, ln178]" once
    crashed the terminal summary as rich markup."""
    import io
    from pathlib import Path

    from rich.console import Console

    from chaoskit.report.summary import print_drill_summary

    buf = io.StringIO()
    answer = "[error][/usr/share/perl5/MHA/ManagerUtil.pm, ln178] Got ERROR"
    ev = {"preflight_warnings": ["[bold]not markup[/bold]"], "aborted": answer,
          "results": {"checks": {"expected_outcome": {"valid": False, "steps": [
              {"ok": False, "step": 0, "action": "switchover", "expected": "failover", "outcome": "none",
               "text": answer}]}}, "verdict": "aborted"}}
    print_drill_summary(Console(file=buf, width=400), ev, Path("/tmp/run"))
    text = buf.getvalue()
    assert answer in text and "[bold]not markup[/bold]" in text
