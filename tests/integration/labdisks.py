"""What every PostgreSQL member of the lab must have, whichever manager runs it: its data on a
filesystem of its own (so a disk_full drill fills that member's disk and nothing else) and WAL
kept within the lab's bounds (so a CI day of drills never fills that disk by itself)."""

from __future__ import annotations

import os
from pathlib import Path

from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Inventory
from chaoskit.lab.disks import BOUNDED_WAL


def assert_members_on_their_own_bounded_disks(lab: Inventory, cluster: str) -> None:
    """Each member's data directory is on a mounted filesystem (another device than the root's and
    than the other members'), owned by postgres, and the server runs with the lab's WAL bounds."""
    members = lab.clusters[cluster].members
    devices = {}
    for m in members:
        data = Path(m.data_dir or "")
        assert os.path.ismount(data.parent), m.host
        devices[m.host] = os.stat(data).st_dev
        assert data.parent.owner() == "postgres", m.host
    assert len(set(devices.values())) == len(devices) and os.stat("/").st_dev not in devices.values(), devices
    assert_bounded_wal(lab, cluster)


def assert_bounded_wal(lab: Inventory, cluster: str) -> None:
    """Every member's server runs with the lab's WAL bounds (asked of each server, not read from a
    file the manager may override)."""
    members = lab.clusters[cluster].members
    driver = driver_for(lab.clusters[cluster], lab)
    expected = {name: value.replace("MB", "") for name, value in BOUNDED_WAL.items()}
    for m in members:
        with driver.connect_member(m) as conn:
            shown = {name: conn.execute("SELECT setting FROM pg_settings WHERE name = %s", (name,)).fetchone()[0]
                     for name in BOUNDED_WAL}
        assert shown == expected, (m.host, shown)
