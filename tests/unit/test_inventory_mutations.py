"""Every scalar of the shipped inventories replaced, one at a time, by a list or a mapping (what a
typo in YAML makes: `kind: [patroni]`, `port: {5432}`): loading gives the one-line error
(InputError: file, line, field) or a valid inventory, never another exception. Issue 43: a list where
a plugin's name belongs ended in `TypeError: unhashable type: 'list'` from the plugin lookup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.plugins import UnknownPlugin

ROOT = Path(__file__).parents[2]
# the examples a user starts from (lab.yaml is written by `lab up`, and its ~500 scalars cost a minute)
INVENTORIES = [p for p in sorted((ROOT / "inventories").glob("*.yaml")) if p.name != "lab.yaml"]


def scalar_paths(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in scalar_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in scalar_paths(v, (*path, i))]
    return [path]


def replaced(node: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(node, dict):
        return {k: (replaced(v, tuple(rest), value) if k == head else v) for k, v in node.items()}
    return [replaced(v, tuple(rest), value) if i == head else v for i, v in enumerate(node)]


@pytest.mark.parametrize("inventory", INVENTORIES, ids=lambda p: p.name)
def test_a_list_or_a_mapping_in_place_of_any_scalar_is_one_line_of_bad_input(inventory: Path,
                                                                              tmp_path: Path) -> None:
    data = yaml.safe_load(inventory.read_text())
    paths = scalar_paths(data)
    assert len(paths) > 20
    target = tmp_path / inventory.name
    tried = 0
    for path in paths:
        for value in ([_leaf(data, path)], {"x": _leaf(data, path)}):
            target.write_text(yaml.safe_dump(replaced(data, path, value), sort_keys=False))
            try:
                load_inventory(target)
            except InputError as exc:
                assert "\n" not in str(exc) and str(target) in str(exc), (path, str(exc))
            tried += 1
    assert tried == 2 * len(paths)


def _leaf(node: Any, path: tuple) -> Any:
    for key in path:
        node = node[key]
    return node


def test_every_plugin_family_refuses_a_name_that_is_not_a_string() -> None:
    from chaoskit.db.registry import DRIVERS
    from chaoskit.faults.registry import FAMILIES
    from chaoskit.ha.registry import MANAGERS
    from chaoskit.inventory.haconfig import HA_CONFIGS
    from chaoskit.lab.recipes import RECIPES

    for family in (DRIVERS, FAMILIES, MANAGERS, HA_CONFIGS, RECIPES):
        for bad in (["patroni"], {"kind": "x"}, 3, None):
            with pytest.raises(UnknownPlugin, match="not a name"):
                family.get(bad)  # type: ignore[arg-type]
