"""Nothing outlives the controller: a drill whose controller is SIGKILLed mid-fault leaves no
process of its own behind within 2 s, and each fault kind is reverted by its host at the planned
end (goal: <= 5 s after it); a SIGKILLed experiment that switched synchronous_mode on has it
restored by its dead-man without `recover`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaoskit.faults.manager import FaultManager
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.lifeline import ENV_MARK

# run on a lab no other session drills at the same time (`.ci/run`, tests/integration/lanes.py):
ALONE = "a stress fault loads the machine's CPU during a drill whose controller is killed"

INV = "inventories/lab.yaml"
DURATION_S = 4.0
FAULTS = {
    "kill": '{kind: kill, target: "role:replica", processes: [patroni, postgres]',
    "crash": '{kind: crash, target: "role:replica"',
    "pause": '{kind: pause, target: "role:replica", processes: [patroni, postgres]',
    "stop": '{kind: stop, target: "role:replica", processes: [patroni]',
    "partition": '{kind: partition, target: "role:replica", peers: [all-hosts]',
    "loss": '{kind: loss, target: "role:replica", peers: [all-hosts], loss_pct: 30',
    "bandwidth": '{kind: bandwidth, target: "role:replica", rate: 1mbit',
    "latency": '{kind: latency, target: "role:replica", peers: ["role:primary"], peer_port: 5432, delay_ms: 20',
    "proxy": '{kind: proxy, target: "role:replica", peers: ["role:primary"], peer_port: 5432, down: true',
    "stress": '{kind: stress, target: "role:replica", cpu_workers: 1',
}
OUTLIVED: dict[str, float] = {}


def playbook(kind: str, path: Path) -> Path:
    path.write_text(f"""
name: ck-sigkill-{kind}
cluster: pg
load: {{workload: ledger, workers: 2, warmup: 1s}}
baseline: 3s
steps:
  - at: 4s
    fault: {FAULTS[kind]}, duration: {DURATION_S:g}s}}
duration: 14s
recovery: {{within: 30s}}
checks: []
""")
    return path


def run_processes(controller: int) -> list[int]:
    """Processes that carry this controller's mark (its load workers, relays, anything it started)."""
    mark = f"{ENV_MARK}={controller}".encode()
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            env = (p / "environ").read_bytes().split(b"\0")
            status = (p / "status").read_text()
        except OSError:
            continue
        if mark in env and "\nState:\tZ" not in status:
            out.append(int(p.name))
    return out


def wait_event(events: Path, kind: str, timeout: float) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if events.exists():
            for line in events.read_text().splitlines():
                ev = json.loads(line)
                if ev["kind"] == kind:
                    return ev
        time.sleep(0.05)
    raise AssertionError(f"no {kind} event in {events}")


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_sigkilled_drill_leaves_nothing_and_heals_on_plan(lab: Inventory, pool: RemotePool, tmp_path: Path,
                                                          kind: str) -> None:
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaoskit.cli", "run", str(playbook(kind, tmp_path / "pb.yaml")),
                             "-i", INV, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not list(out.glob("*/events.jsonl")):
            time.sleep(0.05)
        events = next(out.glob("*/events.jsonl"))
        injected = wait_event(events, "fault_injected", 60)
        time.sleep(1.0)  # mid-fault
        assert run_processes(proc.pid), "the load should be running under this controller"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t_killed = time.time()
        while run_processes(proc.pid) and time.time() < t_killed + 2.0:
            time.sleep(0.05)
        assert run_processes(proc.pid) == [], "processes of the run outlived its controller by 2 s"
        host, fid = injected["host"], injected["id"]
        planned_end_host = injected["t_effect_host"] + DURATION_S
        record = f"/var/lib/chaoskit/faults/{host}/done/{fid}"
        deadline = time.time() + 30
        done = ""
        while time.time() < deadline:
            done = pool.get(host).shell(f"cat {record} 2>/dev/null || true").stdout.split()
            if done:
                break
            time.sleep(0.2)
        assert done and done[1] == "deadman", done
        outlived = float(done[0]) - planned_end_host
        OUTLIVED[kind] = outlived
        print(f"\noutlive {kind}: the host reverted it {outlived:.2f} s after its planned end")
        # the dead-man keeps its attempts' log beside the record when one attempt was not enough
        attempts = pool.get(host).shell(f"cat {record}.log 2>/dev/null || true").stdout
        assert outlived <= 5.0, (outlived, attempts)
        fm = FaultManager(lab, pool)
        assert [e for es in fm.journaled().values() if isinstance(es, list) for e in es if e["id"] == fid] == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigkilled_sync_experiment_restores_synchronous_mode(lab: Inventory, tmp_path: Path) -> None:
    from chaoskit.ha.registry import manager_for

    ha = manager_for(lab.clusters["pg"], lab)
    assert ha.read_settings()["synchronous_mode"] is False
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: ck-sigkill-sync\nkind: sweep\ncluster: pg\nsettings: {synchronous_mode: true}\n"
                   "grid: {workers: [2], workload: [update]}\nwarmup: 1s\nmeasure: 60s\n")
    proc = subprocess.Popen([sys.executable, "-m", "chaoskit.cli", "experiment", "run", str(exp), "-i", INV, "--out",
                             str(tmp_path / "runs")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not ha.read_settings().get("synchronous_mode"):
            time.sleep(0.2)
        assert ha.read_settings()["synchronous_mode"] is True
        time.sleep(2.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        t_killed = time.time()
        while ha.read_settings().get("synchronous_mode") and time.time() < t_killed + 20:
            time.sleep(0.1)
        restored_after = time.time() - t_killed
        print(f"\nsettings dead-man: synchronous_mode restored {restored_after:.2f} s after the controller died")
        assert ha.read_settings()["synchronous_mode"] is False
        assert restored_after < 5.0
        assert run_processes(proc.pid) == []
        from chaoskit.ha import settings as ha_settings

        assert [e for _, e in ha_settings.pending() if e["cluster"] == "pg"] == []  # its journal entry is gone
    finally:
        if proc.poll() is None:
            proc.kill()
