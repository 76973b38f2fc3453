"""A managed cluster (a cloud service with no host to SSH into): declared by its endpoints only,
refused where a host is needed (drills, host links), measured by experiments whose load and client
link run on the control node; an experiment's grid may mix chaoskit's workloads and the tool's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.playbook.experiment import ToolConfig, cell_load, summarise
from chaoskit.playbook.loader import load_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "inventories" / "lab.yaml"


def _inventory(tmp_path: Path, cluster: str) -> Path:
    p = tmp_path / "inv.yaml"
    head = "hosts:\n  a: {address: 10.1.0.1}\nclusters:\n  c:\n"
    p.write_text(head + textwrap.indent(textwrap.dedent(cluster), "    "))
    return p


@pytest.mark.parametrize("cluster, message", [
    ("engine: mysql\nmanaged: true\nuser: u\nendpoints: ['db.example:3306']\nmembers: [a]\n",
     "a managed cluster has no members"),
    ("engine: mysql\nmanaged: true\nuser: u\n", "is reached by its endpoints (MySQL) or dsn (PostgreSQL)"),
    ("engine: postgres\nmanaged: true\nuser: u\ndsn: host=db.example\nha: {kind: patroni}\n",
     "fails over by itself (the service's): ha: none, not patroni"),
    ("engine: mysql\nuser: u\nendpoints: ['db.example:3306']\n", "or managed: true for a service with no host"),
])
def test_a_managed_cluster_is_declared_by_its_endpoints_only(tmp_path: Path, cluster: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load_inventory(_inventory(tmp_path, cluster))
    assert info.value.field == "clusters.c" and message in info.value.detail, info.value.one_line()
    assert "\n" not in info.value.one_line()


def test_a_managed_postgres_by_its_dsn(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "engine: postgres\nmanaged: true\nuser: u\ndsn: host=db.example\n"))
    assert inv.clusters["c"].managed and inv.clusters["c"].members == ()
    assert inv.evidence()["clusters"]["c"]["managed"] is True


def test_a_drill_on_a_managed_cluster_is_refused_at_validate(tmp_path: Path) -> None:
    text = (ROOT / "playbooks" / "mariadb-crash-primary.yaml").read_text()
    path = tmp_path / "pb.yaml"
    path.write_text(text.replace("cluster: mariadb\n", "cluster: mariadb-managed\n", 1))
    with pytest.raises(InputError) as info:
        load_playbook(path, load_inventory(LAB))
    assert info.value.field == "cluster" and "is managed (no host to SSH into, no members)" in info.value.detail
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", str(path), "-i", str(LAB)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "cluster: cluster 'mariadb-managed' is managed" in res.stderr, res.stderr


def test_an_experiment_may_delay_only_a_managed_clusters_client_link(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nkind: sweep\ncluster: mariadb-managed\n"
                    "link: {source: my2, dest: 'role:primary', port: 3306}\ngrid: {delay_ms: [0, 1]}\n")
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "experiment", "run", str(path), "-i", str(LAB)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"error: {path}:4: link.source: cluster 'mariadb-managed' is managed"), line


def test_the_shipped_managed_sweep_mixes_both_load_sources() -> None:
    from chaoskit.playbook.experiment import Experiment
    from chaoskit.yamlsrc import load_yaml

    exp = Experiment.model_validate(load_yaml(ROOT / "playbooks" / "managed-mysql-latency-sweep.yaml").data)
    assert exp.cluster == "mariadb-managed" and exp.link is not None and exp.link.source == "client"
    assert exp.grid.delay_ms == (0.0, 1.0, 5.0) and set(exp.grid.workload) == {"oltp_read_write", "update"}
    tool = cell_load("oltp_read_write", 8, 2.0, 1000, exp.load, prepare=True)
    own = cell_load("update", 8, 2.0, 1000, exp.load, prepare=True)
    assert [g.tool for g in tool.client_groups()] == ["sysbench"] and tool.groups[0].sysbench.test == "oltp_read_write"
    assert [g.tool for g in own.client_groups()] == ["builtin"] and own.workload == "update"
    with pytest.raises(ValueError, match="not one of the workloads or sysbench tests"):
        Experiment.model_validate({"name": "x", "kind": "sweep", "cluster": "c", "load": {"tool": "sysbench"},
                                   "grid": {"workload": ["oltp_everything"]}})
    assert cell_load("update", 4, 2.0, 1000, ToolConfig(), prepare=False).groups == ()


def test_cells_of_both_sources_share_one_set_of_columns() -> None:
    rows = [{"workload": "oltp_read_write", "workers": 8, "delay_ms": 0.0, "tps": 900.0, "p50_ms": None,
             "tool_p99_ms_median_of_seconds": 18.0},
            {"workload": "update", "workers": 8, "delay_ms": 0.0, "tps": 4500.0, "p50_ms": 1.6}]
    cells = summarise(rows, ("workload", "workers", "delay_ms"))
    assert list(cells[0]) == list(cells[1])
    assert cells[1]["tool_p99_ms_median_of_seconds"] is None and cells[0]["tool_p99_ms_median_of_seconds"] == 18.0
