"""What holds in every legal run of the stale-reads workload, recounted from the run directory's
transactions (recorder/txns.jsonl, read with plain json) and the writers' log as the writer holds
it now, never taken from the check: no read saw a value nobody wrote, no staleness is negative,
the reads are the ones recorded, and the lost writes are the acknowledged ones missing from the
log (shared by test_drill for Patroni's read route and test_mha for HAProxy's read port)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Inventory
from chaoskit.workload.kinds.stale_reads import StaleReads


def log_rows(lab: Inventory, cluster: str) -> set[tuple[int, int]]:
    driver = driver_for(lab.clusters[cluster], lab)
    conn = driver.connect_writer()
    try:
        return {(int(w), int(v)) for w, v in driver.query(conn, f"SELECT w, v FROM {StaleReads.LOG}")}
    finally:
        Driver.close_quietly(conn)


def recount(run_dir: Path, lab: Inventory, cluster: str, readers: str) -> dict[str, Any]:
    """The check's figures against the recount; returns the check as run.json has it."""
    ev = json.loads((run_dir / "run.json").read_text())
    check = ev["results"]["checks"]["stale_reads"]
    txns = [json.loads(line) for line in (run_dir / "recorder" / "txns.jsonl").read_text().splitlines()]
    sets = {(k, v): outcome for _, _, _, outcome, ops in txns for f, k, v in ops if f == "set"}
    kept = {x for x, outcome in sets.items() if outcome != "fail"}
    acked = {x for x, outcome in sets.items() if outcome == "ok"}
    reads = [(w, ops) for w, _, _, outcome, ops in txns if outcome == "ok" and not any(f == "set" for f, _, _ in ops)]
    # a read never returns a value nobody wrote (nor one whose write failed)
    assert all((k, v) in kept for _, ops in reads for f, k, v in ops), "a read saw a value nobody wrote"
    assert check["phantom_reads"] == 0 and check["reads"] == len(reads) > 0
    group = ev["results"]["groups"][readers]["stale_reads"]
    assert group["reads"] == len(reads)  # every read was the read group's
    for phase in [check, *check["phases"].values(), *group["phases"].values()]:
        assert phase["staleness_writes"]["median"] is None or 0 <= phase["staleness_writes"]["median"] <= \
            phase["staleness_writes"]["max"]
        assert phase["staleness_s"]["median"] is None or 0.0 <= phase["staleness_s"]["median"] <= \
            phase["staleness_s"]["max"]
    # the writes: the log as the writer holds it now
    present = log_rows(lab, cluster)
    assert present <= kept, sorted(present - kept)[:5]  # nothing there that no write made
    assert check["acknowledged_writes"] == len(acked) > 0
    assert check["lost_acknowledged"] == len(acked - present)
    assert check["valid"] is (check["lost_acknowledged"] == 0)
    return check
