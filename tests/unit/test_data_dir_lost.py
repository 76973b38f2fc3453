"""`data_dir_lost` on this machine's filesystems, through the journal exactly as on a host: the
member's process killed and its data directory moved aside whole (nothing deleted), both given
back at the revert; a directory made in its place meanwhile kept beside, and refused while a
process of the member runs from it; a mount point and a missing directory refused before
anything is journaled. Root needed (a tmpfs mount), as on a host."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounts import tmpfs_disk

from chaoskit.faults import journal
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.registry import scripts_for
from chaoskit.faults.spec import parse_fault
from chaoskit.inventory.models import ProcessRef

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts are root's: run as root, as on a host")
FID = "da7ad1710000"


def sh(script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs like a lab host's disk, a data directory on it holding one file."""
    with tmpfs_disk(tmp_path, "8m") as mnt:
        (mnt / "pgdata" / "PG_VERSION").write_text("15\n")
        yield mnt


class Server:
    """A stand-in server process (`sleep`) with a pid file and a start command, as an inventory
    declares one."""

    def __init__(self, tmp: Path) -> None:
        self.pid_file = tmp / "server.pid"
        self.start = tmp / "start-server"
        self.start.write_text(f"#!/bin/sh\nsetsid sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {self.pid_file}\n")
        self.start.chmod(0o755)
        subprocess.run([str(self.start)], check=True)

    def pid(self) -> int:
        return int(self.pid_file.read_text())

    def alive(self) -> bool:
        try:
            return Path(f"/proc/{self.pid()}/comm").read_text().strip() == "sleep" and \
                "State:\tZ" not in Path(f"/proc/{self.pid()}/status").read_text()
        except (OSError, ValueError):
            return False

    def end(self) -> None:
        if self.alive():
            os.kill(self.pid(), 9)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    try:
        yield s
    finally:
        s.end()


def facts(data_dir: Path, server: Server | None) -> HostFacts:
    procs = {"postgres": ProcessRef(pid_file=str(server.pid_file), comm="sleep", start=str(server.start))} \
        if server else {}
    return HostFacts(host="pg1", processes=procs, data_dir=str(data_dir))


def staged(f: HostFacts, root: Path, **fields: object) -> subprocess.CompletedProcess[str]:
    spec = parse_fault({"kind": "data_dir_lost", "target": "pg1", **fields})
    scripts = scripts_for(FID, spec, f)
    return sh(journal.stage_script(FID, journal.journal_files(FID, scripts, {"id": FID}, None), 120, root=str(root)))


def test_the_data_directory_is_lost_whole_and_given_back(disk: Path, server: Server, tmp_path: Path) -> None:
    root, data = tmp_path / "journal", disk / "pgdata"
    lost = disk / f"pgdata.chaoskit-lost-{FID}"
    first = server.pid()
    assert staged(facts(data, server), root).returncode == 0
    assert data.is_dir() and server.alive()  # staging only records
    res = sh(journal.trigger_script(FID, root=str(root)))
    assert res.returncode == 0, res.stderr
    assert not data.exists() and (lost / "PG_VERSION").read_text() == "15\n"
    deadline = time.time() + 5
    while time.time() < deadline and Path(f"/proc/{first}").exists() and \
            "State:\tZ" not in Path(f"/proc/{first}/status").read_text():
        time.sleep(0.05)
    assert not server.alive()
    assert sh(journal.active_script(FID, root=str(root))).returncode == 0
    res = sh(journal.revert_script(FID, root=str(root)))
    assert res.returncode == 0 and journal.parse_reverted(res.stdout)[1] == "controller", res.stderr
    assert (data / "PG_VERSION").read_text() == "15\n" and not lost.exists()
    assert server.alive() and server.pid() != first  # started again by its start command
    assert sh(journal.active_script(FID, root=str(root))).returncode == 1


def test_a_directory_made_in_its_place_is_kept_beside(disk: Path, server: Server, tmp_path: Path) -> None:
    """Something made a new data directory meanwhile (an operator's restore): it is kept as
    `.chaoskit-new-<id>`, never deleted; while the member runs from it the revert refuses and
    moves nothing."""
    root, data = tmp_path / "journal", disk / "pgdata"
    assert staged(facts(data, server), root).returncode == 0
    assert sh(journal.trigger_script(FID, root=str(root))).returncode == 0
    data.mkdir()
    (data / "restored").write_text("new\n")
    time.sleep(0.2)
    subprocess.run([str(server.start)], check=True)  # the member runs again, from the new directory
    res = sh(journal.revert_script(FID, root=str(root)))
    assert res.returncode != 0 and "runs again, from a new" in res.stderr, (res.stdout, res.stderr)
    assert (data / "restored").exists() and (disk / f"pgdata.chaoskit-lost-{FID}" / "PG_VERSION").exists()
    server.end()
    time.sleep(0.2)
    res = sh(journal.revert_script(FID, root=str(root)))
    assert res.returncode == 0, res.stderr
    assert (data / "PG_VERSION").exists() and (disk / f"pgdata.chaoskit-new-{FID}" / "restored").exists()
    assert server.alive()


def test_a_repository_directory_without_processes(disk: Path, tmp_path: Path) -> None:
    """On a backup repository host: the directory alone moves, and comes back."""
    root, repo = tmp_path / "journal", disk / "pgdata"
    assert staged(facts(repo, None), root).returncode == 0
    assert sh(journal.trigger_script(FID, root=str(root))).returncode == 0
    assert not repo.exists()
    assert sh(journal.revert_script(FID, root=str(root))).returncode == 0
    assert (repo / "PG_VERSION").exists()


def test_a_mount_point_and_a_missing_directory_are_refused_before_anything(disk: Path, server: Server,
                                                                           tmp_path: Path) -> None:
    def check(data_dir: Path) -> subprocess.CompletedProcess[str]:
        scripts = scripts_for(FID, parse_fault({"kind": "data_dir_lost", "target": "pg1"}), facts(data_dir, server))
        return sh(journal.oneshot_script(scripts, scripts.check, root=str(tmp_path / "journal")))

    assert check(disk / "pgdata").returncode == 0
    res = check(disk)
    assert res.returncode == 3 and "is a mount point" in res.stderr, res.stderr
    res = check(disk / "nowhere")
    assert res.returncode == 3 and "no such directory" in res.stderr, res.stderr
    assert not list((tmp_path / "journal").glob(f"*/{FID}.*"))  # nothing journaled
    assert (disk / "pgdata").is_dir() and server.alive()
