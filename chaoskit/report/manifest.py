"""A run directory an auditor can check: `manifest.json` holds the SHA-256 and size of every file
the run wrote, run.json's digest and the events chain's length and head; optionally it is signed
with an SSH key (`ssh-keygen -Y sign`, namespace `chaoskit`), and `chaoskit verify` checks the
files, the events' hash chain against its recorded head, the in-toto statement's subjects and the
report's footer against the files, and the signature.

Verification names what is wrong: a file changed, missing or added since the manifest, a broken
chain or one that is not the chain sealed, a statement or report naming other digests, a missing
or bad signature (when allowed signers are given, a signature is required). It also says how far
an intact result can be trusted: without a signature anyone with write access to the directory
could have changed a file and sealed it again. ssh-keygen is run with an argument list (no shell);
key and signer paths are the user's own files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoskit.report.rundir import MANIFEST, SIGNATURE, STATEMENT, evidence_ids, sha256_of, verify_chain

FORMAT = "chaoskit-manifest/1"
NAMESPACE = "chaoskit"
_NOT_LISTED = {MANIFEST, SIGNATURE}


def _files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and p.relative_to(run_dir).as_posix() not in
                  _NOT_LISTED)


def write_manifest(run_dir: Path, sign_key: Path | None = None, resealed: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """Hash every file of the run directory into manifest.json, with run.json's digest and the
    events chain's head; sign it when a key is given. `resealed`: this seal follows a re-render of
    a run that no longer verified (what changed is kept, with every earlier re-seal)."""
    files = {p.relative_to(run_dir).as_posix(): {"sha256": sha256_of(p), "bytes": p.stat().st_size}
             for p in _files(run_dir)}
    path = run_dir / MANIFEST
    history: list[dict[str, Any]] = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        history = list(json.loads(path.read_text()).get("resealed") or [])
    if resealed is not None:
        history.append(resealed)
    manifest = {"format": FORMAT, "created": time.time(), "files": files, "evidence": evidence_ids(run_dir)}
    if history:
        manifest["resealed"] = history
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=True)
    sig = run_dir / SIGNATURE
    if sig.exists():
        sig.unlink()  # a signature of an earlier manifest signs nothing now
    if sign_key is not None:
        res = subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(sign_key), "-n", NAMESPACE, str(path)],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        if res.returncode != 0 or not sig.exists():
            raise RuntimeError(f"signing {path} with {sign_key} failed: {(res.stderr or res.stdout).strip()[-300:]}")
        sig.chmod(0o600)
    return manifest


@dataclass
class Verification:
    """What `verify` checked and found: `problems` (empty: intact), what was counted and
    cross-checked, and how strongly the result holds (`signature`: verified, present but not
    checked, or absent)."""

    problems: list[str] = field(default_factory=list)
    signer: str | None = None
    files: int = 0
    ids: dict[str, Any] = field(default_factory=dict)
    agree: list[str] = field(default_factory=list)  # the records that name the same digests
    notes: list[str] = field(default_factory=list)
    signature: str = "absent"
    resealed: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        """"intact: 18 files, events chain 29 events (head ab12cd34ef56), ...; NOT SIGNED: ..."."""
        parts = [f"{self.files} files"]
        if self.ids.get("events") is not None:
            parts.append(f"events chain {self.ids['events']} events (head {self.ids['events_head'][:12]})")
        if self.ids.get("run_json_sha256"):
            parts.append(f"run.json sha256 {self.ids['run_json_sha256'][:12]}")
        text = "intact: " + ", ".join(parts)
        if self.agree:
            text += f"; {' and '.join(self.agree)} name the same digests"
        for r in self.resealed:
            text += (f"; RE-SEALED {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(r.get('at') or 0))} by "
                     f"{r.get('by')}: run.json sha256 {str(r.get('sealed_run_json_sha256'))[:12]} -> "
                     f"{str(r.get('run_json_sha256'))[:12]}")
        text += "".join(f"; {n}" for n in self.notes)
        if self.signature == "verified":
            return text + f"; signed by {self.signer}"
        if self.signature == "present":
            return text + "; signature present, NOT CHECKED (give --allowed-signers to check it)"
        return text + "; NOT SIGNED: anyone with write access to this directory could change a file and seal it again"


_META = re.compile(r'<meta name="chaoskit-(run-json-sha256|events-head|events)" content="([0-9a-f]+)">')


def verify(run_dir: Path, allowed_signers: Path | None = None) -> Verification:
    """Everything a run directory's records say about its files, checked against the files: an
    empty `problems` when the directory is exactly what the run sealed (and, with allowed
    signers, signed by one of them)."""
    v = Verification()
    missing: set[str] = set()
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        listed: dict[str, dict[str, Any]] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        v.problems.append(f"{MANIFEST}: missing or unreadable ({exc})")
        return v
    malformed = "files is not a mapping" if not isinstance(listed, dict) else next(
        (f"files[{name!r}] is not {{sha256, bytes}}" for name, entry in listed.items()
         if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                 and isinstance(entry.get("bytes"), int))), None)
    if malformed:  # edited by hand: nothing it says can be trusted
        v.problems.append(f"{MANIFEST}: not as chaoskit writes it ({malformed})")
        return v
    present = {p.relative_to(run_dir).as_posix(): p for p in _files(run_dir)}
    v.files = len(present)
    actual: dict[str, str] = {}
    for name, entry in sorted(listed.items()):
        p = present.get(name)
        if p is None:
            v.problems.append(f"{name}: missing (listed in the manifest)")
            missing.add(name)
            continue
        actual[name] = sha256_of(p)
        if p.stat().st_size != entry.get("bytes") or actual[name] != entry.get("sha256"):
            v.problems.append(f"{name}: changed since the manifest (SHA-256 differs)")
    for name in sorted(set(present) - set(listed)):
        v.problems.append(f"{name}: not in the manifest (added afterwards)")
    events = run_dir / "events.jsonl"
    if events.exists() and "events.jsonl" in listed:
        broken = verify_chain(events.read_text().splitlines())
        if broken:
            v.problems.append(broken)
    v.ids = evidence_ids(run_dir)
    incomplete = _incomplete(run_dir / "run.json")
    if incomplete:  # intact, and the run says itself that it is not the whole of it
        v.notes.append(f"INCOMPLETE run (as sealed): {incomplete}")
    sealed = manifest.get("evidence")
    if isinstance(sealed, dict):
        _same(v, MANIFEST, sealed, v.ids, missing)
    else:
        v.notes.append("sealed by an earlier chaoskit: no chain head or run.json digest recorded in the manifest")
    _statement_agrees(v, run_dir / STATEMENT, run_dir, actual)
    _report_agrees(v, run_dir / "report.html", missing)
    v.resealed = [r for r in manifest.get("resealed") or [] if isinstance(r, dict)]
    if allowed_signers is not None:
        v.signer, why = _check_signature(path, run_dir / SIGNATURE, allowed_signers)
        if why:
            v.problems.append(why)
        else:
            v.signature = "verified"
    elif (run_dir / SIGNATURE).exists():
        v.signature = "present"
    return v


def _incomplete(run_json: Path) -> str | None:
    """run.json's own `incomplete` line (None: complete, or not readable: checked elsewhere)."""
    try:
        ev = json.loads(run_json.read_text())
    except (OSError, ValueError):
        return None
    return str(ev["incomplete"]) if isinstance(ev, dict) and ev.get("incomplete") else None


