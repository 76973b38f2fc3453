"""Experiments on the lab: the latency proxy on the replica -> primary link, a small sweep, a ramp
that finds a knee, and single node vs replicated with its spread."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from chaoskit.inventory.models import Inventory

INV = "inventories/lab.yaml"


def experiment(text: str, tmp_path: Path) -> dict:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    res = subprocess.run(["chaoskit", "experiment", "run", str(path), "-i", INV, "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    for name in ("run.json", "results.csv", "report.html"):
        assert (run_dir / name).stat().st_size > 0
    assert list((run_dir / "plots").glob("*.png"))
    return json.loads((run_dir / "run.json").read_text())


def test_sweep_sync_commit_tps_falls_with_replica_to_primary_delay(lab: Inventory, tmp_path: Path) -> None:
    result = experiment("""
name: small-sweep
kind: sweep
cluster: pg
settings: {synchronous_mode: true}
link: {source: "role:replica@all", dest: "role:primary", port: 5432}
grid: {delay_ms: [0, 20], workers: [2, 8], workload: [update]}
warmup: 2s
measure: 3s
""", tmp_path)
    cells = {(c["delay_ms"], c["workers"]): c for c in result["cells"]}
    for w in (2, 8):
        fast, slow = cells[(0.0, w)], cells[(20.0, w)]
        assert slow["tps"] < 0.6 * fast["tps"], (fast, slow)  # every commit waits for the delayed standby
        assert slow["p50_ms"] > fast["p50_ms"] + 20  # request and ack both cross the delayed link
        assert slow["error_rate"] == 0 and fast["error_rate"] == 0
        assert 19 <= slow["proxy_added_p50_ms"] <= 26, slow  # what the proxy really added vs the 20 ms asked
        assert fast["proxy_added_p50_ms"] is None
    assert result["settings"]["pg"]["server"]["synchronous_commit"] == "on"
    # the headline in words, the same medians as the table (the arithmetic is pinned in unit tests)
    (line,) = result["headlines"]
    assert line.startswith("20 ms delay vs no delay: TPS -") and " at 2 workers, -" in line and "at 8; p50 " in line


def test_ramp_finds_a_knee(lab: Inventory, tmp_path: Path) -> None:
    result = experiment("""
name: small-ramp
kind: ramp
cluster: pg
grid: {workers: [1, 4, 16, 64, 160], workload: [update]}
warmup: 1s
measure: 3s
""", tmp_path)
    knee = result["knee"]
    assert knee["peak"]["tps"] > result["cells"][0]["tps"]
    assert knee["recommended_workers"] in (4, 16, 64), knee
    assert all(c["error_rate"] == 0 for c in result["cells"])


def test_compare_single_vs_replicated_reports_difference_with_spread(lab: Inventory, tmp_path: Path) -> None:
    result = experiment(Path("playbooks/compare-single-vs-replicated.yaml").read_text()
                        .replace("measure: 5s", "measure: 3s").replace("warmup: 2s", "warmup: 1s"), tmp_path)
    cmp = result["comparison"]["pg_vs_pg-single"]
    assert cmp["repeats"] == 3
    assert cmp["min"] <= cmp["relative_tps_change_median"] <= cmp["max"]
    assert cmp["relative_tps_change_median"] != 0
    targets = {c["target"] for c in result["cells"]}
    assert targets == {"pg", "pg-single"}


@pytest.mark.parametrize("name", ["latency-sweep.yaml", "ramp.yaml", "compare-single-vs-replicated.yaml"])
def test_shipped_experiments_validate(name: str) -> None:
    import yaml

    from chaoskit.playbook.experiment import Experiment

    Experiment.model_validate(yaml.safe_load(Path("playbooks", name).read_text()))


def test_client_link_latency_sweep(lab: Inventory, tmp_path: Path) -> None:
    result = experiment("""
name: client-sweep
kind: sweep
cluster: pg
link: {source: client, port: 5432}
grid: {delay_ms: [0, 10], workers: [4], workload: [update]}
warmup: 1s
measure: 3s
""", tmp_path)
    cells = {c["delay_ms"]: c for c in result["cells"]}
    fast, slow = cells[0.0], cells[10.0]
    assert slow["p50_ms"] >= fast["p50_ms"] + 20, (fast, slow)  # request and reply each cross the delayed link
    assert slow["tps"] < 0.3 * fast["tps"]
    assert 10 <= slow["proxy_added_p50_ms"] <= 14, slow
    assert slow["error_rate"] == 0 and fast["error_rate"] == 0


def test_sweep_over_sync_and_async_replication(lab: Inventory, tmp_path: Path) -> None:
    from chaoskit.ha.registry import manager_for

    def sync_mode() -> bool:
        return bool(manager_for(lab.clusters["pg"], lab).read_settings().get("synchronous_mode"))

    before = sync_mode()
    result = experiment("""
name: sync-async
kind: sweep
cluster: pg
link: {source: "role:replica@all", dest: "role:primary", port: 5432}
grid: {synchronous_mode: [false, true], delay_ms: [20], workers: [4], workload: [update]}
warmup: 1s
measure: 3s
""", tmp_path)
    cells = {c["synchronous_mode"]: c for c in result["cells"]}
    assert cells[False]["tps"] > 3 * cells[True]["tps"], cells  # only synchronous commit waits for the far standby
    assert cells[True]["p50_ms"] > 40 > cells[False]["p50_ms"], cells
    assert result["headlines"][0].startswith("sync vs async commit at 20 ms delay: TPS -")
    modes = {k: v["server"]["synchronous_standby_names"] for k, v in result["settings"].items() if "=" in k}
    assert modes["pg synchronous_mode=false"] == "" and modes["pg synchronous_mode=true"] != ""
    deadline = time.time() + 15  # each member's /config is its last read of the DCS: allow a loop or two
    while sync_mode() != before and time.time() < deadline:
        time.sleep(0.5)
    assert sync_mode() == before  # restored
