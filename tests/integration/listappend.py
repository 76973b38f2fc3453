"""List-append transactions run as a plain load on one of the lab's clusters, and what holds in
every legal run of it, recounted from the recorder's transactions and the database rather than
taken from the checker (shared by the modules whose stacks carry the clusters: test_ha_managers
for PostgreSQL under pg_auto_failover, test_mha for MariaDB)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.inventory.models import Inventory
from chaoskit.recorder import FAIL, INFO, OK, Recorder
from chaoskit.workload.checks import Judging
from chaoskit.workload.kinds.list_append import WORKER_BITS, Anomalies, ListAppend
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams

WORKERS = 6
SECONDS = 5.0


def load(lab: Inventory, cluster: str, isolation: str) -> tuple[LoadRunner, Recorder]:
    rec = Recorder(base=time.time())
    spec = LoadSpec(workload="list-append", workers=WORKERS, params=WorkloadParams(isolation=isolation))
    runner = LoadRunner(lab.clusters[cluster], lab, spec, rec)
    runner.setup()
    runner.run_for(SECONDS)
    return runner, rec


def lists(runner: LoadRunner) -> dict[int, tuple[int, ...]]:
    conn = runner.driver.connect_writer()
    try:
        rows = runner.driver.query(conn, f"SELECT k, v FROM {ListAppend.TABLE}")
    finally:
        Driver.close_quietly(conn)
    return {int(k): tuple(int(x) for x in v.split(",")) for k, v in rows}


def appends(rec: Recorder, outcomes: set[str]) -> set[tuple[int, int]]:
    return {(k, v) for _, _, _, outcome, ops in rec.txns if outcome in outcomes for f, k, v in ops if f == "append"}


def judged(runner: LoadRunner, rec: Recorder) -> dict[str, Any]:
    conn = runner.driver.connect_writer()
    try:
        truth = Anomalies.read(runner.workload, conn, None)
    finally:
        Driver.close_quietly(conn)
    return Anomalies.judge(truth, Judging(rec, None, None, 1, None))


def without_faults(lab: Inventory, cluster: str, isolation: str) -> dict[str, Any]:
    """A plain load: every acknowledged append is in the lists afterwards, every element a list
    holds was appended by a transaction that committed or whose outcome is unknown (never by one
    that failed, never by nobody), no value twice, only this run's workers. Returns the judgement."""
    runner, rec = load(lab, cluster, isolation)
    held_lists = lists(runner)
    held = {(k, v) for k, vs in held_lists.items() for v in vs}
    ok, unknown, failed = appends(rec, {OK}), appends(rec, {INFO}), appends(rec, {FAIL})
    assert len(ok) > 100, rec.totals()
    assert ok <= held  # every acknowledged append is there
    assert held <= ok | unknown and not held & failed  # and nothing a failed transaction or nobody appended
    assert all(len(vs) == len(set(vs)) for vs in held_lists.values())  # no value twice
    assert all(v % WORKER_BITS in range(1, WORKERS + 1) for _, v in held)  # only this run's workers
    out = judged(runner, rec)
    assert out["transactions"] == rec.txns.count + 1  # and the final read
    return out


def drilled(lab: Inventory, cluster: str, playbook: Path, tmp: Path, claim: str, judged_as: str,
            nothing_lost: bool) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A shortened list-append drill run, and what holds in every legal run of it, read from its
    evidence and the lists on the cluster's writer afterwards (not taken from the checker): the
    level it was judged at; the verdict follows the anomalies found (forbidden ones fail it,
    allowed ones never do); the exported history holds every transaction; every element a list
    holds was appended by a transaction that committed or whose outcome is unknown, never by one
    that failed or by nobody, and no value twice; with `nothing_lost` (durable commits and no
    promotion, or a minority that only refuses), every acknowledged append is there too.
    Returns (run.json, the anomalies check, the run directory)."""
    import json
    import subprocess

    from drillrun import INV, LEAN

    from chaoskit.db.registry import driver_for
    from chaoskit.elle.edn import read_edn
    from chaoskit.elle.list_append import Append

    out = tmp / "runs"
    res = subprocess.run(["chaoskit", "run", str(playbook), "-i", INV, "--out", str(out), *LEAN],
                         capture_output=True, text=True, timeout=400)
    [run_dir] = sorted(out.glob("*"))
    ev = json.loads((run_dir / "run.json").read_text())
    check = ev["results"]["checks"]["anomalies"]
    assert check["claim"].startswith(claim) and check["judged_as"] == judged_as, res.stdout[-3000:] + res.stderr
    assert check["valid"] is (check["violations_total"] == 0)
    assert sum(check["anomalies"].values()) == check["violations_total"] + check["allowed_total"]
    edn = (run_dir / "list-append.edn").read_text().splitlines()
    assert len(edn) == 2 * check["transactions"]  # each transaction: its invocation and its completion
    driver = driver_for(lab.clusters[cluster], lab)
    conn = driver.connect_writer()
    try:
        rows = driver.query(conn, f"SELECT k, v FROM {ListAppend.TABLE}")
    finally:
        Driver.close_quietly(conn)
    lists = {int(k): [int(x) for x in v.split(",")] for k, v in rows}
    held = {(k, x) for k, vs in lists.items() for x in vs}
    # each append's transaction's outcome, read back with chaoskit's own EDN reader
    appended = {(op.key, op.value): t.outcome for t in read_edn("\n".join(edn)) for op in t.ops
                if isinstance(op, Append)}
    assert held and all(appended.get(e) in ("ok", "info") for e in held), \
        sorted(e for e in held if appended.get(e) not in ("ok", "info"))[:5]
    assert all(len(vs) == len(set(vs)) for vs in lists.values())
    if nothing_lost:
        acked = {e for e, outcome in appended.items() if outcome == "ok"}
        assert acked and acked <= held, sorted(acked - held)[:5]
    return ev, check, run_dir
