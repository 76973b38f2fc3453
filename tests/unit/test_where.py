"""A client group's `where:` (issue 46): on the inventory's loader hosts of a zone or by name.
Bad input is one line naming file, line and field before anything starts; a good one reaches the
drill as the loader hosts each group runs on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.inventory.models import Inventory
from chaoskit.playbook.loader import load_playbook

INVENTORY = """
hosts:
  db1: {address: 127.0.0.1, tags: {az: a}}
  ld-a: {address: 127.0.0.2, tags: {az: a}}
  ld-b: {address: 127.0.0.3, tags: {az: b}}
  ld-b2: {address: 127.0.0.4, tags: {az: b}}
clusters:
  pg:
    engine: postgres
    user: u
    members: [{host: db1, processes: {postgres: {pid_file: /run/pg.pid, comm: postgres}}}]
"""
CLIENT_LATENCY = "{kind: latency, target: client, delay_ms: 5, duration: 1s}"
LOADERS = "loaders: {hosts: [ld-a, ld-b, ld-b2]}\n"


def inventory(tmp_path: Path, loaders: bool = True, password: str = "{file: /etc/ck/pw}") -> Inventory:
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(INVENTORY).lstrip() + f"    password: {password}\n" + (LOADERS if loaders else ""))
    return load_inventory(p)


def playbook(tmp_path: Path, groups: str, step: str = '{kind: pause, target: db1, duration: 1s}') -> Path:
    p = tmp_path / "pb.yaml"
    p.write_text("name: w\ncluster: pg\nload:\n  workload: ledger\n  groups:\n" + groups
                 + f"steps:\n  - at: 12s\n    fault: {step}\nduration: 20s\n")
    return p


def test_a_group_runs_on_the_loader_hosts_of_its_zone_or_on_the_one_it_names(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    loaded = load_playbook(playbook(tmp_path, "    - {name: za, workers: 2, where: {az: a}}\n"
                                              "    - {name: zb, workers: 2, where: {az: B}}\n"
                                              "    - {name: one, workers: 2, where: {host: ld-b2}}\n"
                                              "    - {name: here, workers: 2}\n"), inv)
    groups = {g.group_name: g.where for g in loaded.playbook.load.groups or ()}
    assert groups["here"] is None
    assert {n: w.hosts(inv) for n, w in groups.items() if w is not None} == {
        "za": ["ld-a"], "zb": ["ld-b", "ld-b2"], "one": ["ld-b2"]}
    assert groups["za"].said() == {"az": "a"} and groups["one"].said() == {"host": "ld-b2"}


def test_loaders_n_takes_the_first_n_hosts_its_where_matches(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    loaded = load_playbook(playbook(tmp_path, "    - {name: one, workers: 4, where: {az: b}, loaders: 1}\n"
                                              "    - {name: all, workers: 4, where: {az: b}}\n"), inv)
    hosts = {g.group_name: g.loader_hosts(inv) for g in loaded.playbook.load.groups or ()}
    assert hosts == {"one": ["ld-b"], "all": ["ld-b", "ld-b2"]}


def test_a_placed_group_takes_an_agent_on_every_host_it_names() -> None:
    """Shares round robin over the group's hosts; a group with fewer shares than hosts is split
    into one share per host (worker ids dealt in turn); other groups are not placed."""
    from chaoskit.workload.placement import placed_shares
    from chaoskit.workload.spec import ClientGroup

    za, zb, here = (ClientGroup("za", workers=5), ClientGroup("zb", workers=4, first_worker=6),
                    ClientGroup("here", workers=1, first_worker=10))
    shares = [(za, [1, 2, 3, 4, 5]), (zb, [6, 8]), (zb, [7, 9]), (here, [10])]
    got = placed_shares(shares, {"za": ("ld-a", "ld-a2", "ld-a3"), "zb": ("ld-b",)})
    assert [(g.name, ids, host) for g, ids, host in got] == [
        ("za", [1, 4], "ld-a"), ("za", [2, 5], "ld-a2"), ("za", [3], "ld-a3"),
        ("zb", [6, 8], "ld-b"), ("zb", [7, 9], "ld-b")]


@pytest.mark.parametrize(("groups", "loaders", "step", "line", "field", "message"), [
    ("    - {name: x, workers: 2, where: {az: a, host: ld-a}}\n", True, None, 6, "load.groups[0].where",
     "exactly one of az, host, labels or resources"),
    ("    - {name: x, workers: 2, where: {}}\n", True, None, 6, "load.groups[0].where",
     "exactly one of az, host, labels or resources"),
    ("    - {name: x, workers: 2, where: {az: a, labels: {rack: r2}}}\n", True, None, 6, "load.groups[0].where",
     "exactly one of az, host, labels or resources"),
    ("    - {name: x, workers: 2, where: {labels: {rack: r2}}}\n", True, None, 6, "load.groups[0].where",
     "where: {'labels': {'rack': 'r2'}} matches Ray nodes, and inventory"),
    ("    - {name: x, workers: 2, where: {labels: {rack: \"r 2\"}}}\n", True, None, 6,
     "load.groups[0].where.labels.rack", "should match pattern"),
    ("    - {name: x, workers: 2, where: {resources: {loadgen: 0}}}\n", True, None, 6,
     "load.groups[0].where.resources.loadgen", "greater than 0"),
    ("    - {name: x, workers: 2, where: {labels: {}}}\n", True, None, 6, "load.groups[0].where.labels",
     "at least 1 item"),
    ("    - {name: x, workers: 2, where: {zone: a}}\n", True, None, 6, "load.groups[0].where.zone", "unknown field"),
    ("    - {name: x, tool: pgbench, workers: 4, where: {az: b}, loaders: 2}\n", True, None, 6, "load.groups[0]",
     "loaders: a pgbench group is one pgbench on one loader host (the first its where: matches); give a group "
     "per host for more"),
    ("    - {name: x, workers: 2, where: {az: c}}\n", True, None, 6, "load.groups[0].where",
     "no loader host matches {'az': 'c'}; the loader hosts and their az: a (ld-a), b (ld-b), b (ld-b2)"),
    ("    - {name: x, workers: 2, where: {host: db1}}\n", True, None, 6, "load.groups[0].where",
     "no loader host matches {'host': 'db1'}"),
    ("    - {name: x, workers: 2, where: {az: a}}\n", False, None, 6, "load.groups[0].where",
     "has no loaders: section"),
    ("    - {name: x, workers: 2, where: {az: a}}\n", True, CLIENT_LATENCY, 9, "steps[0].fault.target",
     "group x runs on loader hosts"),
    ("    - {name: x, workers: 4, where: {az: b}, loaders: 3}\n", True, None, 6, "load.groups[0].loaders",
     "loaders: 3, and 2 loader host(s) match {'az': 'b'}: ld-b, ld-b2"),
    ("    - {name: x, workers: 4, loaders: 2}\n", True, None, 6, "load.groups[0]",
     "loaders: N spreads a group over N of the loader hosts its where: matches; give where: too"),
    ("    - {name: x, workers: 1, where: {az: b}, loaders: 2}\n", True, None, 6, "load.groups[0]",
     "loaders: 2 needs at least 2 workers"),
    ("    - {name: x, workers: 2, where: {az: b}, loaders: 0}\n", True, None, 6, "load.groups[0].loaders",
     "greater than or equal to 1"),
])
def test_bad_where_is_one_line_naming_file_line_and_field(tmp_path: Path, groups: str, loaders: bool,
                                                          step: str | None, line: int, field: str,
                                                          message: str) -> None:
    inv = inventory(tmp_path, loaders)
    path = playbook(tmp_path, groups, *([step] if step else []))
    with pytest.raises(InputError) as info:
        load_playbook(path, inv)
    err = info.value
    assert (err.source, err.line, err.field) == (str(path), line, field), err.one_line()
    assert message in err.detail, err.one_line()
    assert "\n" not in err.one_line()


def test_a_password_from_the_controllers_environment_is_refused_for_loader_hosts(tmp_path: Path) -> None:
    inv = inventory(tmp_path, password="{env: PGPASSWORD}")
    path = playbook(tmp_path, "    - {name: x, workers: 2, where: {az: a}}\n")
    with pytest.raises(InputError) as info:
        load_playbook(path, inv)
    assert (info.value.line, info.value.field) == (6, "load.groups[0].where")
    assert "password: {env: PGPASSWORD} is the controller's environment" in info.value.detail
    load_playbook(playbook(tmp_path, "    - {name: x, workers: 2}\n"), inv)  # on the control node: fine


def test_a_groups_loader_clock_error_is_its_worst_measurements_uncertainty_or_drift() -> None:
    """Worked by hand: zone b's two loaders measured +0.8 ms +/- 0.5 ms and -1.5 ms +/- 0.25 ms
    before the start; their stamps are corrected by those offsets, so at first they are exact to
    within 0.5 ms. 30 s later ld-b measured +1.1 ms +/- 0.4 ms: its stamps in between may have been
    off by the change 0.3 plus both uncertainties 0.5 + 0.4 = 1.2 ms, the group's worst. Zone a ran
    on the control node: no bound."""
    from chaoskit.analysis.drill import loader_clock_error

    events = [{"kind": "load_sources", "t": 1.0, "sources": [
        {"source": "zone-b/5@ld-b", "group": "zone-b", "clock_offset_s": 0.0008, "clock_uncertainty_s": 0.0005},
        {"source": "zone-b/6@ld-b2", "group": "zone-b", "clock_offset_s": -0.0015, "clock_uncertainty_s": 0.00025},
    ]}]
    assert loader_clock_error("zone-b", events) == 0.0005
    events.append({"kind": "loader_clock", "t": 31.0, "source": "zone-b/5@ld-b", "group": "zone-b",
                   "offset_s": 0.0011, "uncertainty_s": 0.0004, "change_s": 0.0003, "error_s": 0.0012})
    assert loader_clock_error("zone-b", events) == 0.0012
    assert loader_clock_error("zone-a", events) is None


def test_labels_and_resources_match_the_live_ray_nodes_of_loader_hosts() -> None:
    """Worked by hand on three loader hosts' nodes: ld-a (rack r1, loadgen 1), ld-b (rack r2,
    loadgen 4), ld-b2 (rack r2, not alive). `labels: {rack: r2}` is ld-b alone (ld-b2's node is
    dead); `resources: {loadgen: 2}` is ld-b (ld-a has 1); `{loadgen: 1}` both live ones, in
    inventory order; a node at an address no loader host has (10.0.0.9) is never placed on.
    Nothing matching names what each loader host's node carries."""
    import textwrap as tw

    from chaoskit.inventory.models import Inventory
    from chaoskit.workload.ray_plane import RayNode, matching_hosts

    inv = Inventory.model_validate({
        "hosts": {h: {"name": h, "address": a} for h, a in (("ld-a", "10.0.0.1"), ("ld-b", "10.0.0.2"),
                                                             ("ld-b2", "10.0.0.3"))},
        "loaders": {"hosts": ["ld-a", "ld-b", "ld-b2"]}})
    nodes = [RayNode("n1", "10.0.0.1", True, {"ck-host": "ld-a", "rack": "r1"}, {"CPU": 2.0, "loadgen": 1.0}),
             RayNode("n2", "10.0.0.2", True, {"ck-host": "ld-b", "rack": "r2"}, {"CPU": 2.0, "loadgen": 4.0}),
             RayNode("n3", "10.0.0.3", False, {"ck-host": "ld-b2", "rack": "r2"}, {"loadgen": 4.0}),
             RayNode("n9", "10.0.0.9", True, {"rack": "r2"}, {"loadgen": 9.0})]
    assert matching_hosts(nodes, inv, {"rack": "r2"}, None)[0] == ["ld-b"]
    assert matching_hosts(nodes, inv, None, {"loadgen": 2.0})[0] == ["ld-b"]
    assert matching_hosts(nodes, inv, None, {"loadgen": 1.0})[0] == ["ld-a", "ld-b"]
    assert matching_hosts(nodes, inv, None, {"loadgen": 1.0, "CPU": 4.0})[0] == []
    hosts, seen = matching_hosts(nodes, inv, {"rack": "r3"}, None)
    assert hosts == [] and seen == tw.dedent("""\
        ld-a: {'rack': 'r1'}; ld-b: {'rack': 'r2'}; ld-b2: not a live node""")
    assert matching_hosts(nodes, inv, None, {"gpu": 1.0})[1] == (
        "ld-a: {'CPU': 2.0, 'loadgen': 1.0}; ld-b: {'CPU': 2.0, 'loadgen': 4.0}; ld-b2: not a live node")


