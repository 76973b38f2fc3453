"""Issue 43 on the lab: a drill with a tool group aborts on a breach (the abort rule judges what
every live load source has delivered, ~2 s behind for a tool), and a drill on a control node kept
busy by other processes still ends sealed, verifiable and with its figures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from chaoskit.inventory.models import Inventory
from chaoskit.workload.tool_group import LATE_S

# run on a lab no other session drills at the same time (`.ci/run`, tests/integration/lanes.py):
ALONE = "one drill keeps both cores of the control node busy"

INV = "inventories/lab.yaml"


def drill(playbook: Path, out: Path, timeout: float = 400) -> tuple[subprocess.CompletedProcess[str], Path]:
    res = subprocess.run(["chaoskit", "run", str(playbook), "-i", INV, "--out", str(out)], capture_output=True,
                         text=True, timeout=timeout)
    dirs = sorted(out.glob("*"))
    assert dirs, res.stdout + res.stderr
    return res, dirs[-1]


def verified(run_dir: Path) -> str:
    check = subprocess.run(["chaoskit", "verify", str(run_dir)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout.startswith(f"{run_dir}: intact"), check.stdout + check.stderr
    return check.stdout


def test_a_drill_whose_only_load_is_a_tool_group_aborts_on_a_breach(lab: Inventory, tmp_path: Path) -> None:
    """Only pgbench clients; the leader killed. Patroni cannot promote before the leader key expires
    (ttl 10 s, the key refreshed at most loop_wait before the kill), and until then every pgbench
    start fails: the error rate of the delivered seconds is 100 % for longer than the rule's 2 s,
    so the rule must fire, on data ~LATE_S old (it used to look at the last wall-clock second, which
    the tool's reader had not filled yet: error rate 0, never fired)."""
    data = yaml.safe_load(Path("playbooks/pg-kill-primary-pgbench.yaml").read_text())
    data.update(name="pg-kill-primary-pgbench-abort", baseline="4s", duration="40s", checks=["split_brain"],
                abort={"error_rate_above": 0.5, "for": "2s"}, slo={})
    data["load"]["warmup"] = "2s"
    data["load"]["groups"] = [g for g in data["load"]["groups"] if g.get("tool") == "pgbench"]
    data["steps"][0].update(at="6s")
    pb = tmp_path / "abort.yaml"
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    res, run_dir = drill(pb, tmp_path / "runs")
    assert res.returncode == 3, res.stdout + res.stderr
    ev = json.loads((run_dir / "run.json").read_text())
    assert ev["aborted"] == "error rate above 50% for 2s" and not ev.get("incomplete")
    rule = ev["abort_rule"]
    fired, (fault,) = rule["fired"], ev["faults_injected"]
    # the held stretch lies after the fault took effect (before it pgbench wrote without errors) and
    # was judged on delivered data: at least the tool's lateness behind the present
    assert fired["judged_until"] >= fault["t_effect"] + 2.0
    assert fired["lag_s"] >= LATE_S and fired["error_rate"] > 0.5
    assert rule["lag_s_median"] >= LATE_S  # the whole drill was judged that far behind
    # the abort came before the fault's planned end: its revert was the heal's, verified
    assert fired["t"] < fault["planned_end"] and fault["revert_verified"] is True
    assert ev["heal"]["reverted"] == [fault["id"]]
    verified(run_dir)


@pytest.fixture
def busy_control_node() -> object:
    """Both cores of the control node kept busy by stress-ng (in the root namespace, not in a lab
    host), started here and ended here by its process group; bounded by its own timeout too."""
    proc = subprocess.Popen(["stress-ng", "--cpu", "2", "--timeout", "600s", "--quiet"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    assert proc.poll() is None, "stress-ng did not start"
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_drill_on_a_busy_control_node_seals_its_evidence(lab: Inventory, tmp_path: Path,
                                                          busy_control_node: object) -> None:
    """The leader killed while other work uses both cores of the control node (where the load, its
    collector, the probe and the drill's own thread run): whatever the contention does to the
    figures, the drill ends as a drill (exit 0 or 1), its run directory sealed and verifiable,
    complete, with both RTOs and the RPO measured (issue 43: a reader raced the collector here)."""
    from drillrun import shortened

    pb = shortened("playbooks/pg-kill-primary.yaml", tmp_path, ["8s"], "30s", ["12s"])
    res, run_dir = drill(pb, tmp_path / "runs")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "incomplete:" not in res.stderr
    ev = json.loads((run_dir / "run.json").read_text())
    assert ev["incomplete"] is None and ev["aborted"] is None
    for name in ("events.jsonl", "timeline.csv", "history.jsonl.gz", "report.html", "junit.xml", "manifest.json"):
        assert (run_dir / name).stat().st_size > 0, name
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover", f
    assert 0 < f["rto_first_client_s"] <= f["rto_all_clients_s"]
    assert isinstance(ev["results"]["rpo"]["lost_acknowledged"], int)
    assert ev["results"]["verdict"] in (True, False) and res.returncode == (0 if ev["results"]["verdict"] else 1)
    verified(run_dir)
