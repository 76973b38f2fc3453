"""Load from loader hosts (issue 46): client groups run as load agents on the lab's loader hosts
ld-a (zone a) and ld-b (zone b), placed, started and read through the lab's Ray cluster
(`chaoskit loaders up`, once for the module; `chaoskit.workload.ray_loader`) or over SSH alone
(`chaoskit.workload.ssh_loader`), their batches spooled on the loader's side before the
controller sees them. The module ends with `loaders down`, after which no process of the lab's
Ray cluster is left."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentfiles import agent_pids, pid_alive, spooled

from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.lab.spec import NETNS_PREFIX
from chaoskit.recorder import INFO, Recorder
from chaoskit.workload.placement import loader_agent_sources
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.spec import ClientGroup
from chaoskit.workload.workloads import WorkloadParams

LAB_STACKS = ("patroni", "loaders")
PARAMS = WorkloadParams(table_rows=2_000)
PLACEMENT = {"zone-a": ("ld-a",), "zone-b": ("ld-b",)}


def ray_processes(directory: str) -> list[int]:
    """Processes whose command line names the lab's Ray directory (the head's and nodes' `ray
    start`, raylets, GCS: every one of them is started with a path below it)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if directory.encode() in (proc / "cmdline").read_bytes():
                out.append(int(proc.name))
        except OSError:
            continue
    return out


@pytest.fixture(scope="module", autouse=True)
def ray_cluster(lab: Inventory) -> Iterator[None]:
    """The lab's Ray cluster for this module: `loaders up`, then `loaders down`, which must leave
    no Ray process of it (and no pid file) behind."""
    import subprocess

    assert lab.loaders is not None and lab.loaders.ray is not None
    res = subprocess.run(["chaoskit", "loaders", "up", "-i", "inventories/lab.yaml"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    yield
    import sys

    if "ray" in sys.modules:  # this process was a driver of the cluster (the runners' tests)
        sys.modules["ray"].shutdown()
    res = subprocess.run(["chaoskit", "loaders", "down", "-i", "inventories/lab.yaml"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    left = [p for p in ray_processes(lab.loaders.ray.dir) if p != os.getpid()]
    assert not left, left
    assert not list(Path(lab.loaders.ray.dir).glob("**/*.pid"))


def over_ssh(lab: Inventory) -> Inventory:
    """The lab inventory without its Ray cluster (nor the resources of its nodes): agents started and
    read over SSH alone."""
    assert lab.loaders is not None
    return lab.model_copy(update={"loaders": lab.loaders.model_copy(update={"ray": None, "resources": {}})})


@pytest.fixture
def run_dir(lab: Inventory) -> Iterator[Path]:
    """This test's agents' directories on the loader hosts (the lab's hosts share this machine's
    filesystem, so they are read here as the agents wrote them); removed afterwards."""
    assert lab.loaders is not None
    run_id = "t-" + uuid.uuid4().hex[:10]
    path = Path(lab.loaders.spool) / run_id
    yield path
    shutil.rmtree(path, ignore_errors=True)


def runner_on_loaders(lab: Inventory, run_dir: Path, pool: RemotePool, events: list[dict]) -> LoadRunner:
    spec = LoadSpec(workload="ledger", workers=4, params=PARAMS,
                    groups=(ClientGroup("zone-a", workers=2), ClientGroup("zone-b", workers=2, first_worker=3)))
    runner = LoadRunner(lab.clusters["pg"], lab, spec, Recorder(base=time.time()), on_event=events.append,
                        make_sources=loader_agent_sources(pool, PLACEMENT, run_dir.name))
    runner.setup()
    return runner


def netns_of(pid: int) -> str | None:
    """The lab host whose network namespace the process is in (None: another one)."""
    mine = os.stat(f"/proc/{pid}/ns/net").st_ino
    for ns in Path("/run/netns").glob(NETNS_PREFIX + "*"):
        if ns.stat().st_ino == mine:
            return ns.name[len(NETNS_PREFIX):]
    return None


def acked_and_present(runner: LoadRunner, rec: Recorder) -> tuple[set, set]:
    from chaoskit.db.base import Driver

    conn = runner.driver.connect_writer()
    try:
        present = set(runner.workload.present(conn))  # type: ignore[attr-defined]
    finally:
        Driver.close_quietly(conn)
    acked = {(w, s) for w, r in rec.ledger_acknowledged().items() for lo, hi in r for s in range(lo, hi + 1)}
    return acked, present


@pytest.mark.parametrize("via", ["ray", "ssh"])
def test_client_groups_on_two_loader_hosts_deliver_exactly_what_their_agents_spooled(lab: Inventory,
                                                                                     run_dir: Path, via: str) -> None:
    """The ledger for 8 s, group zone-a on ld-a and zone-b on ld-b, through Ray and over SSH alone:
    each agent runs in its loader host's network namespace; what the recorder holds equals what
    the agents spooled there; every acknowledged row is on the writer and none is there that no
    write was acknowledged or left indeterminate for; both zones wrote; the agents are gone after
    the stop. Through Ray, every read went through the hosts' actors (no SSH fallback), and the
    clock read through them agrees with SSH's within both uncertainties and 1 ms."""
    events: list[dict] = []
    inv = lab if via == "ray" else over_ssh(lab)
    with RemotePool(inv) as pool:
        runner = runner_on_loaders(inv, run_dir, pool, events)
        runner.start()
        try:
            time.sleep(2.0)
            places = {netns_of(pid) for pid, _ in agent_pids(run_dir)}
            wheres = sorted(s.describe()["where"] for s in runner.sources)
            time.sleep(6.0)
        finally:
            runner.stop()
    assert wheres == ["ld-a", "ld-b"] and places == {"ld-a", "ld-b"}
    for source in runner.sources:
        said = source.describe()
        assert said.get("via", "ssh") == via
        if via == "ray":
            assert said["ssh_fallbacks"] == 0 and said["actor_gone"] is None
            ssh, ray = said["clock_ssh"], said["clock_ray"]
            assert abs(ssh["offset_s"] - ray["offset_s"]) <= ssh["uncertainty_s"] + ray["uncertainty_s"] + 0.001
    kinds, spooled_acks = spooled(run_dir)
    assert kinds.count("ready") == kinds.count("final") == len(runner.sources) == 2, kinds
    rec = runner.recorder
    totals = rec.totals()
    assert totals["fail"] == 0 and totals["info"] == 0, rec.errors[:5]
    assert totals["ok"] > 100 and totals["write_ok"] == spooled_acks
    acked, present = acked_and_present(runner, rec)
    assert len(acked) == spooled_acks and acked <= present and present <= acked | set(rec.ledger_keys(INFO))
    assert {w for w, _ in acked} == {1, 2, 3, 4}  # both zones wrote
    assert not rec.ledger_undelivered()
    assert not [e for e in events if e["kind"] in ("loader_lost", "load_source_lost", "load_undelivered")], events
    assert not [p for p in agent_pids(run_dir) if pid_alive(p)]


def test_a_group_spread_over_two_loader_hosts_takes_an_agent_on_each(lab: Inventory, run_dir: Path) -> None:
    """One group of 2 workers placed on ld-a and ld-b (`loaders: 2` over a `where:` matching both):
    split into one agent per host, each in its host's network namespace with one of the workers;
    the recorder holds exactly what the two spooled, and both wrote."""
    events: list[dict] = []
    spec = LoadSpec(workload="ledger", workers=2, params=PARAMS, groups=(ClientGroup("spread", workers=2),))
    with RemotePool(lab) as pool:
        runner = LoadRunner(lab.clusters["pg"], lab, spec, Recorder(base=time.time()), on_event=events.append,
                            make_sources=loader_agent_sources(pool, {"spread": ("ld-a", "ld-b")}, run_dir.name))
        runner.setup()
        runner.start()
        try:
            time.sleep(2.0)
            places = sorted(netns_of(pid) or "?" for pid, _ in agent_pids(run_dir))
            time.sleep(2.0)
        finally:
            runner.stop()
    assert places == ["ld-a", "ld-b"]
    assert sorted((s.describe()["where"], s.workers) for s in runner.sources) == [("ld-a", (1,)), ("ld-b", (2,))]
    kinds, spooled_acks = spooled(run_dir)
    assert kinds.count("ready") == kinds.count("final") == 2
    assert runner.recorder.totals()["write_ok"] == spooled_acks
    acked, _ = acked_and_present(runner, runner.recorder)
    assert {w for w, _ in acked} == {1, 2}
    assert not [p for p in agent_pids(run_dir) if pid_alive(p)]


def test_an_agent_killed_on_its_loader_is_lost_and_the_other_zone_goes_on(lab: Inventory, run_dir: Path) -> None:
    """ld-b's agent SIGKILLed 3 s into the load: its source is said lost (`loader_lost`, no final
    batch) and every acknowledged write it spooled before stays in the run, its later writes
    unknown to the RPO check (never phantoms); zone a's agent loads to the end and ends with its
    final batch."""
    events: list[dict] = []
    with RemotePool(lab) as pool:
        runner = runner_on_loaders(lab, run_dir, pool, events)
        runner.start()
        try:
            time.sleep(3.0)
            [(pid, _)] = [p for p in agent_pids(run_dir) if netns_of(p[0]) == "ld-b"]
            os.kill(pid, signal.SIGKILL)
            time.sleep(5.0)
        finally:
            runner.stop()
    lost = [e for e in events if e["kind"] == "loader_lost"]
    assert [e["source"] for e in lost] == ["zone-b/3@ld-b"], events
    assert "without its final batch" in lost[0]["why"]
    kinds, spooled_acks = spooled(run_dir)
    assert kinds.count("ready") == 2 and kinds.count("final") == 1
    rec = runner.recorder
    acked, present = acked_and_present(runner, rec)
    # every acknowledged write the agents spooled is in the ledger (the throughput counts of the
    # killed agent's last, still open interval never left it: those ops are in its ledger only)
    assert len(acked) == spooled_acks and acked <= present
    assert set(rec.ledger_undelivered().workers()) == {3, 4}  # zone b's workers: their later outcomes unknown
    assert {w for w, _ in acked} == {1, 2, 3, 4}
    assert not [p for p in agent_pids(run_dir) if pid_alive(p)]


@contextlib.contextmanager
def shortened_drill(lab: Inventory, playbook: str, tmp_path: Path, fault_at: str, duration: str,
                    lasts: str) -> Iterator[tuple[dict, list[dict], Path]]:
    """The shipped placed-groups playbook shortened and run: its run.json, its events and its
    agents' directory on the loader hosts (removed afterwards)."""
    from drillrun import run, shortened

    pb = shortened(playbook, tmp_path, [fault_at], duration, [lasts], recovery_within="40s")
    res, ev, run_dir = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    spool = Path(lab.loaders.spool) / ev["run_id"]  # type: ignore[union-attr]
    try:
        yield ev, [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()], spool
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def test_az_failover_gives_each_zone_its_own_figures(lab: Inventory, tmp_path: Path) -> None:
    """az-failover-tools shortened: the leader killed at +8 s under zone a's own clients (an agent on
    ld-a) and zone b's pgbench (an agent on ld-b running it, its tables made from the control node
    first). Each zone has its own figures; zone a's lost writes are the run's, over exactly the
    writes its agent spooled; zone b's RTO per client is recounted here from pgbench's own logs,
    which stayed on ld-b in the agent's directory, and its RPO is null with the reason. Each
    loader's clock was measured again while it loaded, and each zone's clock error is the worst
    measurement's. Every agent delivered its final batch and left no process behind."""
    with shortened_drill(lab, "playbooks/az-failover-tools.yaml", tmp_path, "8s", "45s", "15s") as (ev, events,
                                                                                                    spool):
        (f,) = ev["results"]["faults"]
        assert f["outcome"] == "failover", f.get("outcome_text")
        groups = ev["results"]["groups"]
        za, zb = groups["zone-a"], groups["zone-b"]
        assert set(groups) == {"zone-a", "zone-b"}
        assert (za["tool"], za["where"], za["loaders"]) == ("builtin", {"az": "a"}, ["ld-a"])
        assert (zb["tool"], zb["where"], zb["loaders"]) == ("pgbench", {"az": "b"}, ["ld-b"])
        # each loader's clock measured before the start and again every 30 s while it loaded (a
        # turn of its reader may come up to 10 s late); its zone's stamps are exact to within the
        # worst of the first uncertainty and each re-measurement's change plus both uncertainties
        [said] = [e for e in events if e["kind"] == "load_sources"]
        [ended] = [e for e in events if e["kind"] == "load_sources_ended"]
        assert sorted(s["source"] for s in said["sources"]) == ["zone-a/1@ld-a", "zone-b/pgbench@ld-b"]
        due = int((ended["t"] - said["t"] - 10.0) // 30.0)
        assert due >= 1, (said["t"], ended["t"])
        for name, g in groups.items():
            [src] = [x for x in said["sources"] if x["group"] == name]
            assert src["where"] == g["loaders"][0] and src["via"] == "ray"
            again = [e for e in events if e["kind"] == "loader_clock" and e["source"] == src["source"]]
            assert len(again) >= due, again
            before, errors = src["clock_uncertainty_s"], [src["clock_uncertainty_s"]]
            for e in again:  # one kernel clock here: every offset within its uncertainty and the shell's delay
                assert e["group"] == name and abs(e["offset_s"]) <= e["uncertainty_s"] + 0.005 and not e["stepped"]
                # (each figure rounded to the microsecond as said)
                assert e["error_s"] == pytest.approx(abs(e["change_s"]) + before + e["uncertainty_s"], abs=2e-6)
                before = e["uncertainty_s"]
                errors.append(e["error_s"])
            assert g["loader_clock_error_s"] == round(max(errors), 6) > 0
            [end] = [x for x in ended["sources"] if x["source"] == src["source"]]
            assert end["clock_measures"] == len(again)
            assert end["clock_error_s"] == pytest.approx(g["loader_clock_error_s"], abs=1e-6)
        assert all(0 < g["rto_first_client_s"] <= g["rto_all_clients_s"] < 30 for g in groups.values())
        # zone a: its lost writes are the run's, out of exactly what its agent spooled
        assert za["rpo"]["lost_acknowledged"] == ev["results"]["rpo"]["lost_acknowledged"]
        assert ev["results"]["rpo"]["phantoms"] == 0
        kinds, spooled_acks = spooled(spool)
        assert kinds.count("ready") == kinds.count("final") == 2
        assert za["rpo"]["acknowledged"] == spooled_acks > 0
        # zone b: pgbench's figures from its own logs, kept on ld-b
        assert zb["rpo"] is None and "does not say" in zb["rpo_null_reason"]
        aborted = {e["worker"]: e["t"] for e in events if e["kind"] == "tool_client_aborted"}
        assert set(aborted) == set(zb["workers"]), aborted  # every pgbench client was on the killed primary
        # pgbench stamps with ld-b's clock: on the control clock less the offset measured last (a
        # change is slewed in over a second: within that change of either)
        [src_b] = [x for x in said["sources"] if x["group"] == "zone-b"]
        measured = [(said["t"], src_b["clock_offset_s"])] + [
            (e["t"], e["offset_s"]) for e in events if e["kind"] == "loader_clock" and e["source"] == src_b["source"]]
        slew = max((abs(e["change_s"]) for e in events if e["kind"] == "loader_clock"), default=0.0)

        def control(t_host: float) -> float:
            return t_host - [off for t, off in measured if t <= t_host][-1]

        # The abort is stamped no earlier than the aborted run's last logged transaction, and
        # exactly at it when pgbench's last word came within a coarse clock tick of it: that
        # transaction, mapped here with the offset as measured rather than the agent's (slewed,
        # unrounded), may land a few microseconds after the abort's stamp. A restarted run's first
        # transaction ends a process start, a connection and a transaction after the abort was
        # seen (milliseconds), so the recount takes ends past the abort by more than that margin.
        tie = 1e-5 + slew
        raw = spool / f"zone-b-{zb['workers'][0]}" / "tools"
        for w in zb["workers"]:
            ends = [control(int(x[4]) + int(x[5]) / 1e6) for p in raw.glob(f"client-{w}.[0-9]*")
                    for x in (line.split() for line in p.read_text().splitlines()) if x[2].isdigit()]
            first_after = min(t for t in ends if t > aborted[w] + tie)
            assert zb["faults"][0]["per_client_rto_s"][str(w)] == pytest.approx(first_after - f["t_fault"],
                                                                                abs=1e-5 + slew)
        assert not [p for p in agent_pids(spool) if pid_alive(p)]


def test_an_experiments_cells_run_their_clients_on_the_zones_loader_host(lab: Inventory, tmp_path: Path) -> None:
    """zone-b-ladder shortened to two steps (2 and 4 clients, once each): each cell's clients ran as
    load agents on ld-b (their directories there say so, each with its ready and final frames), the
    result keeps the placement, and what each agent spooled holds at least the cell's measured
    window (its acknowledged writes over the whole run, the window's included); the control node's
    CPU is not made to speak for clients that were not on it."""
    import subprocess

    spool_root = Path(lab.loaders.spool)  # type: ignore[union-attr]
    before = set(spool_root.iterdir()) if spool_root.exists() else set()
    exp = tmp_path / "exp.yaml"
    exp.write_text(Path("playbooks/zone-b-ladder.yaml").read_text()
                   .replace("workers: [2, 4, 8, 16]", "workers: [2, 4]").replace("repeats: 3", "repeats: 1")
                   .replace("measure: 10s", "measure: 3s").replace("warmup: 3s", "warmup: 1s"))
    res = subprocess.run(["chaoskit", "experiment", "run", str(exp), "-i", "inventories/lab.yaml", "--out",
                          str(tmp_path / "runs")], capture_output=True, text=True, timeout=600)
    new = sorted(set(spool_root.iterdir()) - before, key=lambda d: d.stat().st_mtime)
    try:
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        (run_dir,) = sorted((tmp_path / "runs").glob("*"))
        result = json.loads((run_dir / "run.json").read_text())
        assert result["placement"] == {"where": {"az": "b"}, "loaders": ["ld-b"]}
        rows = result["rows"]
        assert [(r["workers"], r["loaders"]) for r in rows] == [(2, ["ld-b"]), (4, ["ld-b"])]
        assert all(r["tps"] > 0 and r["error_rate"] == 0 and r["client_cpu_cores"] is None for r in rows)
        assert all(c["client_saturated"] is None for c in result["cells"])
        assert len(new) == 2  # one run per cell, its agents' directories on the loader host
        for cell_dir, row in zip(new, rows, strict=True):
            agents = sorted(cell_dir.iterdir())
            assert agents and all(json.loads((a / "controller.json").read_text())["loader"] == "ld-b"
                                  for a in agents)
            kinds, acks = spooled(cell_dir)
            assert kinds.count("ready") == kinds.count("final") == len(agents)
            assert acks >= row["tps"] * 3.0 - 1  # the 3 s window is part of the run
            assert not [p for p in agent_pids(cell_dir) if pid_alive(p)]
    finally:
        for d in new:
            shutil.rmtree(d, ignore_errors=True)


def test_loaders_status_shows_each_hosts_zone_versions_and_clock(lab: Inventory) -> None:
    """`chaoskit loaders status`: both lab loader hosts with their zone, this chaoskit, the pinned
    Ray, a live node of the lab's Ray cluster, and a clock offset within its uncertainty plus 5 ms
    (one kernel clock here); ready, exit 0."""
    import subprocess

    import chaoskit
    from chaoskit.workload.ray_plane import RAY_VERSION

    res = subprocess.run(["chaoskit", "loaders", "status", "-i", "inventories/lab.yaml", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads(res.stdout)
    assert got["controller_chaoskit"] == chaoskit.__version__
    assert [(r["host"], r["az"], r["chaoskit"], r["refused"]) for r in got["loaders"]] == [
        ("ld-a", "a", chaoskit.__version__, None), ("ld-b", "b", chaoskit.__version__, None)]
    assert got["ray"]["reachable"] is True and got["ray"]["pinned"] == RAY_VERSION
    assert all(r["ray"] == RAY_VERSION and r["ray_node"] is True for r in got["loaders"])
    for r in got["loaders"]:
        assert abs(r["clock_offset_ms"]) <= r["clock_uncertainty_ms"] + 5.0


def test_a_loader_cut_from_the_database_is_its_zones_outage_alone(lab: Inventory, tmp_path: Path) -> None:
    """loader-partitioned shortened: ld-b, zone b's loader host, cut from every member for 12 s.
    The cluster does not react (pg's primary stays); zone b's clients are back no earlier than the
    cut was lifted (nothing can be acknowledged through it), every acknowledged write of both zones
    is kept, and zone b's agent, cut from the database but not from the controller, delivered to
    the end (no loader lost)."""

    with shortened_drill(lab, "playbooks/loader-partitioned.yaml", tmp_path, "8s", "30s", "12s") as (ev, events,
                                                                                                     spool):
        (cut,) = ev["faults_injected"]
        assert cut["host"] == "ld-b" and cut["revert_verified"] is True
        (f,) = ev["results"]["faults"]
        assert f["outcome"] == "no_reaction", f.get("outcome_text")
        zone_b = ev["results"]["groups"]["zone-b"]
        assert zone_b["rto_first_client_s"] >= cut["t_reverted"] - f["t_fault"] - cut["offset_uncertainty_s"]
        assert ev["results"]["rpo"]["lost_acknowledged"] == 0 and ev["results"]["rpo"]["phantoms"] == 0
        kinds = [e["kind"] for e in events]
        assert "loader_lost" not in kinds and "load_source_lost" not in kinds
        assert spooled(spool)[0].count("final") == 2


def test_a_loader_cut_from_the_control_node_loses_nothing_and_says_what_came_late(lab: Inventory,
                                                                                  tmp_path: Path) -> None:
    """loader-cut-from-control shortened (its groups placed by a Ray label and a custom resource of
    the live nodes): ld-b cut from the control node (and the Ray head there) for 20 s, chaoskit's
    SSH to it excepted, its clients' path to the database untouched. The cut was real (ld-b's actor
    stopped answering, so its spool was read over SSH) and healed; zone b's agent loaded and
    spooled throughout and ended with its final batch; the run holds exactly the acknowledged
    writes the agents spooled, every one of them kept; the frames applied over 1 s after they were
    spooled are said once (`delivered_late`), and the run's closing account of the sources
    (`load_sources_ended`) has the same count and worst lateness; no loader was lost."""
    from chaoskit.workload.framed import LATE_S

    with shortened_drill(lab, "playbooks/loader-cut-from-control.yaml", tmp_path, "8s", "35s", "20s") as (
            ev, events, spool):
        # placed by the live Ray nodes' label and custom resource, as the preflight found them
        groups = ev["results"]["groups"]
        assert (groups["zone-a"]["where"], groups["zone-a"]["loaders"]) == ({"labels": {"rack": "r1"}}, ["ld-a"])
        assert (groups["zone-b"]["where"], groups["zone-b"]["loaders"]) == ({"resources": {"loadgen": 2.0}}, ["ld-b"])
        (cut,) = ev["faults_injected"]
        assert cut["host"] == "ld-b" and cut["revert_verified"] is True
        kinds = [e["kind"] for e in events]
        assert "loader_lost" not in kinds and "load_source_lost" not in kinds and "load_undelivered" not in kinds
        [ended] = [e for e in events if e["kind"] == "load_sources_ended"]
        by_host = {s["where"]: s for s in ended["sources"]}
        assert set(by_host) == {"ld-a", "ld-b"} and all(s["via"] == "ray" and s["lost"] is None
                                                        for s in by_host.values())
        cut_source = by_host["ld-b"]
        assert cut_source["ssh_fallbacks"] >= 1  # its actor did not answer through the cut
        [late] = [e for e in events if e["kind"] == "delivered_late" and e["source"] == cut_source["source"]]
        assert late["frames"] == cut_source["frames_late"] >= 1
        assert late["max_late_s"] == cut_source["max_late_s"] > LATE_S
        kinds_spooled, spooled_acks = spooled(spool)
        assert kinds_spooled.count("ready") == kinds_spooled.count("final") == 2
        assert ev["load"]["totals"]["write_ok"] == spooled_acks
        assert ev["results"]["rpo"]["lost_acknowledged"] == 0 and ev["results"]["rpo"]["phantoms"] == 0
        assert not [p for p in agent_pids(spool) if pid_alive(p)]


def killed_controller(lab: Inventory, run_dir: Path, lease_s: float) -> tuple[list[tuple[int, int]], float]:
    """`loaders_controller.py` started (zone a on ld-a, zone b on ld-b, through Ray), loading, then
    SIGKILLed: its agents' (pid, start) and the instant of the kill."""
    import subprocess
    import sys

    ctl = subprocess.Popen([sys.executable, str(Path(__file__).parent / "loaders_controller.py"), lab.source,
                            run_dir.name, str(lease_s)], stdout=subprocess.PIPE, text=True)
    try:
        assert ctl.stdout is not None and ctl.stdout.readline().strip() == "started"
        time.sleep(1.0)  # loading: every agent renewed at least once
        pids = agent_pids(run_dir)
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        assert {netns_of(pid) for pid, _ in pids} == {"ld-a", "ld-b"}
    finally:
        ctl.send_signal(signal.SIGKILL)
        killed = time.time()
        ctl.wait(10)
    return pids, killed


def test_the_agents_of_a_killed_controller_stop_at_their_lease(lab: Inventory, run_dir: Path) -> None:
    """The controller SIGKILLed while its agents load on ld-a and ld-b: its Ray actors die with it,
    nobody renews the agents' 4 s lease, and each stops by itself, its final batch spooled, within
    the lease, the op deadline of 2.25 s, a second to drain and two to be reaped."""
    lease = 4.0
    pids, killed = killed_controller(lab, run_dir, lease)
    try:
        bound = lease + 2.25 + 1.0 + 2.0
        while any(pid_alive(p) for p in pids) and time.time() < killed + bound + 30:
            time.sleep(0.1)
        assert not [p for p in pids if pid_alive(p)]
        assert time.time() - killed <= bound, time.time() - killed
        kinds, _ = spooled(run_dir)
        assert kinds.count("final") == 2
        logs = " ".join(p.read_text() for p in run_dir.glob("*/agent.log"))
        assert logs.count('"lease_ended": true') == 2, logs[-2000:]
    finally:
        for p in pids:  # only ours, by their pid files
            if pid_alive(p):
                os.kill(p[0], signal.SIGKILL)


def test_recover_ends_the_agents_a_killed_controller_left(lab: Inventory, run_dir: Path) -> None:
    """The controller SIGKILLed while its agents (leased for 120 s) load; `chaoskit recover` then
    finds both on the loader hosts by their pid files, asks each to stop as its controller would
    (it spools its final batch) and says so per agent; none is left running, and their directories,
    the run's records, stay. A second recover finds nothing to end."""
    import subprocess

    pids, _ = killed_controller(lab, run_dir, 120.0)
    try:
        res = subprocess.run(["chaoskit", "recover", "-i", "inventories/lab.yaml"], capture_output=True, text=True,
                             timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        said = [line for line in res.stdout.splitlines() if f"{run_dir}/" in line]
        assert sorted(line.split()[0] for line in said) == ["ld-a:", "ld-b:"], res.stdout
        assert all(" ended (pid " in line for line in said), said
        assert not [p for p in pids if pid_alive(p)]
        kinds, _ = spooled(run_dir)
        assert kinds.count("final") == 2 and len(list(run_dir.glob("*/spool.frames"))) == 2
        again = subprocess.run(["chaoskit", "recover", "-i", "inventories/lab.yaml"], capture_output=True,
                               text=True, timeout=180)
        assert again.returncode == 0 and f"{run_dir}/" not in again.stdout, again.stdout
    finally:
        for p in pids:
            if pid_alive(p):
                os.kill(p[0], signal.SIGKILL)


def test_a_loader_host_that_cannot_run_the_agent_is_refused_before_the_drill(lab: Inventory, tmp_path: Path) -> None:
    """The lab inventory with the loaders' python set to Debian's own, which has no chaoskit: the
    drill is refused in its preflight naming the host and why, before any fault is staged or any
    agent started (no agent directory appears on a loader host)."""
    import subprocess

    inv = tmp_path / "inv.yaml"
    inv.write_text(Path("inventories/lab.yaml").read_text().replace(f"python: {lab.loaders.python}",  # type: ignore[union-attr]
                                                                    "python: /usr/bin/python3"))
    spool = Path(lab.loaders.spool)  # type: ignore[union-attr]
    before = set(spool.iterdir()) if spool.exists() else set()
    res = subprocess.run(["chaoskit", "run", "playbooks/az-failover.yaml", "-i", str(inv), "--out",
                          str(tmp_path / "runs"), "--no-pdf", "--no-plots"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0
    [run_json] = list((tmp_path / "runs").glob("*/run.json"))
    ev = json.loads(run_json.read_text())
    assert ev["refused"].startswith("loader host ld-a: /usr/bin/python3 cannot import chaoskit"), ev["refused"]
    assert not ev.get("faults_injected")
    assert (set(spool.iterdir()) if spool.exists() else set()) == before