def test_a_managed_node_carries_its_hosts_tags_as_labels_and_the_inventorys_resources() -> None:
    from chaoskit.inventory.models import RayPlane
    from chaoskit.workload import ray_plane

    plane = RayPlane(head="10.77.0.1", token_file="/etc/ck/token")
    args = ray_plane.node_args(plane, "/opt/py", "10.77.0.82", "ld-b", "b", {"az": "b", "rack": "r2",
                                                                          "note": "a/b", "ck-host": "x"},
                               {"loadgen": 2.0})
    assert "--labels=ck-host=ld-b,ck-az=b,az=b,rack=r2" in args  # a tag that is no Ray label is left out
    assert '--resources={"loadgen": 2.0}' in args
    with pytest.raises(ValueError, match="not a Ray resource"):
        ray_plane.node_args(plane, "/opt/py", "10.77.0.82", "ld-b", "b", {}, {"x y": 1.0})


def test_loader_resources_are_for_loader_hosts_of_a_ray_cluster_chaoskit_starts() -> None:
    from pydantic import ValidationError

    from chaoskit.inventory.models import Loaders

    ray = {"head": "10.77.0.1", "token_file": "/etc/ck/token"}
    assert Loaders.model_validate({"hosts": ["ld-b"], "ray": ray, "resources": {"ld-b": {"loadgen": 2}}})
    with pytest.raises(ValidationError, match="resources: ld-c is not one of the loader hosts"):
        Loaders.model_validate({"hosts": ["ld-b"], "ray": ray, "resources": {"ld-c": {"loadgen": 2}}})
    with pytest.raises(ValidationError, match="given to the Ray nodes chaoskit starts"):
        Loaders.model_validate({"hosts": ["ld-b"], "resources": {"ld-b": {"loadgen": 2}}})


