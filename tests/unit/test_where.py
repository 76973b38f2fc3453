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
     "exactly one of az or host"),
    ("    - {name: x, workers: 2, where: {}}\n", True, None, 6, "load.groups[0].where", "exactly one of az or host"),
    ("    - {name: x, workers: 2, where: {zone: a}}\n", True, None, 6, "load.groups[0].where.zone", "unknown field"),
    ("    - {name: x, tool: pgbench, where: {az: a}}\n", True, None, 6, "load.groups[0]",
     "only chaoskit's own clients run on loader hosts"),
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
