"""pg_auto_failover and repmgr drilled as Patroni is (test_drill, shortened drills): each fault's
outcome, where its detection came from, what was lost, and the old primary back as a standby;
first, list-append transactions at serializable and every other built-in workload on
pg_auto_failover's PostgreSQL, without faults. The lab's pg_auto_failover and repmgr stacks are
added beside the session's lab once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import drillrun
import pytest
import yaml
from cleanload import CLEAN_WORKLOADS, runs_clean, sql_runs_clean
from drillrun import LEAN, SETTLED
from lanes import use_stacks

from chaoskit.inventory.models import Inventory

INV = "inventories/lab.yaml"


LAB_STACKS = ("pg_auto_failover", "repmgr")  # added beside the session's lab, removed after this module


@pytest.fixture(scope="module")
def stacks(lab: Inventory) -> Inventory:
    use_stacks(LAB_STACKS)
    return lab


def test_list_append_at_serializable_without_faults_has_no_anomaly(stacks: Inventory) -> None:
    """List-append transactions at SERIALIZABLE on pg_auto_failover's PostgreSQL, no fault: besides
    what holds in every load (tests/integration/listappend.py), PostgreSQL's serializable shows no
    anomaly at all. First in the module, while the cluster is as built."""
    from listappend import without_faults

    judged = without_faults(stacks, "pgaf", "serializable")
    assert judged["anomalies"] == {} and judged["valid"] is True, judged["violations"]


def test_your_own_sql_runs_clean_on_postgresql_and_its_ledger_holds_every_acknowledged_order(
        stacks: Inventory) -> None:
    sql_runs_clean(stacks, "pgaf", "shop-orders.pg.sql")  # tests/integration/cleanload.py


@pytest.mark.parametrize("workload", CLEAN_WORKLOADS)
def test_every_workload_runs_clean_on_postgresql(stacks: Inventory, workload: str) -> None:
    """Each built-in workload for 5 s on pg_auto_failover's PostgreSQL, before any drill, and what
    holds in every legal run of it (tests/integration/cleanload.py)."""
    runs_clean(stacks, "pgaf", workload)


@pytest.mark.parametrize("cluster", ["pgaf", "repmgr"])
def test_each_member_on_a_filesystem_of_its_own_keeps_its_wal_within_the_lab_bounds(stacks: Inventory,
                                                                                   cluster: str) -> None:
    """As Patroni's (test_lab), on a sized tmpfs each: a full disk stays in its member. pg_autoctl
    sizes wal_keep_size for the machine (8 GB here), so the lab's bound is checked on the servers
    themselves."""
    from labdisks import assert_members_on_their_own_bounded_disks

    assert_members_on_their_own_bounded_disks(stacks, cluster)


def test_a_full_disk_on_a_tmpfs_member_stays_in_it_and_disk_slow_says_why_not(stacks: Inventory) -> None:
    """disk_full on a repmgr replica: its tmpfs is left with at most the asked free space (64 MiB,
    less what PostgreSQL writes meanwhile) while the other members' disks keep theirs; reverted,
    the ballast is gone and the space is back. disk_slow on the same member is refused by its
    preflight check, saying its filesystem has no block device."""
    import os

    from chaoskit.faults.manager import FaultManager
    from chaoskit.faults.spec import parse_fault
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.topology.roles import discover_roles

    def free(m: Any) -> int:
        st = os.statvfs(Path(m.data_dir).parent)
        return st.f_bavail * st.f_frsize

    members = {m.host: m for m in stacks.clusters["repmgr"].members}
    replica = next(r.member for r in discover_roles(stacks.clusters["repmgr"], stacks) if r.sql_role == "replica")
    others = {h: free(m) for h, m in members.items() if h != replica}
    before = free(members[replica])
    with RemotePool(stacks) as pool:
        fm = FaultManager(stacks, pool)
        spec = parse_fault({"kind": "disk_full", "target": replica, "cluster": "repmgr", "free": "64M", "ttl": 60})
        (fault,) = fm.inject(spec)
        try:
            assert fm.is_active(fault) and free(members[replica]) <= 64 * 2**20
            for host, was in others.items():
                assert free(members[host]) >= was - 256 * 2**20, host  # WAL streamed meanwhile, not a ballast
        finally:
            fm.revert(fault)
        assert fault.revert_verified and free(members[replica]) >= before - 256 * 2**20
        slow = parse_fault({"kind": "disk_slow", "target": replica, "cluster": "repmgr", "processes": ["postgres"],
                            "write_rate": "1mbps", "ttl": 60})
        why = fm.host_refusal(slow, replica)  # what a drill's preflight asks before it starts
        assert why is not None and why.startswith(f"{replica}: ") and "no block device" in why, why


def shortened(src: str, tmp: Path, **changes: Any) -> Path:
    """The shipped playbook with the drill's clock shortened (same faults, checks and SLOs)."""
    data = yaml.safe_load(Path(src).read_text())
    data["name"] = data["name"] + "-short"
    data["load"]["warmup"] = "2s"
    data["baseline"] = "6s"
    data["recovery"]["tps_fraction"] = SETTLED  # as drillrun.shortened: the failover is judged here
    steps = data["steps"]
    steps[0]["at"] = "8s"
    if "fault" in steps[0]:
        steps[0]["fault"]["duration"] = changes.pop("fault_duration", "15s")
    if len(steps) > 1:
        steps[1]["at"] = changes.pop("second_at", "25s")
    data["duration"] = changes.pop("duration", "30s")
    data.update(changes)
    path = tmp / Path(src).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(playbook: Path, tmp: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    res, ev, _ = drillrun.run(playbook, tmp)
    return res, ev


def marks_in_order(f: dict[str, Any]) -> None:
    marks = [f[k] for k in ("t_fault", "t_detect", "t_promoted", "t_first_ok")]
    assert None not in marks and marks == sorted(marks), marks


def test_pgaf_keeper_killed_fails_over_without_loss(stacks: Inventory, tmp_path: Path) -> None:
    res, ev = run(shortened("playbooks/pgaf-kill-primary.yaml", tmp_path), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover" and f["new_primary"] != f["old_primary"] == f["target_host"]
    assert f["detect_signal"].startswith("monitor-events: ")  # the monitor's own event table
    marks_in_order(f)
    assert ev["ha"]["manager"] == "pg_auto_failover"
    rpo = ev["results"]["rpo"]  # pg_auto_failover commits synchronously to a secondary
    assert rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0 and rpo["acknowledged"] > 1000
    assert ev["results"]["checks"]["expected_outcome"]["valid"] is True


def test_repmgr_primary_killed_fails_over_and_is_rejoined_rewound(stacks: Inventory, tmp_path: Path) -> None:
    res, ev = run(shortened("playbooks/repmgr-kill-primary.yaml", tmp_path), tmp_path)
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover" and f["new_primary"] != f["target_host"], res.stdout
    # detection from repmgrd's log on the standbys, before the promotion repmgr.events records
    assert f["detect_signal"].startswith("repmgrd-log: ") and "unable to connect to upstream" in f["detect_signal"]
    assert f["phases"]["detection_s"] > 0 and f["phases"]["promotion_s"] > 0
    marks_in_order(f)
    (rejoin,) = ev["actions"]
    # the killed primary's crash recovery diverged from the new timeline: rejoin must rewind, not clone
    assert rejoin["ok"] and rejoin["rewound"] is True and rejoin["rebuilt"] is False, rejoin["answer"]
    assert ev["results"]["checks"]["replica_convergence"]["valid"] is True
    assert ev["results"]["rpo"]["phantoms"] == 0
    # repmgrd's log is found by the manager in repmgr.conf (the inventory names only PostgreSQL's)
    kept = {(r["host"], r["label"]): r for r in ev["logs"]}
    assert {label for _, label in kept} == {"postgres", "repmgrd"}
    promoted = (tmp_path / "runs").glob(f"*/logs/{f['new_primary']}/repmgrd.log")
    assert "unable to connect to upstream" in next(promoted).read_text()


def test_repmgr_partition_during_rejoin_lands_on_the_rejoining_member_and_heals(stacks: Inventory,
                                                                                tmp_path: Path) -> None:
    """repmgr-partition-during-rejoin shortened: the primary killed at +8 s, repmgr rejoins it at
    +25 s, and the third step waits for the probe to see it rejoining. Its partition lands on that
    member (the host step 0 killed: `fault.0`), no earlier than the event, with every other member
    as a peer; the outcome is said in words; the cut is reverted and verified, and afterwards the
    member reaches the others' PostgreSQL again. Whether repmgrd on the cut standby promotes itself
    is the drill's finding, left to the evidence (split_brain says it)."""
    from chaoskit.inventory.fanout import RemotePool

    res, ev = run(shortened("playbooks/repmgr-partition-during-rejoin.yaml", tmp_path, fault_duration="15s",
                            duration="45s"), tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    kill, cut = ev["faults_injected"]
    [trig] = ev["triggered_steps"]
    assert (trig["fired"], trig["step"], trig["event"], trig["member"]) == (True, 2, "rejoin_started", kill["host"])
    assert cut["host"] == kill["host"] and cut["kind"] == "partition" and cut["t_effect"] >= trig["t_event"]
    assert cut["revert_verified"] is True and kill["revert_verified"] is True
    faults = {f["id"]: f for f in ev["results"]["faults"]}
    assert faults[cut["id"]]["outcome_text"] and faults[kill["id"]]["outcome"] == "failover"
    others = [m for m in stacks.clusters["repmgr"].members if m.host != cut["host"]]
    with RemotePool(stacks) as pool:
        for m in others:
            probe = pool.get(cut["host"]).shell(
                f"timeout 5 bash -c '</dev/tcp/{stacks.member_address(m)}/{m.db_port or 5432}'", check=False)
            assert probe.exited == 0, (m.host, probe.stderr)


def switched_without_loss(ev: dict[str, Any]) -> None:
    (action,) = ev["actions"]
    assert action["kind"] == "switchover" and action["ok"], action["answer"]
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover" and f["new_primary"] != f["old_primary"]
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0


def test_switchover_moves_the_primary_and_loses_nothing(stacks: Inventory, tmp_path: Path) -> None:
    res, ev = run(shortened("playbooks/repmgr-switchover.yaml", tmp_path), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    switched_without_loss(ev)


def test_campaign_of_switchovers(stacks: Inventory, tmp_path: Path) -> None:
    """A 2-run campaign of pg_auto_failover's switchover, shortened: two sealed run directories,
    each a switchover that moved the primary and lost nothing, the distribution from their own
    run.json files (the median of two: their mean), the cluster healthy again between runs. Two
    runs, not three: the loop, the health wait between runs and the distribution are the same, and
    a third run cost CI a minute (the distribution's odd-count median is a unit test's)."""
    res = subprocess.run(["chaoskit", "campaign", str(shortened("playbooks/pgaf-switchover.yaml", tmp_path)), "-i",
                          INV, "--repeat", "2", "--out", str(tmp_path / "c"), *LEAN],
                         capture_output=True, text=True, timeout=900)
    print(res.stdout[-600:])
    (root,) = (tmp_path / "c").iterdir()
    summary = json.loads((root / "campaign.json").read_text())
    assert summary["repeat"] == 2 and len(summary["runs"]) == 2, res.stdout + res.stderr
    rtos = []
    for r in summary["runs"]:
        ev = json.loads((root / r["run"] / "run.json").read_text())
        switched_without_loss(ev)
        # the worst over its outages; none (a switchover no client noticed): no figure
        outages = [f["rto_all_clients_s"] for f in ev["results"]["faults"] if f.get("outage")]
        rtos.append(max(outages) if outages else None)
        assert r["verdict"] == ev["results"]["verdict"]
        check = subprocess.run(["chaoskit", "verify", str(root / r["run"])], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    dist, known = summary["rto_all_clients_s"], sorted(r for r in rtos if r is not None)
    assert [r["rto_all_clients_s"] for r in summary["runs"]] == rtos
    if known:
        assert dist["min"] == round(known[0], 6) and dist["max"] == round(known[-1], 6)
        assert dist["median"] == round(known[len(known) // 2] if len(known) % 2 else
                                       (known[len(known) // 2 - 1] + known[len(known) // 2]) / 2, 6)
    assert res.returncode == (0 if summary["passed"] == 2 else 1)
    assert (root / "campaign_rto.png").stat().st_size > 0 and (root / "campaign.html").exists()


def test_repmgr_partition_is_split_brain_and_the_rewind_loses_what_the_old_primary_acknowledged(
        stacks: Inventory, tmp_path: Path) -> None:
    """repmgr has no fencing: the isolated primary goes on acknowledging writes (its clients still
    reach it) while a standby is promoted; the rejoin rewinds them away. The drill must show it."""
    res, ev = run(shortened("playbooks/repmgr-partition-primary.yaml", tmp_path), tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "split_brain", f["outcome_text"]
    assert ev["results"]["checks"]["split_brain"]["valid"] is False
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] > 0 and rpo["phantoms"] == 0
    (rejoin,) = ev["actions"]
    assert rejoin["ok"] and rejoin["rewound"] is True, rejoin
    convergence = ev["results"]["checks"]["replica_convergence"]
    assert convergence["valid"] is True, convergence


def test_pgaf_partition_overlaps_roles_but_loses_nothing(stacks: Inventory, tmp_path: Path) -> None:
    """pg_auto_failover keeps the isolated primary in its role until the keeper's partition timeout
    (20 s) while the monitor promotes a secondary after ~12 s: two primaries for a while, but the
    isolated one cannot acknowledge a commit (synchronous replication)."""
    res, ev = run(shortened("playbooks/pgaf-partition-primary.yaml", tmp_path, fault_duration="16s",
                            duration="32s"), tmp_path)
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "split_brain", f["outcome_text"]
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0
    assert res.returncode == 1  # split-brain is a finding, whatever the data says


def test_pgaf_without_its_monitor_takes_no_write_and_promotes_nobody(stacks: Inventory, tmp_path: Path) -> None:
    """pgaf-monitor-down-then-kill-primary shortened: the monitor's keeper tree crashes (a service
    of afm, no member), then the primary's. Only the monitor orders a promotion and a keeper does
    not serve without it: no member other than the old primary is writable, and no write is
    acknowledged, from the primary's crash until the monitor is started again. Nothing
    acknowledged is lost (synchronous to one standby) and no two members are ever writable."""
    from drillrun import run as run_short
    from drillrun import shortened as shortened_steps

    pb = shortened_steps("playbooks/pgaf-monitor-down-then-kill-primary.yaml", tmp_path, ["8s", "11s"], "45s",
                         ["25s", "12s"], recovery_within="20s")
    res, ev, _ = run_short(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    monitor, primary = ev["results"]["faults"]
    assert (monitor["kind"], monitor["target_host"]) == ("crash", "afm")
    back = monitor["t_reverted"]
    assert back is not None and back >= monitor["t_fault"] + 25.0
    assert primary["t_new_primary"] is None or primary["t_new_primary"] >= back, primary["outcome_text"]
    assert primary["t_first_ok"] is None or primary["t_first_ok"] >= back
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
