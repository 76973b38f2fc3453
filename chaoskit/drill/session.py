"""A drill inside its run directory: the directory is created before any host is touched (an
unwritable `--out` is bad input), the drill writes its events into it as they happen, and it is
sealed last (in-toto statement, manifest, signature), also when preflight refused the drill (then
run.json says why and nothing else was started)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoskit.drill.runner import DrillParts, Progress, run_drill
from chaoskit.errors import ChaoskitError
from chaoskit.incomplete import Failures
from chaoskit.playbook.record import DrillInputs
from chaoskit.report.intoto import write_statement
from chaoskit.report.manifest import write_manifest
from chaoskit.report.rundir import RunDirectory
from chaoskit.report.writer import SCHEMA_VERSION, Outputs, write_incomplete, write_run


class SealError(ChaoskitError):
    """The manifest (or its signature) could not be written: the run directory is not evidence."""


@dataclass(frozen=True)
class SealedRun:
    """A drill's sealed run directory: run.json's content, where it is, whether the drill aborted,
    and why its evidence is incomplete (None: complete)."""

    evidence: dict[str, Any]
    path: Path
    aborted: bool
    incomplete: str | None = None


def drill_into(out_root: Path, inputs: DrillInputs, *, sign_key: Path | None = None,
               progress: Progress | None = None, parts: DrillParts = DrillParts(),
               outputs: Outputs = Outputs()) -> SealedRun:
    """One drill into a new run directory under `out_root`, sealed. A refusal (preflight, or any
    ChaoskitError before the load) leaves a sealed run.json that says why, and is raised. Anything
    else that fails, in the drill or in writing its evidence (an interrupt too), leaves a sealed run
    directory whose run.json says `incomplete` (`chaoskit.incomplete`). `outputs`: which derived
    files (the PDF, the plots) are written."""
    rd = RunDirectory.create(out_root, inputs.playbook.name, time.time())
    known = {"schema_version": SCHEMA_VERSION, "name": inputs.playbook.name,
             "playbook": {"path": inputs.playbook_path, "sha256": inputs.playbook_sha256},
             "started": rd.path.name}
    try:
        result = run_drill(inputs, out=rd, progress=progress, parts=parts)
    except ChaoskitError as exc:
        rd.write_json("run.json", {**known, "refused": str(exc)})
        rd.close()
        seal(rd.path, sign_key)
        raise
    except BaseException as exc:  # outside every scope of the drill (they record their own): said, sealed
        failures = Failures()
        failures.add("drill", exc)
        evidence = write_incomplete(rd.path, known, failures)
        rd.close()
        seal(rd.path, sign_key)
        return SealedRun(evidence, rd.path, True, evidence["incomplete"])
    try:
        evidence = write_run(result, rd, signed=sign_key is not None, outputs=outputs)
    except BaseException as exc:  # outside the writing's own stages (they record their own)
        result.record.failures.add("writing the run directory", exc)
        evidence = write_incomplete(rd.path, _read_or(rd.path, known), result.record.failures)
    rd.close()
    seal(rd.path, sign_key)
    return SealedRun(evidence, rd.path, bool(result.record.aborted), evidence.get("incomplete"))


def _read_or(run_dir: Path, known: dict[str, Any]) -> dict[str, Any]:
    """run.json as far as it was written, else what is known without it."""
    try:
        ev = json.loads((run_dir / "run.json").read_text())
        return ev if isinstance(ev, dict) else known
    except (OSError, ValueError):
        return known


def seal(run_dir: Path, sign_key: Path | None, resealed: dict[str, Any] | None = None) -> None:
    """The in-toto statement (where the run has test results), then manifest.json (and its
    signature) over everything the run wrote; `resealed` when a run that no longer verified was
    rendered again (`chaoskit report --reseal`)."""
    try:
        write_statement(run_dir)
        write_manifest(run_dir, sign_key, resealed=resealed)
    except (OSError, RuntimeError) as exc:
        raise SealError(f"manifest: {exc}") from None
