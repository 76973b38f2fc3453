"""The integration sessions `.ci/run` runs on one lab (tests/integration/lanes.py): which modules each
one takes, what it owns, and the lab health it waits for."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from chaoskit.lab import manager

_spec = importlib.util.spec_from_file_location("lanes", Path(__file__).parents[1] / "integration" / "lanes.py")
assert _spec and _spec.loader
lanes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lanes)


def module(name: str, **attrs: object) -> ModuleType:
    m = ModuleType(name)
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


ALONE = module("test_a", ALONE="it takes the lab down")
PLAIN = module("test_b")
DEFAULTS_ONLY = module("test_c", LAB_STACKS=("patroni", "mariadb"))
MHA = module("test_d", LAB_STACKS=("mha",))
MANAGERS = module("test_e", LAB_STACKS=("patroni", "mariadb", "pg_auto_failover", "repmgr"))


def test_each_module_has_one_group() -> None:
    assert [lanes.group_of(m) for m in (ALONE, PLAIN, DEFAULTS_ONLY, MHA, MANAGERS)] == \
        ["alone", "default", "default", "stacks", "stacks"]
    # alone wins over added stacks: such a module needs the lab to itself whatever it adds
    assert lanes.group_of(module("test_f", ALONE="x", LAB_STACKS=("galera",))) == "alone"


@pytest.mark.parametrize(("group", "owned"), [
    ("", None), ("alone", None),
    ("default", ("base", "patroni", "mariadb", "loaders")),
    ("stacks", ("mha", "pg_auto_failover", "repmgr")),
])
def test_what_a_session_owns(monkeypatch: pytest.MonkeyPatch, group: str, owned: tuple[str, ...] | None) -> None:
    monkeypatch.setenv(lanes.ENV, group)
    lanes.set_owned([PLAIN, MHA, MANAGERS])
    try:
        assert lanes.owned() == owned
    finally:
        lanes._OWNED[0] = None


def test_an_unknown_group_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lanes.ENV, "everything")
    with pytest.raises(lanes.LaneError, match=r"'everything' is not one of alone, default, stacks"):
        lanes.group()


def test_the_hosts_of_owned_stacks_only() -> None:
    assert lanes.hosts(("mha",)) == ["mham", "mha1", "mha2", "mha3"]
    assert lanes.hosts(("base", "patroni")) == ["dcs1", "pg1", "pg2", "pg3"]


def test_a_session_without_the_base_never_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    class Recipe:
        def __init__(self, name: str, ok: bool) -> None:
            self.name, self.ok = name, ok

        def health(self, spec: object) -> tuple[bool, str]:
            asked.append(self.name)
            return self.ok, f"{self.name} down"

    recipes = {"base": Recipe("base", False), "mha": Recipe("mha", True)}
    monkeypatch.setattr(manager, "recipe", lambda name: recipes[name])
    assert manager.health(spec=object(), stacks=("mha",), with_base=False) == (True, "ok")  # type: ignore[arg-type]
    assert asked == ["mha"]
    assert manager.health(spec=object(), stacks=("mha",)) == (False, "base down")  # type: ignore[arg-type]
