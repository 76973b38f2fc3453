"""A managed cluster (a cloud service with no host to SSH into): declared by its endpoints only,
refused where a host is needed (host faults, actions, host links), drilled through its client
link with its endpoints standing in for members, measured by experiments whose load and client
link run on the control node; an experiment's grid may mix chaoskit's workloads and the tool's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaoskit.db.mysql import MySQLDriver
from chaoskit.db.roles import observed
from chaoskit.drill.experiment import cell_load, summarise
from chaoskit.errors import InputError, PreflightError
from chaoskit.faults.manager import FaultManager
from chaoskit.inventory import load_inventory
from chaoskit.inventory.fanout import RemotePool
from chaoskit.playbook.experiment import ToolConfig
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


def test_the_shipped_managed_drill_validates_and_cuts_only_the_client_link() -> None:
    pb = load_playbook(ROOT / "playbooks" / "managed-mysql-client-link.yaml", load_inventory(LAB)).playbook
    assert pb.cluster == "mariadb-managed" and [f.target for st in pb.steps for f in st.specs] == ["client", "client"]
    assert "replica_convergence" not in pb.checks


@pytest.mark.parametrize("old, new, field, words", [
    # a fault on a member's host (its server process): there is no host
    ("cluster: mariadb\n", "cluster: mariadb-managed\n", "steps[0].fault.target", "not 'role:primary'"),
    # an action needs a member's host or the manager
    ("    fault: {kind: kill, target: \"role:primary\", processes: [mariadb], duration: 5s}\n",
     "    action: {kind: restart, target: my1}\n", "steps[0].action", "restart needs a member's host"),
    # the members one by one are out of reach
    ("    fault: {kind: kill, target: \"role:primary\", processes: [mariadb], duration: 5s}\n",
     "    fault: {kind: proxy, target: client, down: true, duration: 5s}\n", "checks",
     "replica_convergence reads each member on its own"),
])
def test_a_drill_on_a_managed_cluster_refuses_what_needs_a_host(tmp_path: Path, old: str, new: str, field: str,
                                                                 words: str) -> None:
    text = (ROOT / "playbooks" / "mariadb-crash-primary.yaml").read_text()
    assert old in text and "cluster: mariadb\n" in text and "replica_convergence" in text
    path = tmp_path / "pb.yaml"
    path.write_text(text.replace("cluster: mariadb\n", "cluster: mariadb-managed\n", 1).replace(old, new, 1))
    with pytest.raises(InputError) as info:
        load_playbook(path, load_inventory(LAB))
    assert info.value.field == field and words in info.value.detail, info.value.one_line()
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", str(path), "-i", str(LAB)],
                         capture_output=True, text=True, timeout=60)
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and f": {field}: " in line and "mariadb-managed" in line, res.stderr


def test_a_managed_services_endpoints_stand_in_for_its_members(tmp_path: Path) -> None:
    """MySQL: each `endpoints` entry; PostgreSQL: each host
    of the DSN with its port (one port for all, or one each); an IPv6 address in brackets. A cluster
    with hosts is itself."""
    my = load_inventory(_inventory(tmp_path, "engine: mysql\nmanaged: true\nuser: u\n"
                                              "endpoints: ['10.1.0.7:3306', 'db.example:3307']\n"))
    seen = observed(my.clusters["c"], my)
    assert [(m.host, m.db_address, m.db_port) for m in seen.members] == [
        ("10.1.0.7:3306", "10.1.0.7", 3306), ("db.example:3307", "db.example", 3307)]
    assert seen.managed and my.clusters["c"].members == ()  # the inventory's cluster is untouched
    assert [my.member_address(m) for m in seen.members] == ["10.1.0.7", "db.example"]
    pg = load_inventory(_inventory(tmp_path, "engine: postgres\nmanaged: true\nuser: u\ndsn: host=a.example,::1 "
                                              "port=5433,5434 target_session_attrs=read-write\n"))
    assert [(m.host, m.db_port) for m in observed(pg.clusters["c"], pg).members] == [
        ("a.example:5433", 5433), ("[::1]:5434", 5434)]
    one = load_inventory(_inventory(tmp_path, "engine: postgres\nmanaged: true\nuser: u\ndsn: host=b.example\n"))
    assert [m.host for m in observed(one.clusters["c"], one).members] == ["b.example:5432"]
    lab = load_inventory(LAB)
    assert observed(lab.clusters["mariadb"], lab) is lab.clusters["mariadb"]


class _Endpoints(MySQLDriver):
    """A MySQL driver whose servers are a dict: endpoint address -> writable (None: refuses)."""

    def __init__(self, *args: object, servers: dict[str, bool | None], **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.servers = servers

    def password(self) -> str | None:
        return "unused"  # (the lab's secret file exists only while the lab is up)

    def _connect(self, host: str, port: int) -> object:
        if self.servers.get(host) is None:
            raise ConnectionRefusedError(f"{host}:{port} refused")
        return host

    def is_writable(self, conn: object) -> bool:
        return bool(self.servers[str(conn)])

    def query(self, conn: object, sql: str, params: tuple | list = ()) -> list[tuple]:
        return [(151,)] if "max_connections" in sql else [("10.11.6",)]

    @staticmethod
    def close_quietly(conn: object) -> None:
        pass


def _no_host(name: str) -> object:
    raise AssertionError(f"the preflight of a managed service reached host {name}")


def test_a_managed_preflight_asks_the_endpoints_over_sql_and_no_host(tmp_path: Path) -> None:
    from chaoskit.db.roles import sql_roles
    from chaoskit.drill.preflight import run_preflight
    from chaoskit.ha.none import NoManager, sql_member_view

    inv = load_inventory(LAB)
    pb = load_playbook(ROOT / "playbooks" / "managed-mysql-client-link.yaml", inv).playbook
    cluster = observed(inv.clusters["mariadb-managed"], inv)
    first, second = (m.db_address for m in cluster.members)

    def preflight(servers: dict[str, bool | None]) -> dict:
        driver = _Endpoints(inv.clusters["mariadb-managed"], inv, servers=servers)
        ha = NoManager(cluster, inv, None)
        # ha: none's view is the servers' own answers, asked here through the scripted driver
        ha.members = lambda: [sql_member_view(m, r, e)  # type: ignore[method-assign]
                              for m, (r, e) in sql_roles(cluster, inv, driver).items()]
        pool = RemotePool(inv, factory=_no_host)  # type: ignore[arg-type]
        return run_preflight(pb, inv, pool, ha, FaultManager(inv, pool), False, driver=driver)

    pf = preflight({first: False, second: True})
    assert pf["primary_before"] == f"{second}:3306" and pf["clock_offsets"] == {} and pf["capabilities"] == {}
    assert [(r["member"], r["sql_role"]) for r in pf["roles_before"]] == [(f"{first}:3306", "replica"),
                                                                         (f"{second}:3306", "primary")]
    assert pf["warnings"][0].startswith("managed service: no host checks") and "its 2 endpoint(s)" in pf["warnings"][0]
    with pytest.raises(PreflightError, match=rf"down=\['{first}:3306 \("):
        preflight({first: None, second: True})
    with pytest.raises(PreflightError, match="leaders=none"):
        preflight({first: False, second: False})


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
    assert [g.tool for g in tool.client_groups()] == ["sysbench"] and tool.groups[0].settings.test == "oltp_read_write"
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
