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