@pytest.mark.parametrize(("extra", "line", "field", "message"), [
    ("where: {az: b}\nloaders: 3\n", 6, "loaders",
     "loaders: 3 needs at least 3 workers in every cell (one agent per loader host at least), and grid.workers has 2"),
    ("load: {tool: pgbench}\nwhere: {az: b}\n", 6, "where",
     "where: places chaoskit's own clients; pgbench's cells run on this machine"),
    ("loaders: 2\n", 5, "loaders", "give where: too"),
    ("where: {az: c}\n", 5, "where", "no loader host matches {'az': 'c'}"),
    ("where: {labels: {rack: r2}}\n", 5, "where", "matches Ray nodes, and inventory"),
    ("where: {az: b}\nlink: {source: client}\ngrid: {workers: [2], delay_ms: [0, 5]}\n", 5, "link.source",
     "the clients run on loader hosts"),
])
def test_an_experiments_placed_clients_are_checked_as_a_groups(tmp_path: Path, extra: str, line: int, field: str,
                                                                message: str) -> None:
    from chaoskit.playbook.experiment import load_experiment

    inv = inventory(tmp_path)
    path = tmp_path / "exp.yaml"
    grid = "" if "grid:" in extra else "grid: {workers: [2, 4]}\n"
    path.write_text("name: e\nkind: sweep\ncluster: pg\n" + grid + extra)
    with pytest.raises(InputError) as info:
        load_experiment(path, inv)
    assert message in info.value.detail, info.value.one_line()
    assert (info.value.line, info.value.field) == (line, field), info.value.one_line()


def test_an_experiments_clients_on_a_zones_loader_hosts_pass(tmp_path: Path) -> None:
    from chaoskit.drill.experiment import PLACED, cell_load
    from chaoskit.playbook.experiment import load_experiment

    inv = inventory(tmp_path)
    path = tmp_path / "exp.yaml"
    path.write_text("name: e\nkind: sweep\ncluster: pg\ngrid: {workers: [2, 4]}\nwhere: {az: b}\nloaders: 2\n")
    exp = load_experiment(path, inv)
    assert exp.where is not None and exp.where.hosts(inv) == ["ld-b", "ld-b2"] and exp.loaders == 2
    spec = cell_load("ledger", 4, 2.0, 100, None, True, placed=True)
    assert [(g.name, list(g.worker_ids)) for g in spec.client_groups()] == [(PLACED, [1, 2, 3, 4])]
