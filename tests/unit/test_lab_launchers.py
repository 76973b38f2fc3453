"""A lab daemon's launcher starts its daemon once: a no-op while the process it started runs, and
a start again when the pid file names another process that took the pid since (pids are reused
within seconds on a busy host; a stop fault's revert runs this launcher)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaoskit.lab import daemons


def _alive(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except OSError:
        return False


def test_the_launcher_starts_again_when_its_pid_was_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = SimpleNamespace(name="h1", netns="ns-h1", dir=tmp_path, cgroup_dirs=lambda: [])
    monkeypatch.setattr(daemons.Paths, "launcher", staticmethod(lambda h, d: h.dir / f"start-{d}"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `setsid ip netns exec ...` stands in for the namespace: one line per start, then the daemon
    (bin_dir / "setsid").write_text(f'#!/bin/sh\necho start >> {tmp_path}/starts\nexec sleep 60\n')
    (bin_dir / "setsid").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    pid_file = tmp_path / "d.pid"
    script = daemons.write_launcher(host, "d", "sleep 60", pid_file, log=tmp_path / "d.log")  # type: ignore[arg-type]

    def starts() -> int:
        return len((tmp_path / "starts").read_text().splitlines()) if (tmp_path / "starts").exists() else 0

    def launch(expected_starts: int) -> int:
        """The launcher run; its pid file's pid once the stub has logged `expected_starts` starts
        (the daemon starts in the background) or 30 s passed."""
        subprocess.run(["sh", str(script)], env=env, check=True, timeout=30)
        deadline = time.time() + 30
        while starts() < expected_starts and time.time() < deadline:
            time.sleep(0.02)
        return int(pid_file.read_text())

    pids: list[int] = []
    squatter = None
    try:
        pids.append(launch(1))
        assert launch(1) == pids[0] and _alive(pids[0])  # running: a no-op
        assert starts() == 1
        os.kill(pids[0], 9)
        time.sleep(0.05)  # start times count in ticks of 10 ms: the squatter starts in a later one
        squatter = subprocess.Popen(["sleep", "60"])
        pid_file.write_text(f"{squatter.pid}\n")  # another process now holds the recorded pid
        pids.append(launch(2))
        assert pids[1] not in (pids[0], squatter.pid) and _alive(pids[1])
        assert starts() == 2
    finally:
        if squatter is not None:
            squatter.kill()
            squatter.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, 9)



def test_a_pid_file_is_alive_only_with_a_running_process_in_it(tmp_path: Path) -> None:
    from chaoskit.lab.procs import pid_file_alive

    path = tmp_path / "d.pid"
    assert pid_file_alive(path) is False  # no file
    path.write_text("\n")
    assert pid_file_alive(path) is False  # no pid in it
    path.write_text(f"{os.getpid()}\n")
    assert pid_file_alive(path) is True
    ended = subprocess.Popen(["true"])
    try:  # ended, not reaped yet: a zombie holds its pid, so no other process can have it
        while Path(f"/proc/{ended.pid}/stat").read_text().rsplit(") ", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        path.write_text(f"{ended.pid}\n")
        assert pid_file_alive(path) is False
    finally:
        ended.wait()
