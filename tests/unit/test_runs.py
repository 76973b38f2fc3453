"""compare and history over run directories written here by hand (drills and an experiment)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from chaoskit.report.runs import compare_rows, history, write_compare, write_history


def drill(root: Path, name: str, started: float, verdict: object, rto: float | None, lost: int,
          ha_version: str = "3.0.2", cluster: str = "pg") -> Path:
    d = root / f"{int(started)}-{name}"
    d.mkdir(parents=True)
    # rto: the first client back; the last one came back a second later
    faults = [{"kind": "kill", "target_host": "pg1", "outage": rto is not None, "rto_first_client_s": rto,
               "rto_all_clients_s": None if rto is None else rto + 1.0,
               "phases": {"detection_s": 1.0, "promotion_s": 0.5}}]
    (d / "run.json").write_text(json.dumps({
        "schema_version": 3, "tool": {"version": "0.1.0"}, "playbook": {"content": {"name": name}}, "started": started,
        "cluster": {"name": cluster}, "ha": {"manager": "patroni", "version": ha_version, "settings": {"ttl": 10}},
        "server": {"server_version": "15.18"}, "inventory": {"sha256": "ab" * 32},
        "results": {"verdict": verdict, "baseline_tps": 1000.0, "faults": faults,
                    "rpo": {"lost_acknowledged": lost, "phantoms": 0}}}))
    return d


def experiment(root: Path) -> Path:
    d = root / "9999-sweep"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({
        "experiment": {"name": "sweep", "kind": "sweep", "cluster": "pg"}, "settings": {"pg": {"x": 1}},
        "cells": [{"workload": "update", "workers": 4, "delay_ms": 0, "tps": 2000.0, "p99_ms": 3.5},
                  {"workload": "update", "workers": 4, "delay_ms": 5, "tps": 300.0, "p99_ms": 20.0}]}))
    return d


def test_compare_shows_what_differs(tmp_path: Path) -> None:
    a = drill(tmp_path, "pg-kill-primary", 1000.0, True, 10.5, 1)
    b = drill(tmp_path, "pg-kill-primary", 2000.0, False, 31.0, 0, ha_version="4.1.5")
    rows, differing = compare_rows([a, b])
    assert differing == ["ha_version"]  # the one thing that may explain the two rows
    assert [(r["verdict"], r["rto_first_client_s"], r["rto_all_clients_s"], r["lost"], r["ha_version"])
            for r in rows] == [("PASS", 10.5, 11.5, 1, "3.0.2"), ("FAIL", 31.0, 32.0, 0, "4.1.5")]
    rows, differing = compare_rows([a, experiment(tmp_path)])
    assert [r["type"] for r in rows] == ["drill", "experiment (sweep)", "experiment (sweep)"]
    assert rows[2]["what"] == "workload=update, workers=4, delay_ms=5" and rows[2]["tps"] == 300.0
    write_compare(rows, differing, tmp_path / "out")
    with open(tmp_path / "out" / "compare.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 3
    assert "experiment (sweep)" in (tmp_path / "out" / "compare.html").read_text()


def test_history_per_cluster_and_playbook(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    drill(root, "pg-kill-primary", 3000.0, False, None, 0)  # written first, started last
    drill(root, "pg-kill-primary", 1000.0, True, 10.0, 0)
    drill(root, "pg-kill-primary", 2000.0, True, 12.5, 0)
    drill(root, "pg-switchover", 1500.0, "aborted", 2.0, 0, cluster="pg")
    experiment(root)  # not a drill: left out
    (root / "junk").mkdir()
    data = history(root)
    kill = data["playbooks"]["pg/pg-kill-primary"]
    assert [r["started"] for r in kill["runs"]] == [1000.0, 2000.0, 3000.0]
    assert kill["rto_all_clients_trend_s"] == [11.0, 13.5, None] and kill["last_verdict"] is False
    assert kill["pass_rate"] == 0.667 and kill["last_drilled"] == 3000.0  # 2 of 3 judged runs passed
    sw = data["playbooks"]["pg/pg-switchover"]
    assert sw["pass_rate"] is None and sw["last_verdict"] == "aborted"  # an aborted run is not judged
    write_history(data, tmp_path / "h")
    assert json.loads((tmp_path / "h" / "history.json").read_text())["playbooks"].keys() == data["playbooks"].keys()
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "history", str(root), "--json"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and json.loads(res.stdout)["playbooks"]["pg/pg-kill-primary"]["pass_rate"] == 0.667


def test_experiments_write_junit(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from chaoskit.report.experiment import _junit

    result = {"experiment": {"name": "sweep"}, "aborted": "interrupted", "settings_restore_errors": None,
              "cells": [{"workers": 4, "tps": 100.0}, {"workers": 8, "tps": None}]}
    _junit(result, tmp_path / "junit.xml")
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("5", "2")
    failed = [tc.get("name") for tc in suite if tc.find("failure") is not None]
    assert failed == ["experiment.completed", "cell[1] workers=8"]


def test_an_experiment_with_a_failed_cell_is_sealed_incomplete_with_the_cells_it_measured(tmp_path: Path) -> None:
    """A cell that raised during the run (the runner keeps the cells done and the failure) and a
    report template that raises: run.json says both, the plain INCOMPLETE report names its digest,
    verify accepts the directory."""
    from chaoskit.incomplete import Failures
    from chaoskit.report.experiment import write_experiment
    from chaoskit.report.manifest import verify, write_manifest

    failures = Failures()
    try:
        raise ConnectionError("the writer went away")
    except ConnectionError as exc:
        failures.add("cell 1", exc)
    result = {"experiment": {"name": "sweep", "kind": "sweep"}, "aborted": None, "settings_restore_errors": None,
              "rows": [], "cells": [{"workload": "ledger", "workers": 4, "delay_ms": 0.0, "tps": 100.0}],
              "failures": failures}
    run_dir = tmp_path / "exp"
    run_dir.mkdir()
    written = write_experiment(result, run_dir)
    ev = json.loads((run_dir / "run.json").read_text())
    assert ev["incomplete"] == written["incomplete"]
    assert ev["incomplete"].startswith("cell 1: ConnectionError: the writer went away")
    assert ev["cells"][0]["tps"] == 100.0 and (run_dir / "results.csv").exists()
    assert "INCOMPLETE" in (run_dir / "report.html").read_text()
    failed = [tc.get("name") for tc in ET.parse(run_dir / "junit.xml").getroot() if tc.find("failure") is not None]
    assert failed == ["evidence.complete"]
    write_manifest(run_dir)
    assert verify(run_dir).problems == []


def restore_drill(root: Path, started: float, rto: float | None, lost: int, ok: bool = True,
                  cluster: str = "pg-dr") -> Path:
    d = root / f"{int(started)}-pg-restore-pitr"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({
        "schema_version": 3, "tool": {"version": "0.1.0"}, "playbook": {"content": {"name": "pg-restore-pitr"}},
        "started": started, "cluster": {"name": cluster}, "run_id": f"r{int(started)}",
        "results": {"verdict": ok, "faults": [],
                    "rpo": {"lost_acknowledged": lost, "phantoms": 0,
                            "pitr": {"missing_before_target": 0, "present_after_target": 0,
                                     "data_reaches_s_before_disaster": 2.0}},
                    "slo": {"rto_max": {"target": 30.0, "measured": rto, "ok": rto is not None and rto <= 30}},
                    "restore": {"ok": ok, "host": "rs1", "target_utc": "2026-12-07 14:13:30.264958+00",
                                "backup": "20261207-141319F", "restore_s": None if rto is None else rto - 2.0,
                                "rto_s": rto}}}))
    return d


def test_the_dr_register_lists_each_clusters_last_restore_test(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    restore_drill(root, 2000.0, 40.0, 900)  # the last one, and its objective missed
    restore_drill(root, 1000.0, 6.0, 800)
    drill(root, "pg-kill-primary", 3000.0, True, 10.0, 0, cluster="pg-dr")  # no restore: not in the register
    data = history(root)
    (entry,) = data["dr_register"].values()
    last = entry["last_restore_test"]
    assert (last["started"], last["rto_s"], last["restore_s"], last["lost_acknowledged"]) == (2000.0, 40.0, 38.0, 900)
    assert last["objectives"] == {"rto_max": {"target": 30.0, "measured": 40.0, "ok": False}}
    assert [r["started"] for r in entry["restore_tests"]] == [2000.0, 1000.0]
    assert entry["last_region_failover"] is None and list(data["dr_register"]) == ["pg-dr"]
    write_history(data, tmp_path / "h")
    html = (tmp_path / "h" / "dr-register.html").read_text()
    assert "rto_max 30.0: measured 40.0, NOT met" in html and "2026-12-07 14:13:30.264958+00" in html
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "history", str(root)], capture_output=True,
                         text=True, timeout=60, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and "DR-test register" in res.stdout, res.stderr
