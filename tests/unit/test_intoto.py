"""The in-toto test-result statement: subjects are the run's files with their SHA-256, tests come from
junit.xml, configuration from run.json (digests of known bytes worked out with sha256sum)."""

from __future__ import annotations

import json
from pathlib import Path

from chaoskit.report.intoto import PREDICATE_TYPE, statement, write_statement
from chaoskit.report.manifest import verify, write_manifest
from chaoskit.report.rundir import STATEMENT

JUNIT = """<?xml version='1.0' encoding='utf-8'?>
<testsuite name="chaoskit.x" tests="3" failures="1">
<testcase classname="chaoskit.x" name="slo.rto_max" />
<testcase classname="chaoskit.x" name="check.split_brain" />
<testcase classname="chaoskit.x" name="slo.rpo_max_writes"><failure message="failed">lost 7</failure></testcase>
</testsuite>
"""


def run_dir(tmp_path: Path, junit: str = JUNIT) -> Path:
    d = tmp_path / "run"
    (d / "logs" / "pg1").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"playbook": {"path": "playbooks/a.yaml", "sha256": "ab" * 32},
                                            "inventory": {"path": "inv.yaml", "sha256": "cd" * 32}}))
    (d / "logs" / "pg1" / "patroni.log").write_text("abc")
    (d / "junit.xml").write_text(junit)
    return d


def test_statement_of_a_failed_drill(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    st = statement(d)
    assert st is not None and st["_type"] == "https://in-toto.io/Statement/v1" and st["predicateType"] == PREDICATE_TYPE
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    assert set(subjects) == {"run.json", "junit.xml", "logs/pg1/patroni.log"}
    # printf abc | sha256sum
    assert subjects["logs/pg1/patroni.log"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert st["predicate"] == {
        "result": "FAILED",
        "configuration": [{"name": "playbooks/a.yaml", "digest": {"sha256": "ab" * 32}},
                          {"name": "inv.yaml", "digest": {"sha256": "cd" * 32}}],
        "passedTests": ["slo.rto_max", "check.split_brain"], "warnedTests": [], "failedTests": ["slo.rpo_max_writes"]}


def test_all_passed_and_no_tests_at_all(tmp_path: Path) -> None:
    passed = JUNIT.replace('<failure message="failed">lost 7</failure>', "")
    assert statement(run_dir(tmp_path, passed))["predicate"]["result"] == "PASSED"  # type: ignore[index]
    empty = "<?xml version='1.0'?><testsuite name='x' tests='0' failures='0'></testsuite>"
    assert statement(run_dir(tmp_path / "b", empty))["predicate"]["result"] == "FAILED"  # type: ignore[index]


def test_the_statement_is_sealed_by_the_manifest(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    write_statement(d)
    write_manifest(d)
    assert STATEMENT in json.loads((d / "manifest.json").read_text())["files"]
    st = json.loads((d / STATEMENT).read_text())
    st["predicate"]["result"] = "PASSED"
    (d / STATEMENT).write_text(json.dumps(st))
    assert verify(d).problems == [f"{STATEMENT}: changed since the manifest (SHA-256 differs)"]


def test_no_statement_without_test_results(tmp_path: Path) -> None:
    d = tmp_path / "campaign"
    d.mkdir()
    assert write_statement(d) is None and not (d / STATEMENT).exists()
