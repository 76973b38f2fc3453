"""A run directory an auditor can check: `manifest.json` holds the SHA-256 and size of every file
the run wrote; optionally it is signed with an SSH key (`ssh-keygen -Y sign`, namespace
`chaoskit`), and `chaoskit verify` checks the files, the events' hash chain and the signature.

Verification names what is wrong: a file changed, missing or added since the manifest, a broken
events chain, a missing or bad signature (when allowed signers are given, a signature is required).
ssh-keygen is run with an argument list (no shell); key and signer paths are the user's own files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

FORMAT = "chaoskit-manifest/1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
NAMESPACE = "chaoskit"
_NOT_LISTED = {MANIFEST, SIGNATURE}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and p.relative_to(run_dir).as_posix() not in
                  _NOT_LISTED)


def write_manifest(run_dir: Path, sign_key: Path | None = None) -> dict[str, Any]:
    """Hash every file of the run directory into manifest.json; sign it when a key is given."""
    files = {p.relative_to(run_dir).as_posix(): {"sha256": sha256_of(p), "bytes": p.stat().st_size}
             for p in _files(run_dir)}
    manifest = {"format": FORMAT, "created": time.time(), "files": files}
    path = run_dir / MANIFEST
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


def verify(run_dir: Path, allowed_signers: Path | None = None) -> tuple[list[str], str | None]:
    """(problems, signer): an empty list when the directory is exactly what the run wrote (and,
    with allowed signers, signed by one of them; `signer` is the principal that signed)."""
    from chaoskit.report.rundir import verify_chain

    problems: list[str] = []
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        listed: dict[str, dict[str, Any]] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{MANIFEST}: missing or unreadable ({exc})"], None
    present = {p.relative_to(run_dir).as_posix(): p for p in _files(run_dir)}
    for name, entry in sorted(listed.items()):
        p = present.get(name)
        if p is None:
            problems.append(f"{name}: missing (listed in the manifest)")
        elif p.stat().st_size != entry.get("bytes") or sha256_of(p) != entry.get("sha256"):
            problems.append(f"{name}: changed since the manifest (SHA-256 differs)")
    for name in sorted(set(present) - set(listed)):
        problems.append(f"{name}: not in the manifest (added afterwards)")
    events = run_dir / "events.jsonl"
    if events.exists() and "events.jsonl" in listed:
        broken = verify_chain(events.read_text().splitlines())
        if broken:
            problems.append(broken)
    signer = None
    if allowed_signers is not None:
        signer, why = _check_signature(path, run_dir / SIGNATURE, allowed_signers)
        if why:
            problems.append(why)
    return problems, signer


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
