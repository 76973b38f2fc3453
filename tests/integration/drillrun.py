"""Running a shipped playbook shortened on the lab, and counting a run's rows on a MySQL node
independently of the recorder (shared by the MySQL HA modules)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pymysql
import yaml

from chaoskit.inventory.models import Inventory

INV = "inventories/lab.yaml"
SECRETS = Path("/var/lib/chaoskit-lab/secrets")


# what a drill test writes unless it checks the report's PDF or plots (those tests run without it):
# every figure, the evidence and report.html are written the same; 4-5 s less per drill here
LEAN = ("--no-pdf", "--no-plots")

SETTLED = 0.5  # of the baseline's throughput: what a shortened drill's recovery waits for


def shortened(src: str, tmp: Path, at: list[str | None], duration: str, fault_durations: list[str] | None = None,
              recovery_within: str | None = None) -> Path:
    """The shipped playbook with its steps at `at` (None: a step after an event keeps its
    trigger), its faults lasting `fault_durations`, a shorter warm-up and baseline, and a
    shorter recovery bound where given. The throughput the recovery waits for is half the
    baseline's (`SETTLED`): these tests judge the failover, and on this 2-core lab, with replicas
    catching up beside the load, 90% was sometimes not held within the whole bound (86 s of one
    MHA drill's 121 s in CI)."""
    data = yaml.safe_load(Path(src).read_text())
    data["name"] += "-short"
    data["load"]["warmup"] = "2s"
    data["baseline"] = "5s"
    data["recovery"]["tps_fraction"] = SETTLED
    for step, when in zip(data["steps"], at, strict=True):
        if when is not None:
            step["at"] = when
    if recovery_within is not None:
        data["recovery"]["within"] = recovery_within
    for step, lasts in zip([s for s in data["steps"] if "fault" in s], fault_durations or [], strict=False):
        step["fault"]["duration"] = lasts
    data["duration"] = duration
    _files_by_full_path(data, Path(src).resolve().parent)
    path = tmp / Path(src).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _files_by_full_path(data: dict[str, Any], base: Path) -> None:
    """The copy lives elsewhere: the files the playbook names relative to its own directory (a SQL
    workload, a pgbench script, a JMeter plan and launcher) are given by their full paths."""
    load = data.get("load") or {}
    if isinstance(load.get("workload"), dict) and "sql" in load["workload"]:
        load["workload"]["sql"] = str(base / load["workload"]["sql"])
    for group in load.get("groups") or ():
        for tool, keys in (("pgbench", ("file",)), ("jmeter", ("plan", "bin"))):
            for key in keys:
                value = (group.get(tool) or {}).get(key)
                if value is not None and (key != "bin" or "/" in value):
                    group[tool][key] = str(base / value)


def run(playbook: Path, tmp: Path, *, refusal: bool = False
        ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """The drill run with the chaoskit command; its result, run.json and run directory. Every drill
    here starts on a healed lab (conftest's lab_reset): a refusal fails the test with its reason,
    unless the test drills one (`refusal`)."""
    out = tmp / "runs"
    res = subprocess.run(["chaoskit", "run", str(playbook), "-i", INV, "--out", str(out), *LEAN],
                         capture_output=True, text=True, timeout=400)
    dirs = sorted(out.glob("*"))
    assert dirs, res.stdout + res.stderr
    ev = json.loads((dirs[-1] / "run.json").read_text())
    assert refusal or ev.get("refused") is None, f"the drill was refused: {ev['refused']}\n{res.stderr[-3000:]}"
    return res, ev, dirs[-1]


def rows_on(lab: Inventory, cluster: str, host: str, run_id: str, user: str, secret: str) -> int:
    """This run's ledger rows on one node, asked with PyMySQL and plain SQL."""
    member = next(m for m in lab.clusters[cluster].members if m.host == host)
    conn = pymysql.connect(host=lab.member_address(member), port=3306, user=user,
                           password=(SECRETS / secret).read_text().strip(), database="chaoskit", connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM chaoskit_ledger WHERE run_id = %s", (run_id,))
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def expected_rows(ev: dict[str, Any]) -> int:
    """What the writer must hold: acknowledged - lost + indeterminate found + phantoms."""
    rpo = ev["results"]["rpo"]
    return rpo["acknowledged"] - rpo["lost_acknowledged"] + rpo["indeterminate_found"] + rpo["phantoms"]
