"""The one plugin helper: classes of a family found in a package's modules by their name
attribute (or a function of them), modules as plugins, several names for one plugin, unknown
names refused with the known ones listed, two plugins under one name refused, found once."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from chaoskit.plugins import Plugins, UnknownPlugin


@pytest.fixture()
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    root = tmp_path / "toyplugins"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "base.py").write_text(textwrap.dedent('''
        class Engine:
            name = ""
    '''))
    (root / "red.py").write_text(textwrap.dedent('''
        from toyplugins.base import Engine
        NAME = "red-stack"

        class Red(Engine):
            name = ("red", "crimson")

        class _Abstract(Engine):
            pass
    '''))
    (root / "blue.py").write_text(textwrap.dedent('''
        from toyplugins.base import Engine
        from toyplugins.red import Red  # imported, not defined here: not Blue's module's plugin

        class Blue(Engine):
            name = "blue"
    '''))
    (root / "notes.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toyplugins"
    for mod in [m for m in sys.modules if m == "toyplugins" or m.startswith("toyplugins.")]:
        del sys.modules[mod]


def test_classes_are_found_by_their_name_in_the_modules_that_define_them(package: str) -> None:
    from toyplugins.base import Engine  # type: ignore[import-not-found]

    engines: Plugins[type] = Plugins(package, Engine, "name", "engine", skip=("base",))
    found = engines.all()
    assert sorted(found) == ["blue", "crimson", "red"] and found["red"] is found["crimson"]
    assert found["blue"].__name__ == "Blue" and engines.get("crimson").__name__ == "Red"
    with pytest.raises(UnknownPlugin, match=r"^unknown engine 'green'; known: blue, crimson, red$"):
        engines.get("green")
    assert engines.all() is found  # found once


def test_modules_as_plugins_and_a_name_taken_twice(package: str) -> None:
    stacks: Plugins[ModuleType] = Plugins(package, ModuleType, "NAME", "stack")
    assert {n: m.__name__ for n, m in stacks.all().items()} == {"red-stack": "toyplugins.red"}
    from toyplugins.base import Engine

    twice: Plugins[type] = Plugins(package, Engine, lambda cls: "same" if cls.name else None, "engine")
    with pytest.raises(RuntimeError, match="two engines named 'same'"):
        twice.all()


def test_the_shipped_families_are_found() -> None:
    from chaoskit.backup.registry import TOOLS
    from chaoskit.db.registry import DRIVERS
    from chaoskit.faults.registry import FAMILIES
    from chaoskit.ha.registry import MANAGERS
    from chaoskit.inventory.haconfig import HA_CONFIGS
    from chaoskit.lab.recipes import RECIPES
    from chaoskit.workload.workloads import WORKLOADS

    assert set(MANAGERS.names()) == set(HA_CONFIGS.names()) == {
        "none", "patroni", "pg_auto_failover", "repmgr", "mha", "galera", "dm"}
    assert set(DRIVERS.names()) == {"postgres", "mysql", "dameng"}
    assert set(TOOLS.names()) == {"pgbackrest"}
    assert set(FAMILIES.names()) == {"process", "network", "relay", "stress", "replication", "disk", "data_dir"}
    assert {"base", "patroni", "mariadb", "pg_auto_failover", "repmgr", "mha", "galera", "loaders", "dr"} == \
        set(RECIPES.names())
    assert list(WORKLOADS) == ["bank", "ledger", "list-append", "oltp", "oltp-ro", "oltp-wo", "read", "sql",
                              "stale-reads", "update"]  # by module
