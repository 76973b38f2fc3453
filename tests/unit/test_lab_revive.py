"""A lab revive keeps starting dead daemons for as long as it waits for health (CI once saw a
revive give up on repmgr's servers: they were launched only during a first 20 s, while a killed
postmaster's backends still held its shared memory, and never again)."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import pytest

from chaoskit.lab import manager
from chaoskit.lab.spec import SPEC


def test_a_daemon_that_can_start_only_after_25_s_is_revived(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    clock = [0.0]
    monkeypatch.setattr(manager.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(manager.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    script = tmp_path / "start-postgres"
    script.write_text("#!/bin/sh\n")
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
    monkeypatch.setattr(manager, "health", lambda spec, stacks: (running(), "repmgr: 1 of 3 answer"))
    monkeypatch.setattr(manager, "recipe", lambda name: types.SimpleNamespace(health=lambda spec: (running(), "")))
    state = {"daemons": {"rm1/postgres": {"pid_file": "/nonexistent", "script": str(script)}}}

    assert manager._revive(state, {"repmgr"}, SPEC, 60.0) == ""
    assert min(t for t in launched if t >= 25.0) < 27.0  # launched again about once a second
    assert clock[0] < 45.0


def test_a_revive_that_gives_up_names_the_daemons_not_running(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    clock = [0.0]
    monkeypatch.setattr(manager.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(manager.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    script = tmp_path / "start-postgres"
    script.write_text("#!/bin/sh\n")
    monkeypatch.setattr(manager.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setattr(manager, "_pid_alive", lambda entry: False)
    monkeypatch.setattr(manager, "health", lambda spec, stacks: (False, "repmgr: 1 of 3 answer, primaries []"))
    monkeypatch.setattr(manager, "recipe", lambda name: types.SimpleNamespace(health=lambda spec: (False, "")))
    state = {"daemons": {"rm1/postgres": {"pid_file": "/nonexistent", "script": str(script)}}}

    why = manager._revive(state, {"repmgr"}, SPEC, 60.0)
    assert why == "lab not healthy after 45s: repmgr: 1 of 3 answer, primaries []; not running: rm1/postgres"
