"""A run directory is tamper-evident: verify passes on what was written and names the file after one
byte changes, a file is removed or added, or the events chain is edited; the signature path with a
throwaway SSH key; the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaoskit.report.manifest import verify, write_manifest
from chaoskit.report.rundir import RunDirectory


def run_dir(tmp_path: Path) -> Path:
    rd = RunDirectory.create(tmp_path / "reports", "drill", 1_800_000_000.0)
    for i in range(3):
        rd.event({"kind": "k", "t": float(i)})
    rd.close()
    rd.write_json("run.json", {"results": {"verdict": True}})
    (rd.path / "plots" / "timeline.png").write_bytes(b"\x89PNG....")
    write_manifest(rd.path)
    return rd.path


def test_a_fresh_run_directory_verifies(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    v = verify(d)
    assert (v.problems, v.signer, v.signature, v.files) == ([], None, "absent", 3)
    assert v.summary().startswith("intact: 3 files, events chain 3 events (head ")
    assert v.summary().endswith("; NOT SIGNED: anyone with write access to this directory could change a file "
                                "and seal it again")
    listed = json.loads((d / "manifest.json").read_text())["files"]
    assert sorted(listed) == ["events.jsonl", "plots/timeline.png", "run.json"]


@pytest.mark.parametrize("change", ["byte", "remove", "add", "chain"])
def test_any_change_is_named(tmp_path: Path, change: str) -> None:
    d = run_dir(tmp_path)
    if change == "byte":
        data = bytearray((d / "plots" / "timeline.png").read_bytes())
        data[5] ^= 1
        (d / "plots" / "timeline.png").write_bytes(bytes(data))
        expected = ["plots/timeline.png: changed since the manifest (SHA-256 differs)"]
    elif change == "remove":
        (d / "run.json").unlink()
        expected = ["run.json: missing (listed in the manifest)"]
    elif change == "add":
        (d / "notes.txt").write_text("added later")
        expected = ["notes.txt: not in the manifest (added afterwards)"]
    else:  # an event edited and the manifest rewritten to match: the chain still tells
        lines = (d / "events.jsonl").read_text().splitlines()
        ev = json.loads(lines[1])
        ev["t"] = 99.0
        lines[1] = json.dumps(ev, sort_keys=True)
        (d / "events.jsonl").write_text("\n".join(lines) + "\n")
        write_manifest(d)
        expected = ["events.jsonl line 3: the chain is broken (an event was removed, inserted or edited)"]
    assert verify(d).problems == expected


@pytest.mark.parametrize(("files", "why"), [
    ({"run.json": "0" * 64}, "files['run.json'] is not {sha256, bytes}"),
    ({"run.json": {"sha256": "0" * 64}}, "files['run.json'] is not {sha256, bytes}"),
    (["run.json"], "files is not a mapping"),
])
def test_a_manifest_edited_out_of_shape_is_named_not_a_crash(tmp_path: Path, files: object, why: str) -> None:
    """A manifest rewritten by hand in another shape (an entry as a bare digest, a list) is
    reported as not chaoskit's, never raised past verify."""
    d = run_dir(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"] = files
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert verify(d).problems == [f"manifest.json: not as chaoskit writes it ({why})"]


def keypair(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    signers = tmp_path / f"{name}.allowed"
    signers.write_text(f"{name}@example.org namespaces=\"chaoskit\" {(tmp_path / (name + '.pub')).read_text()}")
    return key, signers


def test_signature_with_a_throwaway_key(tmp_path: Path) -> None:
    key, signers = keypair(tmp_path, "auditor")
    _, strangers = keypair(tmp_path, "stranger")
    d = run_dir(tmp_path)
    assert verify(d, signers).problems == ["manifest.json.sig: missing (a signature is required when allowed "
                                           "signers are given)"]
    write_manifest(d, sign_key=key)
    v = verify(d, signers)
    assert (v.problems, v.signer, v.signature) == ([], "auditor@example.org", "verified")
    assert v.summary().endswith("; signed by auditor@example.org")
    unchecked = verify(d)  # a signature is there, but nobody said whose it must be
    assert unchecked.signature == "present" and "signature present, NOT CHECKED" in unchecked.summary()
    assert verify(d, strangers).problems == [f"manifest.json.sig: not made by any key in {strangers}"]
    # the manifest edited after signing (e.g. to hide a changed file): the signature no longer matches
    m = json.loads((d / "manifest.json").read_text())
    m["created"] = 0
    (d / "manifest.json").write_text(json.dumps(m))
    v = verify(d, signers)
    problems, signer = v.problems, v.signer
    assert signer is None and problems[0].startswith("manifest.json.sig: does not match manifest.json")
    # rewriting the manifest drops the old signature
    write_manifest(d)
    assert not (d / "manifest.json.sig").exists()


def test_cli_verify_exit_codes(tmp_path: Path) -> None:
    d = run_dir(tmp_path)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "chaoskit.cli", "verify", *args], capture_output=True, text=True,
                              timeout=60)

    ok = cli(str(d))
    assert ok.returncode == 0 and "intact: 3 files" in ok.stdout and "NOT SIGNED" in ok.stdout
    (d / "run.json").write_text("{}")
    bad = cli(str(d))
    assert bad.returncode == 1 and f"{d}: run.json: changed since the manifest" in bad.stderr
    missing = cli(str(tmp_path / "nope"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
