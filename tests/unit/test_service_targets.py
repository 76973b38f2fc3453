"""Faults on the services of the HA system that are no cluster member's (etcd, HAProxy, a monitor,
a manager): declared per host in the inventory (`hosts.<name>.processes`, found by pid file like a
member's), named by host (`target: dcs1, processes: [etcd]`) or by tag
(`target: tag:component=dcs@all`, the count always written). Refused in one line: a tag target
without its count, a tag nobody carries, a process the named host does not declare, a host with
no process at all, a process declared twice on one host. Nothing here touches a host."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from chaoskit.errors import InputError
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import parse_fault
from chaoskit.faults.targets import named_hosts, resolve_hosts, validate_target
from chaoskit.inventory import load_inventory
from chaoskit.playbook.loader import load_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
LAB_DOC = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())


def three_etcd(tmp_path: Path, **change: dict) -> Path:
    """The lab inventory with two more DCS hosts (etcd2, etcd3), tagged like dcs1."""
    doc = copy.deepcopy(LAB_DOC)
    for n, octet in (("etcd2", 91), ("etcd3", 92)):
        doc["hosts"][n] = {"address": f"10.77.0.{octet}", "tags": {"component": "dcs"},
                           "processes": {"etcd": {"pid_file": f"/run/{n}.pid", "comm": "etcd"}}}
    for host, fields in change.items():
        doc["hosts"][host].update(fields)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_tag_target_names_the_tagged_hosts_in_inventory_order(tmp_path: Path) -> None:
    inv = load_inventory(three_etcd(tmp_path))
    never = lambda: pytest.fail("a tag target never asks for live roles")  # noqa: E731
    assert resolve_hosts("tag:component=dcs@all", None, never, inv) == ["dcs1", "etcd2", "etcd3"]
    assert resolve_hosts("tag:component=dcs@one", None, never, inv) == ["dcs1"]
    assert resolve_hosts("tag:component=dcs@minority", None, never, inv) == ["dcs1"]  # 1 of 3
    assert resolve_hosts("tag:COMPONENT=DCS@all", None, never, inv) == ["dcs1", "etcd2", "etcd3"]  # tags lowercased
    assert named_hosts("role:primary", inv) == [] and named_hosts("etcd2", inv) == ["etcd2"]


def test_the_lab_declares_its_services_on_their_hosts() -> None:
    assert LAB.hosts_tagged("component", "dcs") == ["dcs1"]
    assert set(LAB.processes_on("dcs1")) == {"etcd", "pgbouncer", "postgres"}  # etcd, PgBouncer, pg-single
    assert set(LAB.processes_on("mham")) == {"haproxy", "masterha_manager"}
    assert set(LAB.processes_on("gproxy")) == {"haproxy"}
    assert set(LAB.processes_on("afm")) == {"pg_autoctl", "postgres"}
    assert LAB.processes_on("mham")["masterha_manager"].comm == "perl"  # the lab execs perl through a wrapper
    assert set(LAB.processes_on("pg1")) == {"postgres", "patroni"}


@pytest.mark.parametrize(("target", "message"), [
    ("tag:component=dcs", "a tag target names how many of its hosts"),
    ("tag:component=dcs@some", "a tag target names how many of its hosts"),
    ("tag:component@all", "a tag target names how many of its hosts"),
])
def test_a_tag_target_without_its_count_is_not_a_target(target: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault({"kind": "stop", "target": target})


def test_a_tag_nobody_carries_is_refused() -> None:
    with pytest.raises(InputError, match="no host of the inventory carries tag component=etcd"):
        validate_target(parse_fault({"kind": "stop", "target": "tag:component=etcd@all"}), LAB)


def test_the_planner_takes_a_service_of_a_host_that_is_no_member() -> None:
    fm = FaultManager(LAB)
    try:
        spec = parse_fault({"kind": "kill", "target": "dcs1", "processes": ["etcd"]})
        facts = fm.facts(spec, "dcs1")
        assert facts.processes["etcd"].pid_file == "/var/lib/chaoskit-lab/hosts/dcs1/etcd.pid"
        _, planned = fm.plan(spec, fault_id="0" * 12)
        assert [p.host for p in planned] == ["dcs1"]
        files = planned[0].files  # journaled on the host: pid file, comm, start command
        assert files["env"] == "PROCS=etcd\nSIGNAL=KILL\nONLY_RECORDED=1\n"  # starts again only what it killed
        assert files["proc.etcd"].splitlines()[:2] == ["/var/lib/chaoskit-lab/hosts/dcs1/etcd.pid", "etcd"]
        assert files["proc.etcd"].splitlines()[3] == "/var/lib/chaoskit-lab/hosts/dcs1/start-etcd"
        fm.rehearse(parse_fault({"kind": "stop", "target": "tag:component=dcs@all", "processes": ["etcd"]}))
    finally:
        fm.close()


PLAYBOOK = """\
name: svc
cluster: pg
load: {workload: ledger, workers: 1}
duration: 30s
baseline: 5s
steps:
  - at: 10s
    fault: {kind: stop, target: dcs1, processes: [etcd], duration: 5s}
