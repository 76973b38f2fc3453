"""MHA 0.58 over MariaDB 10.11 on the lab (stack `mha`, added beside the session's lab once): every
shipped MHA playbook end to end with its clock shortened, each with two client routes in the same
failover (the endpoint list and HAProxy's writer check). The lost-write counts are checked against
the rows present on the new primary, counted here with PyMySQL and plain SQL. List-append
transactions at repeatable read run first without faults, then through a killed primary, their
history judged and recounted from the new primary. The partition drill runs last: it leaves the
old primary diverged (MHA has no rewind), which only its own run sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cleanload import CLEAN_WORKLOADS, runs_clean, sql_runs_clean
from drillrun import expected_rows, rows_on, run, shortened
from lanes import use_stacks

from chaoskit.inventory.models import Inventory

LAB_STACKS = ("mha",)  # added beside the session's lab, removed after this module (conftest)


@pytest.fixture(scope="module")
def mha(lab: Inventory) -> Inventory:
    use_stacks(LAB_STACKS)
    return lab


def check_rows(lab: Inventory, ev: dict[str, Any], host: str) -> None:
    """The new primary holds acknowledged - lost + indeterminate found + phantoms rows of the run."""
    assert rows_on(lab, "mha", host, ev["run_id"], "mha", "mariadb_mha") == expected_rows(ev)


def test_list_append_at_repeatable_read_without_faults_shows_no_g0_or_g1(mha: Inventory) -> None:
    """List-append transactions at InnoDB's REPEATABLE READ, no fault: besides what holds in every
    load (tests/integration/listappend.py), it promises no G0 and no G1: none may show."""
    from listappend import without_faults

    judged = without_faults(mha, "mha", "repeatable read")
    assert not {"G0", "G1a", "G1b", "G1c"} & set(judged["anomalies"]), judged["violations"]


def test_your_own_sql_runs_clean_on_mariadb_and_its_ledger_holds_every_acknowledged_order(
        mha: Inventory) -> None:
    sql_runs_clean(mha, "mha", "shop-orders.mysql.sql")  # tests/integration/cleanload.py


@pytest.mark.parametrize("workload", CLEAN_WORKLOADS)
def test_every_workload_runs_clean_on_mariadb(mha: Inventory, workload: str) -> None:
    """Each built-in workload for 5 s on MHA's MariaDB, before any drill, and what holds in every
    legal run of it (tests/integration/cleanload.py)."""
    runs_clean(mha, "mha", workload)


def test_primary_killed_fails_over_on_both_routes_and_is_rejoined(mha: Inventory, tmp_path: Path) -> None:
    res, ev, run_dir = run(shortened("playbooks/mha-kill-primary.yaml", tmp_path, ["8s", "30s"], "38s"), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover" and f["new_primary"] != f["old_primary"] == f["target_host"]
    # detection and promotion from MHA's own log on the manager host, never from our SQL polls
    assert f["detect_signal"].startswith("mha-log: ") and "Got error on MySQL" in f["detect_signal"]
    promoted = [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
                if e.get("event") == "promoted" and e.get("source") == "mha-log"]
    assert promoted and promoted[0]["member"] == f["new_primary"]
    groups = ev["results"]["groups"]
    assert set(groups) == {"endpoints", "haproxy"}
    assert all(0 < g["rto_first_client_s"] <= g["rto_all_clients_s"] for g in groups.values())
    assert all(g["rto_first_client_s"] < 30 for g in groups.values())
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0 and ev["results"]["rpo"]["phantoms"] == 0
    (rejoin,) = ev["actions"]
    assert rejoin["ok"] and "monitoring again" in rejoin["answer"], rejoin
    assert ev["results"]["checks"]["replica_convergence"]["valid"] is True
    assert ev["ha"]["manager"] == "mha" and ev["ha"]["version"] == "0.58" and ev["ha"]["settings"]["ping_interval"] == 1
    assert {(r["host"], r["label"]) for r in ev["logs"]} >= {("mham", "masterha_manager"),
                                                              (f["new_primary"], "mariadb")}
    check_rows(mha, ev, f["new_primary"])


def test_switchover_loses_nothing(mha: Inventory, tmp_path: Path) -> None:
    res, ev, _ = run(shortened("playbooks/mha-switchover.yaml", tmp_path, ["8s"], "25s"), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (action,) = ev["actions"]
    assert action["ok"] and action["candidate"] != action["member"], action
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["replica_convergence"]["valid"] is True
    check_rows(mha, ev, action["candidate"])


def test_node_crash_fails_over(mha: Inventory, tmp_path: Path) -> None:
    res, ev, _ = run(shortened("playbooks/mha-crash-primary.yaml", tmp_path, ["8s", "30s"], "38s"), tmp_path)
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover" and f["detect_signal"].startswith("mha-log: "), res.stdout
    assert ev["actions"][0]["ok"] and ev["results"]["checks"]["replica_convergence"]["valid"] is True, res.stdout
    assert ev["results"]["rpo"]["phantoms"] == 0
    check_rows(mha, ev, f["new_primary"])


def test_a_lagging_replica_turns_into_rto_not_loss(mha: Inventory, tmp_path: Path) -> None:
    res, ev, run_dir = run(shortened("playbooks/mha-replica-lag-failover.yaml", tmp_path, ["6s", "14s", "45s"],
                                     "52s"), tmp_path)
    lag, kill = ev["results"]["faults"]
    # the replica's own account on the timeline: its SQL thread stopped, its GTID position left behind
    import csv

    rows = list(csv.DictReader((run_dir / "timeline.csv").open()))
    stopped = [r for r in rows if r.get(f"replica_state_{lag['target_host']}") == "sql_stopped"]
    assert stopped, list(rows[0])
    primary_then = next(m for m in (r["member"] for r in ev["roles_before"]) if m != lag["target_host"]
                        and any(x["member"] == m and x["sql_role"] == "primary" for x in ev["roles_before"]))
    last = stopped[-1]
    applied = int(last[f"position_{lag['target_host']}"].split("-")[-1])
    assert applied < int(last[f"position_{primary_then}"].split("-")[-1])
    assert lag["kind"] == "replica_stop" and ev["faults_injected"][0]["revert_verified"] is True
    assert kill["outcome"] == "failover", res.stdout
    # MHA applies the relay log the stopped SQL thread left before it makes a replica writable
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["replica_convergence"]["valid"] is True
    check_rows(mha, ev, kill["new_primary"])


def test_sysbench_beside_chaoskits_clients_through_one_failover(mha: Inventory, tmp_path: Path) -> None:
    """sysbench as a client group: it ends at the lost connection, is started again at the writer
    the load's own search finds, and its figures rest on its per-second reports, each stamped when
    it was read (tools/sysbench/reports.tsv): its RTO is recounted here from that file, and every
    transaction the timeline counts is either an acknowledged ledger write or one sysbench reported."""
    import csv
    import re

    from chaoskit.workload.outcomes import client_deadline
    from chaoskit.workload.spec import DRILL, LoadSpec

    res, ev, run_dir = run(shortened("playbooks/mha-kill-primary-sysbench.yaml", tmp_path, ["8s", "30s"], "38s"),
                           tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover"
    sb, own = ev["results"]["groups"]["sysbench"], ev["results"]["groups"]["endpoints"]
    assert sb["tool"] == "sysbench" and sb["rpo"] is None and sb["rto_resolution_s"] == 1.0
    assert sb["tool_restarts"]["aborted"] == sb["tool_restarts"]["back"] == 1
    (aborted,) = [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
                  if e["kind"] == "tool_client_aborted"]
    rows = (run_dir / "tools" / "sysbench" / "reports.tsv").read_text().splitlines()
    reports = [(float(t), int(run_no), line) for t, run_no, line in (row.split("\t", 2) for row in rows)]
    tps = re.compile(r"\[ *([\d.]+)s \] thds: \d+ tps: ([\d.]+) ")
    # back: the first report with transactions of a run started after the abort (the aborted run's
    # last report, of the second before the kill, can be read just after the abort is seen)
    first_run = reports[0][1]
    first_back = min(t for t, run_no, line in reports
                     if run_no > first_run and t > aborted["t"] and float(tps.search(line).group(2)) > 0)
    assert sb["rto_first_client_s"] == pytest.approx(first_back - f["t_fault"], abs=1e-5)
    # every op the timeline counts: the ledger's acknowledged writes and sysbench's reported transactions
    counted, last = 0, {}
    for _, run_no, line in reports:
        t_s, rate = (float(x) for x in tps.search(line).groups())
        counted += round(rate * (t_s - last.get(run_no, 0.0)))
        last[run_no] = t_s
    timeline = sum(int(r["ok"]) for r in csv.DictReader((run_dir / "timeline.csv").open()))
    assert timeline == ev["results"]["rpo"]["acknowledged"] + counted
    # one failover, two kinds of client: within a report interval, a restart, a connection
    # attempt and an op deadline of each other
    spec = LoadSpec(workload="ledger", workers=1)
    bound = 1.0 + 1.5 * spec.backoff_max + spec.backoff_max + 0.02 + 2.0 + client_deadline(DRILL.op_timeout_s)
    assert abs(sb["rto_first_client_s"] - own["rto_first_client_s"]) <= bound
    check_rows(mha, ev, f["new_primary"])


def test_a_failover_under_list_append_is_judged_and_its_history_kept(mha: Inventory, tmp_path: Path) -> None:
    """mha-kill-primary-list-append shortened: judged for what InnoDB's repeatable read promises,
    and what holds in every legal run, read from the lists on the new primary
    (tests/integration/listappend.py; MHA's asynchronous failover may lose appends)."""
    from listappend import drilled

    pb = shortened("playbooks/mha-kill-primary-list-append.yaml", tmp_path, ["8s", "30s"], "38s")
    _, check, run_dir = drilled(mha, "mha", pb, tmp_path, "InnoDB repeatable read", "read-committed",
                                nothing_lost=False)
    assert "Transactional anomalies" in (run_dir / "report.html").read_text() or not check["anomalies"]


def test_reads_through_haproxys_read_port_across_a_failover(mha: Inventory, tmp_path: Path) -> None:
    """mha-read-route-failover shortened: writers through the endpoint list, readers through
    HAProxy's read port (the read-only nodes). What holds in every legal run, recounted from the
    run's transactions and the writers' log on the new primary (tests/integration/staleread.py)."""
    from staleread import recount

    # (what it asserts needs no recovery: a busy CI machine waited up to 60 s for one)
    res, _, run_dir = run(shortened("playbooks/mha-read-route-failover.yaml", tmp_path, ["8s", "30s"], "38s",
                                    recovery_within="15s"), tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    check = recount(run_dir, mha, "mha", "replica-reads")
    assert check["phases"]["before"]["reads"] > 0


def test_partition_is_split_brain_for_endpoint_clients_only(mha: Inventory, tmp_path: Path) -> None:
    """MHA fences nothing: the isolated primary keeps taking the endpoint-list clients' writes, lost
    when the partition heals; HAProxy (on the manager's host) stops sending it anything."""
    # recovery bounded at 45 s (steady about 20 s after the heal): after the rejoin, the replicas
    # catching up share this machine's two cores with the load, and its throughput sometimes
    # stays under 90% of the baseline for the whole bound, which this test does not judge
    res, ev, _ = run(shortened("playbooks/mha-partition-primary.yaml", tmp_path, ["8s", "31s"], "40s",
                               recovery_within="45s"), tmp_path)
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "split_brain" and ev["results"]["checks"]["split_brain"]["valid"] is False, res.stdout
    endpoints, haproxy = ev["results"]["groups"]["endpoints"], ev["results"]["groups"]["haproxy"]
    assert endpoints["rpo"]["lost_acknowledged"] > 0
    assert set(endpoints["rpo"]["lost_by_node"]) == {f["target_host"]}  # acknowledged by the isolated primary
    # through HAProxy only a write acknowledged before it could route away can be lost: asynchronous,
    # committed on the old primary at the cut and never replicated (seen once: one write at +0.000 s).
    # HAProxy marks it down after `fall` failed checks `inter` apart; one more interval of slack
    from chaoskit.lab.recipes import HAPROXY_CHECK_MS, HAPROXY_FALL

    routed_away = (HAPROXY_FALL + 1) * HAPROXY_CHECK_MS / 1000
    assert haproxy["rpo"]["lost_acknowledged"] == 0 or haproxy["rpo"]["lost_ack_window_rel_s"][1] <= routed_away
    assert haproxy["rto_first_client_s"] < 30
    # the rejoin picked the primary MHA promoted, not the isolated one that was still writable
    (rejoin,) = ev["actions"]
    assert rejoin["ok"] and rejoin["member"] == f["target_host"], rejoin
    check_rows(mha, ev, f["new_primary"])


def test_without_its_manager_mha_promotes_nobody(mha: Inventory, tmp_path: Path) -> None:
    """mha-manager-down-then-kill-primary shortened: masterha_manager (a service of mham, no member)
    SIGKILLed, then the primary's mariadbd. Nothing else promotes a replica: no member other than
    the old primary is writable before the manager is started again, on either route; the manager
    runs again from its pid file afterwards and no two members were ever writable at once."""
    # recovery bounded at 20 s: the lab starts every MHA node read-only, so the old primary comes
    # back without a writer nobody makes writable (the manager promotes only on a dead primary)
    pb = shortened("playbooks/mha-manager-down-then-kill-primary.yaml", tmp_path, ["8s", "11s"], "40s",
                   ["25s", "12s"], recovery_within="20s")
    res, ev, _ = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    manager_fault, primary = ev["results"]["faults"]
    assert (manager_fault["kind"], manager_fault["target_host"]) == ("kill", "mham")
    back = manager_fault["t_reverted"]
    assert back is not None and back >= manager_fault["t_fault"] + 25.0
    assert primary["t_new_primary"] is None or primary["t_new_primary"] >= back, primary["outcome_text"]
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    pid = int(Path(mha.processes_on("mham")["masterha_manager"].pid_file).read_text().split()[0])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "perl"
