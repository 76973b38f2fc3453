"""Each PostgreSQL member of the lab keeps its data directory on a small filesystem of its own, so
a `disk_full` drill fills that filesystem and nothing else of this machine. Patroni's members get
an ext4 image loop-mounted at `<host dir>/disk` (a block device, so `disk_slow` can throttle it),
or a sized tmpfs where loop devices do not work; pg_auto_failover's and repmgr's members get a
sized tmpfs (`disk_slow` is refused there with its reason: no block device).

The image is sparse and made without reserved blocks (`-m 0`): the free space PostgreSQL sees is
the free space a `disk_full` fault leaves. `lab down` unmounts before it removes the files. A
tmpfs does not outlive a reboot: its stack is rebuilt by the next `lab up` (its revive fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from chaoskit.lab.spec import STATE_DIR, LabHost, Paths

# the members whose data gets a loop-mounted image: Patroni's
MEMBER_ROLES = ("pg",)
# the members whose data gets a sized tmpfs: pg_auto_failover's and repmgr's. On loop images CI
# twice left a pg_auto_failover node unable to come back (once "demoted > catchingup" for good;
# once after the monitor, whose lab health checks allow 1 s and one retry, took the healthy
# primary for unhealthy while the repmgr stack was built beside it: "WAL location ... belongs to
# timeline 1, but previous recovered WAL file came from timeline 2"). The likely cause, not proven:
# fsyncs through a loop device on a loaded 2-core machine slow enough to miss those checks; a tmpfs
# never waits on a device.
TMPFS_ROLES = ("pgaf", "repmgr", "pgdr", "pgbackrest-repo", "pg-restore")
# every lab host whose data lives under disk/
POSTGRES_ROLES = ("pg", "pgaf", "pgaf-monitor", "repmgr", "pgdr", "pgbackrest-repo", "pg-restore")
DISK_SIZE_MB = 2048  # room for a member's bounded WAL (BOUNDED_WAL) and a CI day of drills
# What each member keeps of its WAL, so that it fits its disk: at most about max_wal_size plus the
# larger of the two keeps. wal_keep_size also lets an old primary rewound by the manager replay
# from the checkpoint the timelines share (with 128 MB, Patroni's new leader had recycled it and
# the old primary stayed "starting" for good). pg_autoctl's own default is sized for the machine
# (8 GB here, four times such a disk), so pg_auto_failover's members get the bound too.
BOUNDED_WAL = {"wal_keep_size": "512MB", "max_wal_size": "256MB", "max_slot_wal_keep_size": "512MB"}
IMAGES = STATE_DIR / "disks"


def image(host: LabHost) -> Path:
    return IMAGES / f"{host.name}.img"


def is_mounted(path: Path) -> bool:
    return os.path.ismount(path)


def ensure_disk(host: LabHost) -> str:
    """The host's `disk` directory ready for its data directory: mounted (loop image, else tmpfs)
    for a member, a plain directory otherwise; owned by postgres. Returns what backs it
    ("loop", "tmpfs" or "dir"). Idempotent: a mounted disk is left as it is."""
    mnt = Paths.pg_disk(host)
    mnt.mkdir(parents=True, exist_ok=True)
    kind = "dir"
    if host.role in MEMBER_ROLES:
        kind = _backing(mnt) if is_mounted(mnt) else _mount(host, mnt)
    elif host.role in TMPFS_ROLES:
        kind = _backing(mnt) if is_mounted(mnt) else _mount_tmpfs(mnt)
    shutil.chown(mnt, "postgres", "postgres")
    mnt.chmod(0o755)
    return kind


def remount(host: LabHost) -> bool:
    """A built member's disk mounted again where it is not (after a reboot: the image outlived
    the mount); nothing where the lab never built one. True if it mounted something."""
    mnt = Paths.pg_disk(host)
    if host.role not in MEMBER_ROLES or not image(host).exists() or is_mounted(mnt):
        return False
    return subprocess.run(["mount", "-o", "loop", "--", str(image(host)), str(mnt)], capture_output=True,
                          check=False).returncode == 0


def _backing(mnt: Path) -> str:
    res = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--mountpoint", str(mnt)], capture_output=True,
                         text=True, check=False)
    return "tmpfs" if res.stdout.strip() == "tmpfs" else "loop"


def _mount(host: LabHost, mnt: Path) -> str:
    IMAGES.mkdir(parents=True, exist_ok=True)
    img = image(host)
    if not img.exists():
        with open(img, "wb") as fh:
            fh.truncate(DISK_SIZE_MB * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", f"ck-{host.name}", str(img)], check=True,
                       capture_output=True)
    res = subprocess.run(["mount", "-o", "loop", "--", str(img), str(mnt)], capture_output=True, text=True,
                         check=False)
    if res.returncode == 0:
        return "loop"
    img.unlink(missing_ok=True)  # loop devices do not work here: a sized tmpfs holds the data instead
    return _mount_tmpfs(mnt)


def _mount_tmpfs(mnt: Path) -> str:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE_MB}m,mode=0755", "--", "tmpfs", str(mnt)],
                   check=True, capture_output=True)
    return "tmpfs"


def release_disks(hosts: list[LabHost] | tuple[LabHost, ...]) -> list[str]:
    """Unmount every lab disk (its loop device goes with it: mounted with autoclear); a disk still
    busy is detached lazily. Returns what could not be unmounted."""
    stuck = []
    for host in hosts:
        mnt = Paths.pg_disk(host)
        if not is_mounted(mnt):
            continue
        if subprocess.run(["umount", "--", str(mnt)], capture_output=True, check=False).returncode != 0 and \
                subprocess.run(["umount", "-l", "--", str(mnt)], capture_output=True, check=False).returncode != 0:
            stuck.append(str(mnt))
    return stuck
