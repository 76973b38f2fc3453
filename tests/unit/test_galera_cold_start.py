"""The Galera lab's cold start reads each node's last committed seqno: grastate.dat's after a clean
stop, InnoDB recovery's (`mariadbd --wsrep-recover`, scripted here) after a crash, written back
to grastate.dat for the node's next start. Expected values are the ones written into the
scripted files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chaoskit.lab import recipes as lab_recipes
from chaoskit.lab import spec as lab_spec
from chaoskit.lab.recipes import galera

UUID = "338751ca-ed71-11f1-ae09-97cf9e7ae8da"
CRASHED = f"# GALERA saved state\nversion: 2.1\nuuid:    {UUID}\nseqno:   -1\nsafe_to_bootstrap: 0\n"


def _node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grastate: str,
          recover_log: str | None) -> tuple[galera.LabHost, list[list[str]]]:
    monkeypatch.setattr(lab_spec, "STATE_DIR", tmp_path)
    host = lab_recipes.lab_spec().host("galera2")
    (host.dir / "mysql").mkdir(parents=True)
    (host.dir / "mysql" / "grastate.dat").write_text(grastate)
    calls: list[list[str]] = []

    def run(cmd, **kw):
        calls.append(cmd)
        if recover_log is not None:
            (host.dir / "wsrep-recover.log").write_text(recover_log)
        return subprocess.CompletedProcess(cmd, 0, b"", b"")
    monkeypatch.setattr(galera.subprocess, "run", run)
    return host, calls


def test_a_crashed_node_is_recovered_and_its_grastate_rewritten(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = ("2026-12-01 10:23:46 0 [Note] WSREP: Recovered position: 00000000-0000-0000-0000-000000000000:-1\n"
           f"2026-12-01 10:23:46 0 [Note] WSREP: Recovered position: {UUID}:1207\n")
    host, calls = _node(tmp_path, monkeypatch, CRASHED, log)
    assert galera.recover_position(host) == 1207
    [cmd] = calls
    assert cmd[:4] == ["ip", "netns", "exec", "ck-galera2"] and "--wsrep-recover" in cmd
    assert (host.dir / "mysql" / "grastate.dat").read_text() == CRASHED.replace("seqno:   -1", "seqno:   1207")


def test_a_cleanly_stopped_node_is_not_recovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, calls = _node(tmp_path, monkeypatch, CRASHED.replace("seqno:   -1", "seqno:   88"), None)
    assert galera.recover_position(host) == 88
    assert calls == []


def test_no_recovered_position_leaves_the_node_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, _ = _node(tmp_path, monkeypatch, CRASHED, "2026-12-01 10:23:46 0 [ERROR] Aborting\n")
    assert galera.recover_position(host) == -1
    assert (host.dir / "mysql" / "grastate.dat").read_text() == CRASHED
