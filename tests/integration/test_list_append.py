"""List-append transactions on the lab's PostgreSQL (pg_auto_failover's cluster) and MariaDB (MHA's):
what holds in every legal run. Without faults, a serializable PostgreSQL history has no anomaly,
and every acknowledged append is in the lists afterwards; in any run, every element a list holds
was appended by a transaction that committed or whose outcome is unknown, never by one that
failed, and never by nobody. Those sets are recounted here from the recorder's transactions and
the database, not taken from the checker. The drill: MHA's primary killed under list-append at
repeatable read, its evidence (the check, the report's table, the history for Elle) recounted from
the new primary. (The stacks this module adds keep it beside the modules of the default lab.)"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from drillrun import LEAN, shortened
from lanes import use_stacks

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Inventory
from chaoskit.recorder import FAIL, INFO, OK, Recorder
from chaoskit.workload.checks import Judging
from chaoskit.workload.kinds.list_append import WORKER_BITS, Anomalies, ListAppend
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams

INV = "inventories/lab.yaml"
LAB_STACKS = ("pg_auto_failover", "mha")  # added beside the session's lab, removed after this module


@pytest.fixture(scope="module")
def stacks(lab: Inventory) -> Inventory:
    use_stacks(LAB_STACKS)
    return lab


def _load(lab: Inventory, cluster: str, isolation: str, seconds: float) -> tuple[LoadRunner, Recorder]:
    rec = Recorder(base=time.time())
    spec = LoadSpec(workload="list-append", workers=6, params=WorkloadParams(isolation=isolation))
    runner = LoadRunner(lab.clusters[cluster], lab, spec, rec)
    runner.setup()
    runner.run_for(seconds)
    return runner, rec


def _lists(runner: LoadRunner) -> dict[int, tuple[int, ...]]:
    conn = runner.driver.connect_writer()
    try:
        rows = runner.driver.query(conn, f"SELECT k, v FROM {ListAppend.TABLE}")
    finally:
        Driver.close_quietly(conn)
    return {int(k): tuple(int(x) for x in v.split(",")) for k, v in rows}


def _appends(rec: Recorder, outcomes: set[str]) -> set[tuple[int, int]]:
    return {(k, v) for _, _, _, outcome, ops in rec.txns if outcome in outcomes for f, k, v in ops if f == "append"}


def _judged(runner: LoadRunner, rec: Recorder) -> dict[str, Any]:
    conn = runner.driver.connect_writer()
    try:
        truth = Anomalies.read(runner.workload, conn, None)
    finally:
        Driver.close_quietly(conn)
    return Anomalies.judge(truth, Judging(rec, None, None, 1, None))


@pytest.mark.parametrize(("cluster", "isolation"), [("pgaf", "serializable"), ("mha", "repeatable read")])
def test_without_faults_every_acknowledged_append_is_there_and_nothing_else(stacks: Inventory, cluster: str,
                                                                           isolation: str) -> None:
    runner, rec = _load(stacks, cluster, isolation, 8.0)
    lists = _lists(runner)
    held = {(k, v) for k, vs in lists.items() for v in vs}
    ok, unknown, failed = _appends(rec, {OK}), _appends(rec, {INFO}), _appends(rec, {FAIL})
    assert len(ok) > 100, rec.totals()
    assert ok <= held  # every acknowledged append is there
    assert held <= ok | unknown and not held & failed  # and nothing a failed transaction or nobody appended
    assert all(len(vs) == len(set(vs)) for vs in lists.values())  # no value twice
    assert all(v % WORKER_BITS in range(1, 7) for _, v in held)  # only this run's six workers
    judged = _judged(runner, rec)
    assert judged["transactions"] == rec.txns.count + 1  # and the final read
    if cluster == "pgaf":  # PostgreSQL's serializable without faults: no anomaly at all
        assert judged["anomalies"] == {} and judged["valid"] is True, judged["violations"]
    else:  # InnoDB's repeatable read promises no G0 and no G1: none may show
        assert not {"G0", "G1a", "G1b", "G1c"} & set(judged["anomalies"]), judged["violations"]


def test_a_failover_under_list_append_is_judged_and_its_history_kept(stacks: Inventory, tmp_path: Path) -> None:
    pb = shortened("playbooks/mha-kill-primary-list-append.yaml", tmp_path, ["8s", "30s"], "38s")
    out = tmp_path / "runs"
    res = subprocess.run(["chaoskit", "run", str(pb), "-i", INV, "--out", str(out), *LEAN],
                         capture_output=True, text=True, timeout=400)
    [run_dir] = sorted(out.glob("*"))
    ev = json.loads((run_dir / "run.json").read_text())
    check = ev["results"]["checks"]["anomalies"]
    assert check["claim"].startswith("InnoDB repeatable read") and check["judged_as"] == "read-committed", res.stderr
    # the verdict follows the anomalies found: forbidden ones fail it, allowed ones never do
    assert check["valid"] is (check["violations_total"] == 0)
    assert sum(check["anomalies"].values()) == check["violations_total"] + check["allowed_total"]
    edn = (run_dir / "list-append.edn").read_text().splitlines()
    assert len(edn) == 2 * check["transactions"]  # each transaction: its invocation and its completion
    # what the lists hold now, read from the new primary: every element was appended by a
    # transaction in the history that committed or whose outcome is unknown
    driver = driver_for(stacks.clusters["mha"], stacks)
    conn = driver.connect_writer()
    try:
        rows = driver.query(conn, f"SELECT k, v FROM {ListAppend.TABLE}")
    finally:
        Driver.close_quietly(conn)
    held = {(int(k), int(x)) for k, v in rows for x in v.split(",")}
    appended: dict[tuple[int, int], str] = {}
    for line in edn:
        if ":type :invoke" in line:
            continue
        outcome = line.split(":type :", 1)[1].split(",", 1)[0]
        for part in line.split("[:append ")[1:]:
            k, v = part.split("]", 1)[0].split()
            appended[(int(k), int(v))] = outcome
    assert held and all(appended.get(e) in ("ok", "info") for e in held), \
        sorted(e for e in held if appended.get(e) not in ("ok", "info"))[:5]
    assert "Transactional anomalies" in (run_dir / "report.html").read_text() or not check["anomalies"]
