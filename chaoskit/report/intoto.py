"""An in-toto test-result statement (`attestation.intoto.json`) beside junit.xml, for reviewers whose
tooling consumes attestations: the run's evidence files are its subjects (name + SHA-256), the
playbook and inventory its configuration, junit.xml's cases its passed and failed tests
(https://in-toto.io/attestation/test-result/v0.1). It is an unsigned Statement: the manifest lists
it, so `--sign-key` covers it too; wrap it in a DSSE envelope with in-toto's or Sigstore's tools if
a policy engine wants one."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from chaoskit.report.rundir import MANIFEST, SIGNATURE, STATEMENT, evidence_ids, sha256_of

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


def _tests(junit: Path) -> tuple[list[str], list[str]]:
    passed: list[str] = []
    failed: list[str] = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name") or "?"
        (failed if case.find("failure") is not None or case.find("error") is not None else passed).append(name)
    return passed, failed


def _configuration(run: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key in ("playbook", "inventory"):
        ref = run.get(key)
        if isinstance(ref, dict) and ref.get("path") and ref.get("sha256"):
            out.append({"name": str(ref["path"]), "digest": {"sha256": ref["sha256"]}})
    return out


def statement(run_dir: Path) -> dict[str, Any] | None:
    """The statement for a run directory that has a junit.xml (drills and experiments), else None."""
    junit = run_dir / "junit.xml"
    if not junit.exists():
        return None
    skip = {MANIFEST, SIGNATURE, STATEMENT}
    subjects: list[dict[str, Any]] = [
        {"name": p.relative_to(run_dir).as_posix(), "digest": {"sha256": sha256_of(p)}}
        for p in sorted(run_dir.rglob("*")) if p.is_file() and p.relative_to(run_dir).as_posix() not in skip]
    ids = evidence_ids(run_dir)
    for subject in subjects:  # the chain's head beside the file's digest (ResourceDescriptor annotations)
        if subject["name"] == "events.jsonl" and ids["events_head"]:
            subject["annotations"] = {"chaoskit.events": ids["events"], "chaoskit.events_head": ids["events_head"]}
    passed, failed = _tests(junit)
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
            "predicate": {"result": "FAILED" if failed or not passed else "PASSED",
                          "configuration": _configuration(run),
                          "passedTests": passed, "warnedTests": [], "failedTests": failed}}


def write_statement(run_dir: Path) -> dict[str, Any] | None:
    st = statement(run_dir)
    if st is not None:
        fd = os.open(run_dir / STATEMENT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(st, fh, indent=2)
    return st