"""


@pytest.mark.parametrize(("old", "new", "field", "message"), [
    ("target: dcs1, processes: [etcd]", "target: dcs1, processes: [patroni]", "steps[0].fault.processes",
     "host dcs1 declares no process 'patroni' (known: etcd, pgbouncer, postgres"),
    ("target: dcs1, processes: [etcd]", "target: pgproxy, processes: [etcd]", "steps[0].fault.target",
     "unknown host 'pgproxy'"),
    ("target: dcs1, processes: [etcd]", "target: my1", "steps[0].fault.target", None),  # has mariadb: valid
    ("target: dcs1, processes: [etcd]", "target: \"tag:component=dcs@all\", processes: [haproxy]",
     "steps[0].fault.processes", "host dcs1 declares no process 'haproxy'"),
    ("target: dcs1, processes: [etcd]", "target: \"tag:component=dcs\"", "steps[0].fault.target",
     "a tag target names how many"),
])
def test_playbook_service_targets_are_checked_against_the_inventory(tmp_path: Path, old: str, new: str, field: str,
                                                                     message: str | None) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.replace(old, new))
    if message is None:
        load_playbook(path, LAB)
        return
    with pytest.raises(InputError) as info:
        load_playbook(path, LAB)
    assert (info.value.line, info.value.field) == (8, field), info.value.one_line()
    assert message in info.value.detail, info.value.one_line()


def test_a_host_without_processes_cannot_take_a_process_fault(tmp_path: Path) -> None:
    doc = copy.deepcopy(LAB_DOC)
    doc["hosts"]["bare"] = {"address": "10.77.0.93"}
    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.replace("target: dcs1, processes: [etcd]", "target: bare"))
    with pytest.raises(InputError) as info:
        load_playbook(path, load_inventory(inv_path))
    assert info.value.field == "steps[0].fault.target" and "host bare declares no process" in info.value.detail


def test_a_process_declared_on_the_host_and_by_its_member_is_refused(tmp_path: Path) -> None:
    path = three_etcd(tmp_path, pg1={"processes": {"patroni": {"pid_file": "/run/other.pid"}}})
    with pytest.raises(InputError) as info:
        load_inventory(path)
    err = info.value
    assert err.field == "clusters.pg.members[0].processes.patroni", err.one_line()
    assert "already declared in hosts.pg1.processes" in err.detail
    assert err.line is not None and "patroni:" in path.read_text().splitlines()[err.line - 1]


def test_two_clusters_listing_the_same_member_process_alike_are_one_declaration() -> None:
    # the MHA cluster and its HAProxy route list mha1-3 with the same mariadb process: no conflict
    assert LAB.clusters["mha"].members[0].processes == LAB.clusters["mha-haproxy"].members[0].processes


def test_the_hosts_a_tag_target_changes_go_through_the_production_guard() -> None:
    """pg-dcs-down stops etcd on the hosts tagged component=dcs: dcs1 is among the hosts the drill
    may change (the production guard and the capability checks see it), beside the members."""
    from chaoskit.drill.preflight import touched_hosts

    pb = load_playbook(ROOT / "playbooks" / "pg-dcs-down.yaml", LAB).playbook
    assert touched_hosts(pb, LAB) == sorted(["dcs1", *(m.host for m in LAB.clusters["pg"].members)])
