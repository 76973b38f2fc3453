"""Findings: what a drill found wrong, one entry per failed or undecided target, check, heal or
abort, with a severity and where the evidence is in run.json. Owner and due date are left for the
people who act on it (a DR test record needs both); the report shows them as blanks to fill."""

from __future__ import annotations

from typing import Any

from chaoskit.report.vocabulary import slo_sentence

# data loss, two writers, or a change left on a host outrank a slow recovery
SEVERITY = {"rpo": "high", "rpo_max_writes": "high", "split_brain": "high", "bank": "high", "heal": "high",
            "replica_convergence": "medium", "expected_outcome": "medium", "rto_max": "medium",
            "max_error_rate_after_recovery": "low"}


def findings(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    res = evidence.get("results") or {}
    out: list[dict[str, Any]] = []

    def add(key: str, what: str, where: str, severity: str | None = None) -> None:
        out.append({"id": f"F{len(out) + 1}", "severity": severity or SEVERITY.get(key, "medium"), "what": what,
                    "evidence": where, "owner": None, "due": None})

    for name, s in (res.get("slo") or {}).items():
        if s.get("ok") is not True:
            add(name, f"SLO not met: {slo_sentence(name, s)}", f"run.json results.slo.{name}")
    for name, c in (res.get("checks") or {}).items():
        valid = c.get("valid")
        if valid is not True:
            detail = c.get("text") or c.get("error") or ""
            add(name, f"check {name} {'failed' if valid is False else 'undecided'}" + (f": {detail}" if detail
                                                                                        else ""),
                f"run.json results.checks.{name}", None if valid is False else "medium")
    for item in (evidence.get("heal") or {}).get("not_verified") or []:
        add("heal", f"fault {item.get('id')} on {item.get('host')} not verified reverted: {item.get('error')}",
            "run.json heal.not_verified")
    if evidence.get("aborted"):
        add("aborted", f"the drill was aborted: {evidence['aborted']} (every fault healed)", "run.json aborted",
            "medium")
    return out
