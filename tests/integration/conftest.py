"""One lab per test session: brought up once, always torn down; tests reset state, not the lab."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def lab() -> Iterator[Inventory]:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the lab needs root on Linux")
    from chaoskit.lab import manager
    from chaoskit.lab.inventory_file import lab_inventory

    manager.up()
    try:
        yield lab_inventory()
    finally:
        manager.down()


@pytest.fixture(scope="session")
def pool(lab: Inventory) -> Iterator[RemotePool]:
    with RemotePool(lab) as p:
        yield p


@pytest.fixture(autouse=True)
def lab_reset(request: pytest.FixtureRequest) -> Iterator[None]:
    """Reset between tests instead of rebuilding: no journaled fault left, cluster healthy again
    (a test that failed over or restarted a node leaves it to heal, bounded)."""
    if "lab" not in request.fixturenames:
        yield
        return
    from chaoskit.faults.manager import FaultManager
    from chaoskit.lab import manager

    lab_inv = request.getfixturevalue("lab")
    fm = FaultManager(lab_inv)
    try:
        fm.recover()
    finally:
        fm.close()
    manager.wait_healthy(90)
    yield
