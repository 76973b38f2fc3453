"""Disk faults on real filesystems of this machine (a small tmpfs, a loop-mounted ext4 image), run
through the journal exactly as on a host: `disk_full` leaves the free space asked for and gives
it all back at the revert (the controller's or the dead-man's), refuses the root filesystem;
`disk_slow` moves the member's processes into a throttled blkio cgroup of its own and back, and
refuses a filesystem without a block device. Root needed (mounts, cgroups), as on a host."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounts import tmpfs_disk

from chaoskit.faults import journal
from chaoskit.faults.disk import BLKIO
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.registry import scripts_for
from chaoskit.faults.spec import DiskFullSpec, DiskSlowSpec, parse_fault
from chaoskit.inventory.models import ProcessRef

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and cgroups are root's: run as root, as on a host")
FID = "d15cf0110000"
MiB = 1 << 20


def sh(script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_disk(tmp_path) as mnt:
        yield mnt


@pytest.fixture
def loopfs(tmp_path: Path) -> Iterator[Path]:
    img, mnt = tmp_path / "disk.img", tmp_path / "loop"
    with open(img, "wb") as fh:
        fh.truncate(64 * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(img)], check=True)
    mnt.mkdir()
    if subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=False).returncode != 0:
        pytest.skip("loop devices do not work here")
    (mnt / "pgdata").mkdir()
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def facts(data_dir: Path, pid_file: Path | None = None, wal_dir: Path | None = None) -> HostFacts:
    procs = {"postgres": ProcessRef(pid_file=str(pid_file), comm="sleep")} if pid_file else {}
    return HostFacts(host="pg1", processes=procs, data_dir=str(data_dir), wal_dir=str(wal_dir) if wal_dir else None)


def staged(spec: object, f: HostFacts, root: Path, planned_ms: int | None = None) -> subprocess.CompletedProcess[str]:
    scripts = scripts_for(FID, spec, f)  # type: ignore[arg-type]
    return sh(journal.stage_script(FID, journal.journal_files(FID, scripts, {"id": FID}, planned_ms), 120,
                                   root=str(root)))


def test_disk_full_leaves_what_was_asked_and_gives_it_back(tmpfs: Path, tmp_path: Path) -> None:
    root = tmp_path / "journal"
    before = free_bytes(tmpfs)
    spec = parse_fault({"kind": "disk_full", "target": "pg1", "free": "4M"})
    assert staged(spec, facts(tmpfs / "pgdata"), root).returncode == 0
    assert free_bytes(tmpfs) == before  # staging only finds the filesystem
    res = sh(journal.trigger_script(FID, root=str(root)))
    assert res.returncode == 0, res.stderr
    left = free_bytes(tmpfs)
    assert 4 * MiB - 4096 <= left <= 4 * MiB + 4096, left  # to the page: tmpfs counts in pages
    ballast = tmpfs / f".chaoskit-ballast-{FID}"
    assert ballast.exists() and not any(p.name.startswith(".chaoskit") for p in (tmpfs / "pgdata").iterdir())
    assert sh(journal.active_script(FID, root=str(root))).returncode == 0
    res = sh(journal.revert_script(FID, root=str(root)))
    assert res.returncode == 0 and journal.parse_reverted(res.stdout)[1] == "controller", res.stderr
    assert not ballast.exists() and free_bytes(tmpfs) == before
    assert sh(journal.active_script(FID, root=str(root))).returncode == 1


def test_disk_full_percent_and_the_wal_directory(tmpfs: Path, loopfs: Path, tmp_path: Path) -> None:
    """`free: 25%` of the filesystem that holds the WAL directory (here another filesystem than the
    data directory's); the data directory's filesystem is untouched."""
    root = tmp_path / "journal"
    (loopfs / "pg_wal").mkdir()
    data_before = free_bytes(tmpfs)
    spec = parse_fault({"kind": "disk_full", "target": "pg1", "free": "25%"})
    assert staged(spec, facts(tmpfs / "pgdata", wal_dir=loopfs / "pg_wal"), root).returncode == 0
    assert sh(journal.trigger_script(FID, root=str(root))).returncode == 0
    st = os.statvfs(loopfs)
    quarter = st.f_blocks * st.f_frsize // 4
    assert abs(free_bytes(loopfs) - quarter) <= 4096, (free_bytes(loopfs), quarter)
    assert free_bytes(tmpfs) == data_before
    assert sh(journal.revert_script(FID, root=str(root))).returncode == 0
    assert not (loopfs / f".chaoskit-ballast-{FID}").exists()


def test_the_deadman_removes_the_ballast_at_the_planned_end(tmpfs: Path, tmp_path: Path) -> None:
    root = tmp_path / "journal"
    before = free_bytes(tmpfs)
    spec = parse_fault({"kind": "disk_full", "target": "pg1", "duration": "1s", "ttl": "30s"})
    assert staged(spec, facts(tmpfs / "pgdata"), root, planned_ms=1500).returncode == 0
    t_eff = journal.parse_applied(sh(journal.trigger_script(FID, root=str(root))).stdout)[1]
    assert free_bytes(tmpfs) < 64 * 1024
    deadline = time.time() + 10
    while time.time() < deadline and free_bytes(tmpfs) != before:
        time.sleep(0.05)
    res = sh(journal.revert_script(FID, root=str(root)))
    t_rev, by = journal.parse_reverted(res.stdout)
    assert by == "deadman" and free_bytes(tmpfs) == before
    assert -0.05 <= t_rev - (t_eff + 1.5) < 1.5  # at the planned end (1 s + 0.5 s margin), not at the ttl


def test_disk_full_refuses_the_root_filesystem_and_a_missing_directory(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    on_root = tmp_path / "pgdata"  # /tmp is on / on this machine
    on_root.mkdir()
    if os.stat(on_root).st_dev != os.stat("/").st_dev:
        pytest.skip("the test directory is not on the root filesystem here")
    res = staged(parse_fault({"kind": "disk_full", "target": "pg1"}), facts(on_root), root)
    assert res.returncode != 0 and "root filesystem" in res.stderr and "allow_root_filesystem" in res.stderr
    assert not list(root.glob(f"*/{FID}.*")), "a refused staging left a journal entry"
    res = staged(parse_fault({"kind": "disk_full", "target": "pg1"}), facts(tmp_path / "nowhere"), root)
    assert res.returncode != 0 and "no such directory" in res.stderr


def test_disk_full_spec_rules() -> None:
    assert DiskFullSpec(target="pg1").free_bytes == 0
    assert DiskFullSpec(target="pg1", free="64M").free_bytes == 64 * MiB
    assert DiskFullSpec(target="pg1", free="5%").free == "5%"
    for bad in ("100%", "-1", "1 G", "$(x)", "12Q"):
        with pytest.raises(ValueError):
            DiskFullSpec(target="pg1", free=bad)
    with pytest.raises(ValueError, match="data_dir"):
        scripts_for(FID, DiskFullSpec(target="pg1"), HostFacts(host="pg1", processes={}))
    with pytest.raises(ValueError, match="disk_slow needs"):
        DiskSlowSpec(target="pg1")


def blkio_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return path
    return ""


def release(cg: Path, to: Path) -> None:
    """A test's cgroup emptied into `to` and removed, whatever the test left."""
    if cg.exists():
        for p in (cg / "cgroup.procs").read_text().split():
            (to / "cgroup.procs").write_text(p)
        cg.rmdir()


@pytest.mark.skipif(not os.path.exists(f"{BLKIO}/blkio.throttle.write_bps_device"), reason="no cgroup v1 blkio here")
def test_disk_slow_throttles_the_tree_and_puts_it_back(loopfs: Path, tmp_path: Path) -> None:
    root = tmp_path / "journal"
    target = subprocess.Popen(["sleep", "60"])
    pid_file = tmp_path / "pid"
    pid_file.write_text(f"{target.pid}\n")
    home = blkio_cgroup(target.pid)
    # the fault's cgroup under the one the process came from: its I/O still counts there
    cg = Path(BLKIO + home.rstrip("/")) / f"chaoskit-{FID}"
    try:
        spec = parse_fault({"kind": "disk_slow", "target": "pg1", "write_rate": "1mbps", "read_iops": 10})
        res = staged(spec, facts(loopfs / "pgdata", pid_file), root)
        assert res.returncode == 0, res.stderr
        dev = os.stat(loopfs).st_dev
        rules = (cg / "blkio.throttle.write_bps_device").read_text().split()
        assert rules == [f"{os.major(dev)}:{os.minor(dev)}", "1000000"]
        assert (cg / "blkio.throttle.read_iops_device").read_text().split()[1] == "10"
        assert blkio_cgroup(target.pid) == home  # inert until the instant
        assert sh(journal.trigger_script(FID, root=str(root))).returncode == 0
        assert blkio_cgroup(target.pid) == f"{home.rstrip('/')}/chaoskit-{FID}"
        assert sh(journal.active_script(FID, root=str(root))).returncode == 0
        res = sh(journal.revert_script(FID, root=str(root)))
        assert res.returncode == 0, res.stderr
        assert blkio_cgroup(target.pid) == home and not cg.exists()
    finally:
        target.kill()
        target.wait()
        release(cg, Path(f"{BLKIO}{home.rstrip('/')}"))


def test_disk_slow_refuses_a_filesystem_without_a_block_device(tmpfs: Path, tmp_path: Path) -> None:
    target = subprocess.Popen(["sleep", "60"])
    (tmp_path / "pid").write_text(f"{target.pid}\n")
    try:
        spec = parse_fault({"kind": "disk_slow", "target": "pg1", "write_rate": "1mbps"})
        res = staged(spec, facts(tmpfs / "pgdata", tmp_path / "pid"), tmp_path / "journal")
        assert res.returncode != 0
        assert "no block device" in res.stderr or "no cgroup v1 blkio" in res.stderr, res.stderr
    finally:
        target.kill()
        target.wait()


def test_the_preflight_check_refuses_what_staging_would(tmpfs: Path, tmp_path: Path) -> None:
    """The kinds' read-only `check` (run by preflight on each host a fault may land on) gives the
    refusals staging would give, before anything is journaled: the root filesystem for disk_full,
    a filesystem without a block device for disk_slow; and passes where the fault can go."""
    on_root = tmp_path / "pgdata"
    on_root.mkdir()

    def check(kind: dict, data_dir: Path) -> subprocess.CompletedProcess[str]:
        scripts = scripts_for(FID, parse_fault({"target": "pg1", **kind}), facts(data_dir, tmp_path / "pid"))
        return sh(journal.oneshot_script(scripts, scripts.check, root=str(tmp_path / "journal")))

    (tmp_path / "pid").write_text("1\n")
    assert check({"kind": "disk_full"}, tmpfs / "pgdata").returncode == 0
    if os.stat(on_root).st_dev == os.stat("/").st_dev:
        res = check({"kind": "disk_full"}, on_root)
        assert res.returncode == 3 and "root filesystem" in res.stderr
    res = check({"kind": "disk_slow", "write_rate": "1mbps"}, tmpfs / "pgdata")
    assert res.returncode == 3 and ("no block device" in res.stderr or "no cgroup v1 blkio" in res.stderr)
    assert not list((tmp_path / "journal").glob(f"*/{FID}.*"))  # nothing journaled


@pytest.mark.skipif(not os.path.exists(f"{BLKIO}/blkio.throttle.write_bps_device"), reason="no cgroup v1 blkio here")
def test_disk_slow_reverts_when_the_journaled_origin_is_lost(loopfs: Path, tmp_path: Path) -> None:
    """The origin file gone from the journal: the revert still finds the fault's cgroup by its name,
    lets every process out (to the controller's root: the origin is not known) and removes it."""
    root = tmp_path / "journal"
    target = subprocess.Popen(["sleep", "60"])
    pid_file = tmp_path / "pid"
    pid_file.write_text(f"{target.pid}\n")
    parent = Path(BLKIO) / f"cktest-home-{FID}"  # a home below the root, as a host's own cgroup is
    parent.mkdir()
    (parent / "cgroup.procs").write_text(str(target.pid))
    home = blkio_cgroup(target.pid)
    cg = parent / f"chaoskit-{FID}"
    try:
        assert home == f"/cktest-home-{FID}"
        spec = parse_fault({"kind": "disk_slow", "target": "pg1", "write_rate": "1mbps"})
        assert staged(spec, facts(loopfs / "pgdata", pid_file), root).returncode == 0
        assert sh(journal.trigger_script(FID, root=str(root))).returncode == 0
        assert blkio_cgroup(target.pid) == f"{home.rstrip('/')}/chaoskit-{FID}"
        origin = next(root.rglob(f"{FID}.cgroup"))
        origin.unlink()
        res = sh(journal.revert_script(FID, root=str(root)))
        assert res.returncode == 0, res.stderr
        assert not cg.exists() and "chaoskit-" not in blkio_cgroup(target.pid)
    finally:
        target.kill()
        target.wait()
        release(cg, Path(BLKIO))
        release(parent, Path(BLKIO))