def _same(v: Verification, where: str, recorded: dict[str, Any], ids: dict[str, Any], missing: set[str]) -> None:
    """A record of run.json's digest and the chain's head (manifest, report) against the files (a
    file already reported missing is not reported again)."""
    if "run.json" not in missing and recorded.get("run_json_sha256") != ids.get("run_json_sha256"):
        v.problems.append(f"{where}: names run.json sha256 {str(recorded.get('run_json_sha256'))[:12]}, the file is "
                          f"{str(ids.get('run_json_sha256'))[:12]}")
    if "events.jsonl" not in missing and \
            (recorded.get("events"), recorded.get("events_head")) != (ids.get("events"), ids.get("events_head")):
        v.problems.append(f"{where}: names an events chain of {recorded.get('events')} events (head "
                          f"{str(recorded.get('events_head'))[:12]}), events.jsonl holds {ids.get('events')} "
                          f"(head {str(ids.get('events_head'))[:12]}): not the chain that was sealed")


def _statement_agrees(v: Verification, statement: Path, run_dir: Path, actual: dict[str, str]) -> None:
    """Every subject of the in-toto statement is the file as it is now (and events.jsonl's
    recorded chain head is the chain's)."""
    if not statement.exists():
        return
    try:
        subjects = json.loads(statement.read_text())["subject"]
    except (OSError, ValueError, KeyError, TypeError):
        v.problems.append(f"{statement.name}: unreadable")
        return
    before = len(v.problems)
    for subject in subjects:
        name = str(subject.get("name"))
        digest = (subject.get("digest") or {}).get("sha256")
        p = run_dir / name
        now = actual.get(name) or (sha256_of(p) if p.is_file() and p.resolve().is_relative_to(run_dir.resolve())
                                   else None)
        if now is None:
            v.problems.append(f"{statement.name}: names {name}, which is not here")
        elif digest != now:
            v.problems.append(f"{statement.name}: names {name} with sha256 {str(digest)[:12]}, the file is {now[:12]}")
        head = (subject.get("annotations") or {}).get("chaoskit.events_head")
        if name == "events.jsonl" and head is not None and head != v.ids.get("events_head"):
            v.problems.append(f"{statement.name}: names the events chain head {str(head)[:12]}, the chain's is "
                              f"{str(v.ids.get('events_head'))[:12]}")
    if len(v.problems) == before:
        v.agree.append("the attestation")


def _report_agrees(v: Verification, report: Path, missing: set[str]) -> None:
    """The report's footer names run.json's digest and the chain head it was rendered from."""
    if not report.exists():
        return
    found = dict(_META.findall(report.read_text(errors="replace")))
    if not found:
        v.notes.append("report.html rendered by an earlier chaoskit: its footer names no digests")
        return
    recorded = {"run_json_sha256": found.get("run-json-sha256"), "events_head": found.get("events-head"),
                "events": int(found["events"]) if found.get("events") else None}
    before = len(v.problems)
    _same(v, "report.html", recorded, v.ids, missing)
    if len(v.problems) == before:
        v.agree.append("the report")


def _check_signature(manifest: Path, sig: Path, allowed: Path) -> tuple[str | None, str | None]:
    if not sig.exists():
        return None, f"{SIGNATURE}: missing (a signature is required when allowed signers are given)"
    found = subprocess.run(["ssh-keygen", "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    principals = [p for p in found.stdout.split() if p]
    if found.returncode != 0 or not principals:
        return None, f"{SIGNATURE}: not made by any key in {allowed}"
    with manifest.open("rb") as data:
        res = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", principals[0], "-n", NAMESPACE,
                              "-s", str(sig)], stdin=data, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return None, f"{SIGNATURE}: does not match {MANIFEST} ({(res.stderr or res.stdout).strip()[-200:]})"
    return principals[0], None
