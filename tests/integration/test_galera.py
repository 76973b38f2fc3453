"""Galera (three MariaDB 10.11 nodes with galera-4, HAProxy in front) on the lab (stack `galera`,
added beside the session's lab once): the three shipped Galera playbooks end to end, shortened,
each with the endpoint-list and HAProxy routes in the same fault. Nothing is promoted in Galera:
detection is the survivors' view change, which cannot come before evs.suspect_timeout (5 s);
the clients' commits wait for it. The rows the run's writes left are counted on the writer with
PyMySQL and plain SQL, apart from the recorder."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from drillrun import expected_rows, rows_on, run, shortened
from lanes import use_stacks

from chaoskit.inventory.models import Inventory

SUSPECT_S = 5.0  # galera-4's evs.suspect_timeout default, read back below from the run's evidence


LAB_STACKS = ("galera",)  # added beside the session's lab, removed after this module (conftest)


@pytest.fixture(scope="module")
def galera(lab: Inventory) -> Inventory:
    use_stacks(LAB_STACKS)
    return lab


def check(ev: dict[str, Any], lab: Inventory, writer: str) -> None:
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0 and ev["results"]["rpo"]["phantoms"] == 0
    brain = ev["results"]["checks"]["split_brain"]
    assert brain["valid"] is True and brain["multi_writer"] is True
    assert ev["results"]["checks"]["replica_convergence"]["valid"] is True
    assert rows_on(lab, "galera", writer, ev["run_id"], "chaoskit", "mariadb_chaoskit") == expected_rows(ev)


def test_killed_writer_node_moves_clients_after_the_view_change(galera: Inventory, tmp_path: Path) -> None:
    res, ev, _ = run(shortened("playbooks/galera-kill-node.yaml", tmp_path, ["8s"], "35s", ["10s"]), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ev["ha"]["manager"] == "galera" and ev["ha"]["settings"]["evs.suspect_timeout"] == "PT5S"
    (f,) = ev["results"]["faults"]
    assert (f["outcome"], f["old_primary"], f["new_primary"]) == ("failover", "galera1", "galera2"), res.stdout
    assert f["t_promoted"] is None and f["phases"]["promotion_s"] is None
    # Galera's own signal: the survivors' new view, not before the suspect timeout
    assert f["detect_signal"].startswith("wsrep-poll: view ") and "size 3 -> 2" in f["detect_signal"]
    assert SUSPECT_S - 0.2 <= f["phases"]["detection_s"] <= SUSPECT_S + 4
    groups = ev["results"]["groups"]
    assert all(SUSPECT_S - 0.2 <= g["rto_first_client_s"] < 15 for g in groups.values()), groups
    assert all(g["rto_first_client_s"] <= g["rto_all_clients_s"] for g in groups.values()), groups
    check(ev, galera, "galera2")


def test_cut_off_minority_refuses_writes_and_loses_nothing(galera: Inventory, tmp_path: Path) -> None:
    res, ev, run_dir = run(shortened("playbooks/galera-partition-minority.yaml", tmp_path, ["8s"], "42s", ["12s"]),
                           tmp_path)
    (f,) = ev["results"]["faults"]
    # the writer stays; the survivors' view change is still the cluster reacting
    assert f["outcome"] == "no_reaction" and f["old_primary"] == "galera1", res.stdout
    assert f["t_detect"] is not None and f["detect_signal"].startswith("wsrep-poll: view ")
    # both sides install a view: the survivors without galera3, galera3 a non-Primary one of its own
    views = {(e["member"], e["detail"].split(", ", 1)[1]) for e in map(json.loads, (run_dir / "events.jsonl")
             .read_text().splitlines()) if e.get("event") == "view_change"}
    assert {("galera1", "size 3 -> 2, Primary"), ("galera2", "size 3 -> 2, Primary"),
            ("galera3", "size 3 -> 1, Primary -> non-Primary")} <= views, views
    (span,) = f["non_primary"]
    assert span["member"] == "galera3" and span["from_s"] < 9 and span["to_s"] > 10
    node3 = ev["results"]["groups"]["node3"]
    assert node3["faults"][0]["outage"] and node3["rpo"]["lost_acknowledged"] == 0
    # its writes while cut off were refused (error 1047: the node is not ready), never acknowledged
    with gzip.open(run_dir / "history.jsonl.gz", "rt") as fh:
        ops = [json.loads(line) for line in fh]
    refused = [o for o in ops if o.get("group") == "node3" and o.get("outcome") == "fail"]
    assert refused and {o["error"] for o in refused} <= {"read_only", "connect_refused"}, refused[:3]
    check(ev, galera, "galera1")


def test_cut_off_writer_leaves_for_the_majority(galera: Inventory, tmp_path: Path) -> None:
    res, ev, _ = run(shortened("playbooks/galera-partition-majority-primary.yaml", tmp_path, ["8s"], "42s",
                               ["12s"]), tmp_path)
    (f,) = ev["results"]["faults"]
    assert (f["outcome"], f["old_primary"], f["new_primary"]) == ("failover", "galera1", "galera2"), res.stdout
    assert [s["member"] for s in f["non_primary"]] == ["galera1"]
    groups = ev["results"]["groups"]
    assert set(groups) == {"endpoints", "haproxy"}
    assert all(0 < g["rto_first_client_s"] < 15 for g in groups.values()), groups
    assert all(g["rto_first_client_s"] <= g["rto_all_clients_s"] for g in groups.values()), groups
    check(ev, galera, "galera2")


def test_a_killed_proxy_takes_down_its_route_only(galera: Inventory, tmp_path: Path) -> None:
    """haproxy-kill shortened: HAProxy on gproxy (a service of the proxy host, no member) SIGKILLed
    for 8 s, the nodes untouched. The clients through it have no write acknowledged from the
    kill until HAProxy was started again (the revert is never sent before the planned end); the
    endpoint-list clients never lose service; nothing acknowledged is lost; HAProxy runs again
    from its pid file."""
    res, ev, _ = run(shortened("playbooks/haproxy-kill.yaml", tmp_path, ["8s"], "30s", ["8s"]), tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    [f] = ev["results"]["faults"]
    assert (f["kind"], f["target_host"]) == ("kill", "gproxy")
    groups = ev["results"]["groups"]
    [through] = groups["haproxy"]["faults"]
    [direct] = groups["endpoints"]["faults"]
    assert through["outage"] and through["t_first_ok"] >= f["t_fault"] + 8.0
    assert direct["outage"] is False
    check(ev, galera, "galera1")
    pid = int(Path(galera.processes_on("gproxy")["haproxy"].pid_file).read_text().split()[0])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "haproxy"


def test_a_cut_off_minority_under_list_append_loses_no_append(galera: Inventory, tmp_path: Path) -> None:
    """galera-partition-list-append shortened: galera3 cut off for 12 s under list-append
    transactions at repeatable read from every route. Judged for what InnoDB's repeatable read
    promises, and what holds in every legal run, read from the lists on galera1 afterwards
    (tests/integration/listappend.py): a minority only refuses, so every acknowledged append is
    there; node3's clients had an outage."""
    from listappend import drilled

    pb = shortened("playbooks/galera-partition-list-append.yaml", tmp_path, ["8s"], "40s", ["12s"])
    ev, _, _ = drilled(galera, "galera", pb, tmp_path, "InnoDB repeatable read", "read-committed", nothing_lost=True)
    (f,) = ev["results"]["faults"]
    assert f["kind"] == "partition" and f["target_host"] == "galera3"
    assert ev["results"]["groups"]["node3"]["faults"][0]["outage"]
