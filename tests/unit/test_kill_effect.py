"""A SIGKILL fault is in effect when its process is gone, not when the signal is sent: the
instant waits (up to 5 s) until each signalled process has exited. Shown with a process the
cgroup v1 freezer holds (a frozen task dies only once thawed), thawed 1 s after the signal: the
instant returns only then, and the fault is active at once. Root needed (a freezer cgroup, the
journal), as on a host."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from chaoskit.faults import journal
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.registry import scripts_for
from chaoskit.faults.spec import parse_fault
from chaoskit.inventory.models import ProcessRef

FREEZER = Path("/sys/fs/cgroup/freezer")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (FREEZER / "cgroup.procs").exists(),
                                reason="needs root and the cgroup v1 freezer")
FID = "ce11effec700"


def sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def gone(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def test_the_kill_instant_waits_until_the_process_is_gone(tmp_path: Path) -> None:
    pid_file, start = tmp_path / "server.pid", tmp_path / "start-server"
    start.write_text(f"#!/bin/sh\nsetsid sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {pid_file}\n")
    start.chmod(0o755)
    subprocess.run([str(start)], check=True)
    pid = int(pid_file.read_text())
    cg = FREEZER / f"chaoskit-test-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "cgroup.procs").write_text(f"{pid}\n")
        (cg / "freezer.state").write_text("FROZEN\n")
        facts = HostFacts(host="h", processes={"server": ProcessRef(pid_file=str(pid_file), comm="sleep",
                                                                      start=str(start))})
        scripts = scripts_for(FID, parse_fault({"kind": "kill", "target": "h", "processes": ["server"]}), facts)
        root = str(tmp_path / "journal")
        assert sh(journal.stage_script(FID, journal.journal_files(FID, scripts, {"id": FID}, None), 60,
                                       root=root)).returncode == 0
        thaw = threading.Timer(1.0, lambda: (cg / "freezer.state").write_text("THAWED\n"))
        t0 = time.monotonic()
        thaw.start()
        res = sh(journal.trigger_script(FID, root=root))
        waited = time.monotonic() - t0
        thaw.join()
        assert res.returncode == 0, res.stderr
        assert waited >= 0.9 and gone(pid), (waited, gone(pid))
        assert sh(journal.active_script(FID, root=root)).returncode == 0  # in effect as the instant returns
        assert sh(journal.revert_script(FID, root=root)).returncode == 0  # started again
        assert int(pid_file.read_text()) != pid and not gone(int(pid_file.read_text()))
    finally:
        for p in {pid, int(pid_file.read_text())}:
            if not gone(p):
                os.kill(p, 9)
        (cg / "freezer.state").write_text("THAWED\n")
        time.sleep(0.2)
        cg.rmdir()
