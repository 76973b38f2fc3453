"""A lab revive keeps starting dead daemons for as long as it waits for health (CI once saw a
revive give up on repmgr's servers: they were launched only during a first 20 s, while a killed
postmaster's backends still held its shared memory, and never again)."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import pytest

from chaoskit.lab import manager
from chaoskit.lab.recipes import lab_spec


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake monotonic clock that `sleep` advances: the revive's waits take no real time."""
    now = [0.0]
    monkeypatch.setattr(manager.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(manager.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    return now


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    """rm1's postgres launcher (its runs are recorded by a fake subprocess.run)."""
    path = tmp_path / "start-postgres"
    path.write_text("#!/bin/sh\n")
    return path


def _state(script: Path) -> dict:
    return {"daemons": {"rm1/postgres": {"pid_file": "/nonexistent", "script": str(script)}}}


def test_a_daemon_that_can_start_only_after_25_s_is_revived(monkeypatch: pytest.MonkeyPatch, clock: list[float],
                                                            script: Path) -> None:
    launched: list[float] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert argv == [str(script)]
        launched.append(clock[0])
        return subprocess.CompletedProcess(argv, 0, "", "")

    # the postmaster refuses to start before t = 25 s; a launch after that stays up
    def running() -> bool:
        return any(t >= 25.0 for t in launched)

    monkeypatch.setattr(manager.subprocess, "run", run)
    monkeypatch.setattr(manager, "_pid_alive", lambda entry: running())
    monkeypatch.setattr(manager, "health", lambda spec, stacks, with_base=True: (running(), "repmgr: 1 of 3 answer"))
    monkeypatch.setattr(manager, "recipe", lambda name: types.SimpleNamespace(health=lambda spec: (running(), "")))

    assert manager._revive(_state(script), {"repmgr"}, lab_spec(), 60.0) == ""
    assert min(t for t in launched if t >= 25.0) < 27.0  # launched again about once a second
    assert clock[0] < 45.0


def test_a_revive_that_gives_up_names_the_daemons_not_running(monkeypatch: pytest.MonkeyPatch, clock: list[float],
                                                              script: Path) -> None:
    monkeypatch.setattr(manager.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setattr(manager, "_pid_alive", lambda entry: False)
    monkeypatch.setattr(manager, "health",
                        lambda spec, stacks, with_base=True: (False, "repmgr: 1 of 3 answer, primaries []"))
    monkeypatch.setattr(manager, "recipe", lambda name: types.SimpleNamespace(health=lambda spec: (False, "")))

    why = manager._revive(_state(script), {"repmgr"}, lab_spec(), 60.0)
    assert why == "lab not healthy after 45s: repmgr: 1 of 3 answer, primaries []; not running: rm1/postgres"
