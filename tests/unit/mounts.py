"""A small tmpfs like a lab host's disk, with an empty data directory `pgdata` on it, unmounted
after the test (root only, as on a host)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs_disk(tmp_path: Path, size: str = "32m") -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    (mnt / "pgdata").mkdir()
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
