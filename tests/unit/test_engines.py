"""The load engines as one family: each module declares what it measures, what it speaks and its one
settings model; the playbook's client groups and the experiment's load take their `<tool>:` fields
from the engines found, never from a list kept by hand."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.inventory.loader import load_inventory
from chaoskit.playbook.experiment import ToolConfig, load_experiment
from chaoskit.playbook.models import GroupConfig
from chaoskit.workload.engine import ENGINES, Measures, engine, measures, tool_engine_refusal

ROOT = Path(__file__).resolve().parents[2]


def test_the_four_engines_are_found_by_name_with_what_each_measures() -> None:
    assert sorted(ENGINES.names()) == ["builtin", "jmeter", "pgbench", "sysbench"]
    # (edge resolution s, RPO, latency, profiles), as each tool's output allows (README "Load tools")
    assert measures("builtin") == Measures(0.0, True, True, True)
    assert measures("pgbench") == Measures(0.0, False, True, True)
    assert measures("sysbench") == Measures(1.0, False, False, False)
    assert measures("jmeter") == Measures(0.0, False, True, False)
    assert not engine("builtin").external() and all(engine(n).external() for n in ("pgbench", "sysbench", "jmeter"))
    assert engine("builtin").settings is None and engine("jmeter").paced_by == "its plan's timers"


def test_each_tools_settings_are_one_strict_model_used_by_groups_and_experiments_alike() -> None:
    for name in ("pgbench", "sysbench", "jmeter"):
        model = engine(name).settings
        assert model is not None and model.model_config["frozen"] and model.model_config["extra"] == "forbid"
        for fmt in (GroupConfig, ToolConfig):
            field = fmt.model_fields[name]
            assert field.default is None and model in getattr(field.annotation, "__args__", ()), (fmt, name)
    assert "builtin" not in GroupConfig.model_fields  # no settings, no field


def test_a_tool_speaks_the_families_it_declares() -> None:
    assert tool_engine_refusal("pgbench", "my", "mysql") == "pgbench drives postgres only; cluster my is mysql"
    assert tool_engine_refusal("sysbench", "my", "mysql") is None
    assert tool_engine_refusal("builtin", "dm", "dameng") is None  # chaoskit's own clients: every driver
    assert tool_engine_refusal("jmeter", "dm", "dameng") == (
        "jmeter drives postgres and mysql only; cluster dm is dameng")


def test_a_groups_settings_default_and_are_refused_beside_another_tool() -> None:
    g = GroupConfig.model_validate({"tool": "sysbench", "workers": 2})
    assert g.settings == engine("sysbench").settings() and g.settings.test == "oltp_read_write"  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"sysbench: \{...\} is for a group with tool: sysbench, not pgbench"):
        GroupConfig.model_validate({"tool": "pgbench", "sysbench": {"tables": 2}})
    with pytest.raises(ValueError, match=r"a jmeter group needs jmeter: \{plan: my-plan.jmx\}"):
        GroupConfig.model_validate({"tool": "jmeter"})
    with pytest.raises(ValueError, match="unknown load tool 'k6'; known: builtin, jmeter, pgbench, sysbench"):
        GroupConfig.model_validate({"tool": "k6"})


INV = """
hosts: {db1: {address: 10.0.0.1}}
clusters:
  pg: {engine: postgres, user: u, members: [db1]}
  my: {engine: mysql, user: u, members: [db1]}
"""


def _experiment(tmp_path: Path, load: str, cluster: str = "pg") -> Path:
    (tmp_path / "inv.yaml").write_text(INV)
    p = tmp_path / "exp.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: ladder
        kind: ramp
        cluster: {cluster}
        load: {load}
        grid: {{workers: [4, 8], workload: [update]}}
        """))
    return p


def test_an_experiments_tool_settings_sit_under_the_tools_name_as_in_a_group(tmp_path: Path) -> None:
    inv = load_inventory(str(_experiment(tmp_path, "{tool: sysbench}").parent / "inv.yaml"))
    exp = load_experiment(_experiment(tmp_path, "{tool: sysbench, sysbench: {tables: 2, table_size: 500}}"), inv)
    assert exp.load is not None and exp.load.settings.tables == 2 and exp.load.settings.table_size == 500
    # the old flat form is refused with the new place, one line naming file, line and field
    with pytest.raises(InputError, match=r"exp.yaml:4: load: tables, table_size now go under the tool's name, as a "
                                         r"playbook's client group says them: load: \{tool: sysbench, sysbench: "
                                         r"\{tables: ..., table_size: ...\}\}"):
        load_experiment(_experiment(tmp_path, "{tool: sysbench, tables: 2, table_size: 500}"), inv)
    with pytest.raises(InputError, match=r"exp.yaml:4: load.sysbench.tables: Input should be greater than or equal "
                                         r"to 1"):
        load_experiment(_experiment(tmp_path, "{tool: sysbench, sysbench: {tables: 0}}"), inv)
    with pytest.raises(InputError, match=r"load: prepare now go under the tool's name.*pgbench: \{init: ...\}"):
        load_experiment(_experiment(tmp_path, "{tool: pgbench, prepare: false}"), inv)
    with pytest.raises(InputError, match="builtin runs no experiment cell; tools that do: jmeter, pgbench, sysbench"):
        load_experiment(_experiment(tmp_path, "{tool: builtin}"), inv)
    with pytest.raises(InputError, match="pgbench drives postgres only; cluster my is mysql"):
        load_experiment(_experiment(tmp_path, "{tool: pgbench}", cluster="my"), inv)
