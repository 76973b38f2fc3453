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
    try:
        manager.wait_healthy(90)
    except manager.LabError as exc:
        _rebuild(request, str(exc))
    yield


_REBUILT: list[str] = []


def _rebuild(request: pytest.FixtureRequest, why: str) -> None:
    """The lab did not heal within the reset's bound, even with its repairs: the earlier test left
    it broken. Rebuilt once per session (after its hosts' logs are kept), so one broken lab costs
    one rebuild and never every later test's setup; said at the end as `LAB REBUILT` (a defect to
    find, as a FLAKY line is). A second time, the session stops."""
    from flaky_report import keep_dir, safe_name

    from chaoskit.lab import manager
    from chaoskit.lab.spec import STATE_DIR

    if _REBUILT:
        pytest.exit(f"the lab broke again before {request.node.nodeid}: {why} (rebuilt once already: {_REBUILT[0]})",
                    returncode=1)
    dest = keep_dir(request.config) / f"lab-rebuilt-{safe_name(request.node.nodeid)}"
    for log in sorted((STATE_DIR / "hosts").glob("*/*.log")) + sorted((STATE_DIR / "hosts").glob("*/*.out")):
        target = dest / log.parent.name / log.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "rb") as src:  # the last MB of each: the tail says why
            src.seek(max(0, log.stat().st_size - 2**20))
            target.write_bytes(src.read())
    _REBUILT.append(f"before {request.node.nodeid}: {why} (hosts' logs: {dest})")
    stacks = manager.up_stacks()
    manager.down()
    manager.up(stacks=stacks)
    manager.wait_healthy(90)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _REBUILT:
        terminalreporter.write_line(f"LAB REBUILT: {line}")
