"""A new HA stack is its manager module, its lab recipe and its playbooks: nothing else is edited.
The test writes a toy manager and a toy recipe into throwaway directories added to the two
packages' search paths, and checks that inventory validation, the manager factory, the lab's hosts
and stacks, the rendered lab inventory and playbook validation all pick them up."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import chaoskit.ha
import chaoskit.lab.recipes
from chaoskit.errors import InputError
from chaoskit.ha import registry
from chaoskit.inventory.haconfig import HA_CONFIGS, validate_config

MANAGER = '''
"""toyha: a manager that exists only in this test."""
from typing import Literal

from chaoskit.ha.base import LEADER, REPLICA, HaConfig, HAManager, MemberView


class ToyConfig(HaConfig):
    kind: Literal["toyha"] = "toyha"
    quorum: int = 2


class ToyManager(HAManager):
    kind = "toyha"
    Config = ToyConfig

    def members(self):
        return [MemberView(m.host, LEADER if i == 0 else REPLICA) for i, m in enumerate(self.cluster.members)]
'''

RECIPE = '''
"""toystack: a lab stack that exists only in this test."""
from chaoskit.lab.spec import LabHost, Paths

NAME = "toystack"
HOSTS = (LabHost("ty1", 91, "toy", NAME), LabHost("ty2", 92, "toy", NAME))


def build(b):
    raise NotImplementedError("never built in a unit test")


def health(spec):
    return True, "ok"


def postgres_data(spec):
    return []


def clusters(spec):
    return {"toy": {"engine": "postgres", "ha": {"kind": "toyha", "quorum": 3},
                    "members": [{"host": h.name, "db_port": 5490 + h.octet - 90,
                                 "data_dir": str(Paths.pg_data(h)),
                                 "processes": {"postgres": {"pid_file": str(Paths.pg_data(h)) + "/postmaster.pid"}}}
                                for h in HOSTS],
                    "database": "postgres", "user": "postgres"}}
'''


@pytest.fixture()
def toy_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ha_dir, recipe_dir = tmp_path / "ha", tmp_path / "recipes"
    ha_dir.mkdir()
    recipe_dir.mkdir()
    (ha_dir / "toyha.py").write_text(textwrap.dedent(MANAGER))
    (recipe_dir / "toystack.py").write_text(textwrap.dedent(RECIPE))
    monkeypatch.setattr(chaoskit.ha, "__path__", [*chaoskit.ha.__path__, str(ha_dir)])
    monkeypatch.setattr(chaoskit.lab.recipes, "__path__", [*chaoskit.lab.recipes.__path__, str(recipe_dir)])
    for plugins in (registry.MANAGERS, HA_CONFIGS, chaoskit.lab.recipes.RECIPES):
        plugins.forget()  # found again with the toy manager and recipe
    yield
    for plugins in (registry.MANAGERS, HA_CONFIGS, chaoskit.lab.recipes.RECIPES):
        plugins.forget()


def test_a_new_stack_is_its_manager_its_recipe_and_its_playbooks(toy_stack: None, tmp_path: Path) -> None:
    assert "toyha" in registry.managers()
    assert chaoskit.lab.recipes.stack_names()[-1] == "toystack"
    assert "toystack" not in chaoskit.lab.recipes.default_stacks()
    assert [h.name for h in chaoskit.lab.recipes.lab_spec().of_stacks({"toystack"})] == ["dcs1", "ty1", "ty2"]

    from chaoskit.inventory.loader import load_inventory
    from chaoskit.lab.inventory_file import render

    inv_file = tmp_path / "lab.yaml"
    inv_file.write_text(render(chaoskit.lab.recipes.lab_spec()))
    inv = load_inventory(inv_file)
    toy = inv.clusters["toy"]
    assert toy.ha.kind == "toyha" and toy.ha.quorum == 3  # the manager's own config model validated it
    manager = registry.manager_for(toy, inv)
    assert [(v.member, v.role) for v in manager.members()] == [("ty1", "leader"), ("ty2", "replica")]

    from chaoskit.playbook.loader import load_playbook

    pb = tmp_path / "toy-kill-primary.yaml"
    pb.write_text("name: toy-kill-primary\ncluster: toy\nduration: 30s\nsteps:\n"
                  "  - {at: 12s, expect: failover, fault: {kind: crash, target: 'role:primary', duration: 10s}}\n")
    assert load_playbook(pb, inv).playbook.cluster == "toy"
    # a process fault on a stack whose members declare no processes is refused at validate, as the
    # planner would refuse it at the fault's instant
    bare = inv.clusters["toy"].replace(members=[{"host": m.host, "db_port": m.db_port} for m in toy.members])
    inv_bare = inv.replace(clusters={**inv.clusters, "toy": bare})
    with pytest.raises(InputError, match=r"toy-kill-primary.yaml:5: steps\[0\]\.fault\.processes: ty1: no processes"):
        load_playbook(pb, inv_bare)


def test_a_wrong_field_in_the_new_managers_config_is_one_line(toy_stack: None, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^quorum: Input should be a valid integer"):
        validate_config({"kind": "toyha", "quorum": "many"})
