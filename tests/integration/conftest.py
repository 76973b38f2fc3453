"""One lab per test session: brought up once, always torn down (a lab already up is used and left
up); tests reset state, not the lab. Sessions that share one lab (`.ci/run`): tests/integration/lanes.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import lanes
import pytest

from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory


def _extra_stacks(item: pytest.Item) -> tuple[str, ...]:
    """The stacks a module adds to the session's lab (its `LAB_STACKS`, beyond the default ones)."""
    return lanes.extra_stacks(getattr(item, "module", None))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    group = lanes.group()
    if group is not None:  # one of the sessions `.ci/run` runs on one lab (tests/integration/lanes.py)
        other = [it for it in items if lanes.group_of(getattr(it, "module", None)) != group]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [it for it in items if it not in other]
    lanes.set_owned(list({id(m): m for it in items if (m := getattr(it, "module", None))}.values()))
    # Modules that add a stack run after those on the default lab, and each removes its stacks
    # when no later module needs them (`lab_stacks`): an idle stack costs CPU the drills of the
    # other modules need (Galera and MHA about 12% of this 2-core machine, pg_auto_failover and
    # repmgr about 10%), and every reset's health wait checks it. Stable: order within a module,
    # and among the modules of each kind, is kept.
    items.sort(key=lambda it: bool(_extra_stacks(it)))
    later: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        extra = _extra_stacks(item)
        if extra and (not later or later[-1][0] != item.module.__name__):
            later.append((item.module.__name__, extra))
    _PLAN[:] = later


_PLAN: list[tuple[str, tuple[str, ...]]] = []  # (module, stacks it adds), in the order they run
_KEPT: set[str] = set()  # the stacks of a lab that was already up when the session began: left up


@pytest.fixture(scope="module", autouse=True)
def lab_stacks(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a module that added stacks, those no later module adds are removed again."""
    yield
    name = request.module.__name__
    mine = next((stacks for module, stacks in _PLAN if module == name), ())
    if not mine:
        return
    index = [module for module, _ in _PLAN].index(name)
    needed_later = {s for _, stacks in _PLAN[index + 1:] for s in stacks}
    from chaoskit.lab import manager

    drop = [s for s in mine if s not in needed_later and s in manager.up_stacks() and s not in _KEPT
            and (lanes.owned() is None or s in lanes.owned())]
    if drop:
        manager.down_stacks(drop)


@pytest.fixture(scope="session")
def lab() -> Iterator[Inventory]:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the lab needs root on Linux")
    from chaoskit.lab import manager
    from chaoskit.lab.inventory_file import lab_inventory

    if lanes.owned() is not None:
        # this session shares the lab with another one (`.ci/run`): it was brought up for both,
        # with every stack either needs, and is taken down after both
        if not manager.up_stacks():
            pytest.exit(f"${lanes.ENV} is set but the lab is not up: `chaoskit lab up --stack ...` first", returncode=1)
        yield lab_inventory()
        return
    before = manager.up_stacks()
    started = manager.up()
    if started.already_up:
        # a lab someone brought up (`chaoskit lab up`) to run one module against: used and left up,
        # with every stack it had (the health check before the first test still applies)
        _KEPT.update(before)
        yield lab_inventory()
        return
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
    mine = lanes.owned()
    fm = FaultManager(lab_inv)
    try:  # a session sharing the lab heals only its own hosts: the other one's drill goes on
        fm.recover(hosts=None if mine is None else [h for h in lanes.hosts(mine) if h in lab_inv.hosts])
    finally:
        fm.close()
    try:
        lanes.wait_owned(90)
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

    if lanes.owned() is not None:
        pytest.exit(f"the lab did not heal before {request.node.nodeid}: {why} (a session sharing the lab "
                    "never rebuilds it: the other session's drills run on it)", returncode=1)
    if _REBUILT:
        pytest.exit(f"the lab broke again before {request.node.nodeid}: {why} (rebuilt once already: {_REBUILT[0]})",
                    returncode=1)
    dest = keep_dir(request.config) / f"lab-rebuilt-{safe_name(request.node.nodeid)}"
    lanes.copy_log_tails(dest, 2**20)  # the last MB of each host's logs
    _REBUILT.append(f"before {request.node.nodeid}: {why} (hosts' logs: {dest})")
    stacks = manager.up_stacks()
    manager.down()
    manager.up(stacks=stacks)
    manager.wait_healthy(90)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _REBUILT:
        terminalreporter.write_line(f"LAB REBUILT: {line}")
