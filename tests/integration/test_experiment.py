"""Experiments on the lab: the latency proxy on the replica -> primary link, a small sweep, a ramp
that finds a knee, and single node vs replicated with its spread."""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from drillrun import LEAN

from chaoskit.inventory.models import Inventory

# run on a lab no other session drills at the same time (`.ci/run`, tests/integration/lanes.py):
ALONE = "its ladders and sweeps measure throughput and latency"

INV = "inventories/lab.yaml"


def experiment(text: str, tmp_path: Path) -> dict:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    res = subprocess.run(["chaoskit", "experiment", "run", str(path), "-i", INV, "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "stdout.txt").write_text(res.stdout)
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    for name in ("run.json", "results.csv", "report.html"):
        assert (run_dir / name).stat().st_size > 0
    assert list((run_dir / "plots").glob("*.png"))
    return json.loads((run_dir / "run.json").read_text())


def result_stdout(tmp_path: Path) -> str:
    """What `experiment` printed, kept by experiment()."""
    return (tmp_path / "stdout.txt").read_text()


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
    from chaoskit.analysis.knee import find_knee

    knee, cells = result["knee"], result["cells"]
    assert [c["workers"] for c in cells] == [1, 4, 16, 64, 160]
    assert all(c["client_cpu_cores"] > 0 for c in cells)  # chaoskit's own loop processes
    assert all(c["error_rate"] == 0 for c in cells)
    # where the knee lies depends on this machine's load at the time (a sample): what holds in every
    # run is that it is the knee of the cells measured (the rule itself is pinned on worked curves in
    # tests/unit/test_knee.py), over the cells where the client was not the limit, and that the peak
    # is the measured maximum
    judged = [c for c in cells if not c["client_saturated"]]
    assert {k: v for k, v in knee.items() if k != "ignored_client_saturated"} == find_knee(judged)
    assert [i["workers"] for i in knee.get("ignored_client_saturated", [])] == [
        c["workers"] for c in cells if c["client_saturated"]]
    if judged:
        assert knee["peak"]["tps"] == max(c["tps"] for c in judged)
    if knee["recommended_workers"] is None:
        assert knee["shape"].startswith(("monotone", "empty")), knee
        assert "recommended workers: none" in result_stdout(tmp_path)
    else:
        assert knee["recommended_workers"] in [c["workers"] for c in judged]


def test_compare_single_vs_replicated_reports_difference_with_spread(lab: Inventory, tmp_path: Path) -> None:
    result = experiment(Path("playbooks/compare-single-vs-replicated.yaml").read_text()
                        .replace("measure: 5s", "measure: 3s").replace("warmup: 2s", "warmup: 1s"), tmp_path)
    cmp = result["comparison"]["pg_vs_pg-single"]
    assert cmp["repeats"] == 3
    assert cmp["min"] <= cmp["relative_tps_change_median"] <= cmp["max"]
    assert cmp["relative_tps_change_median"] != 0
    targets = {c["target"] for c in result["cells"]}
    assert targets == {"pg", "pg-single"}
    # every target's hosts (and the control node) read through the experiment: each cell has each
    # host's CPU busy % over its 3 s window (the seconds that ended inside it: at least two)
    hosts = {"dcs1", "pg1", "pg2", "pg3", "control"}
    assert set(result["host_metrics"]) == hosts
    for cell in result["cells"]:
        busy = {h: cell[f"cpu_busy_pct_{h}"] for h in hosts}
        assert all(v is not None and 0 <= v <= 100 for v in busy.values()), busy


@pytest.mark.parametrize("name", ["latency-sweep.yaml", "ramp.yaml", "compare-single-vs-replicated.yaml",
                                  "mysql-thread-ladder.yaml", "mariadb-sysbench-ladder.yaml",
                                  "pgbench-thread-ladder.yaml"])
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


def ladder(tmp_path: Path, require: str) -> str:
    """The shipped MySQL thread ladder, two steps of two workloads, measured briefly."""
    text = Path("playbooks/mysql-thread-ladder.yaml").read_text()
    for old, new in (("workers: [8, 16, 32, 64, 128, 256], workload: [oltp, oltp-ro, oltp-wo]",
                      "workers: [8, 32], workload: [oltp-ro, oltp-wo]"), ("warmup: 5s", "warmup: 1s"),
                     ("measure: 10s", "measure: 2s"), ("repeats: 3", "repeats: 1"),
                     ("table_rows: 100000", "table_rows: 2000"),
                     ("require: {sync_binlog: 1, innodb_flush_log_at_trx_commit: 1}", require)):
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_mysql_thread_ladder_knee_per_workload_with_durability_recorded(lab: Inventory, tmp_path: Path) -> None:
    result = experiment(ladder(tmp_path, "require: {sync_binlog: 1, innodb_flush_log_at_trx_commit: 1}"), tmp_path)
    assert set(result["knees"]) == {"oltp-ro", "oltp-wo"} and result["knee"] == result["knees"]["oltp-ro"]
    cells = {(c["workload"], c["workers"]) for c in result["cells"]}
    assert cells == {("oltp-ro", 8), ("oltp-ro", 32), ("oltp-wo", 8), ("oltp-wo", 32)}
    assert all(c["tps"] > 0 and c["p99_ms"] and c["p999_ms"] >= c["p99_ms"] and c["error_rate"] == 0
               for c in result["cells"])
    assert result["required"]["found"] == {"mariadb": {"sync_binlog": 1, "innodb_flush_log_at_trx_commit": 1}}
    server = result["settings"]["mariadb"]["server"]
    assert server["rpl_semi_sync_master_enabled"] == 0 and server["rpl_semi_sync_source_enabled"] is None
    assert {h.split(":")[0] for h in result["headlines"]} == {"oltp-ro", "oltp-wo"}  # each workload its own


def test_mysql_thread_ladder_refuses_other_durability_naming_the_setting(lab: Inventory, tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(ladder(tmp_path, "require: {sync_binlog: 1, innodb_flush_log_at_trx_commit: 2}"))
    res = subprocess.run(["chaoskit", "experiment", "run", str(path), "-i", INV, "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "requires innodb_flush_log_at_trx_commit = 2; on mariadb it is 1: refused" in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()


def test_sysbench_ladder_counts_what_sysbench_reported_and_keeps_its_output(lab: Inventory, tmp_path: Path) -> None:
    """mariadb-sysbench-ladder shortened to two steps of one test: each cell's TPS is recounted here
    from the report lines sysbench wrote (tools/cell-NNN/sysbench/reports.tsv, each stamped when it
    was read) that fall in the cell's measured window; no op latency is made up (p99 null), the
    tool's own per-second p99 is reported under its own name, and the tables are made once."""
    import re

    text = Path("playbooks/mariadb-sysbench-ladder.yaml").read_text()
    for old, new in (("workers: [8, 16, 32, 64, 128, 256], workload: [oltp_read_write, oltp_read_only, "
                      "oltp_write_only]", "workers: [4, 16], workload: [oltp_read_only]"),
                     ("warmup: 10s", "warmup: 2s"), ("measure: 30s", "measure: 4s"), ("repeats: 3", "repeats: 1"),
                     ("table_size: 100000", "table_size: 2000")):
        assert old in text, old
        text = text.replace(old, new)
    result = experiment(text, tmp_path)
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    assert [c["workers"] for c in result["cells"]] == [4, 16]
    tps = re.compile(r"tps: ([\d.]+) .*lat \(ms,99%\): ([\d.]+)")
    for i, (row, cell) in enumerate(zip(result["rows"], result["cells"], strict=True)):
        raw = run_dir / "tools" / f"cell-{i:03d}" / "sysbench"
        assert (raw / "prepare.out").exists() is (i == 0)  # the tables are made once per test
        reads = [(float(t), *map(float, tps.search(line).groups()))
                 for t, _, line in (r.split("\t", 2) for r in (raw / "reports.tsv").read_text().splitlines())]
        assert cell["p99_ms"] is None and cell["error_rate"] == 0
        # recounted from sysbench's own lines: the transactions of the reports read in the measured
        # window's 100 ms intervals (each report counts one second), over the window's length
        lo, hi = (math.floor(t / 0.1) for t in row["window"])
        done = sum(round(rate) for t, rate, _ in reads if lo <= math.floor(t / 0.1) < hi)
        assert row["tps"] == pytest.approx(done / ((hi - lo) * 0.1), abs=0.051), (row, reads)
        lats = sorted(lat for t, rate, lat in reads if row["window"][0] <= t <= row["window"][1] and rate > 0)
        assert row["tool_p99_ms_worst_second"] == lats[-1]
        assert row["tool_p99_ms_median_of_seconds"] == pytest.approx(statistics.median(lats))
    assert result["knee"]["peak"] is not None
    # the generator's own CPU is measured in every cell (sysbench and its driver process)
    assert all(0 < c["client_cpu_cores"] <= os.cpu_count() and isinstance(c["client_saturated"], bool)
               for c in result["cells"])


def test_pgbench_ladder_counts_every_transaction_pgbench_logged(lab: Inventory, tmp_path: Path) -> None:
    """pgbench-thread-ladder shortened to 2 and 16 clients of tpcb-like and select-only (select-only at
    16 runs ~50k transactions a second here: a reader that fell behind once left such cells at 0
    TPS): each cell's TPS is recounted here from
    the per-transaction logs pgbench wrote (tools/cell-NNN/pgbench/client-<worker>.<pid>: each
    line's end instant), those that ended in the measured window's 100 ms intervals; its p50 and p99
    come from the same transactions' latencies (pgbench gives each one's); pgbench's tables are
    made once for the ladder."""
    text = Path("playbooks/pgbench-thread-ladder.yaml").read_text()
    for old, new in (("workers: [4, 8, 16, 32, 64], workload: [tpcb-like, select-only]",
                      "workers: [2, 16], workload: [tpcb-like, select-only]"), ("warmup: 10s", "warmup: 2s"),
                     ("measure: 30s", "measure: 4s"), ("repeats: 3", "repeats: 1"), ("scale: 10", "scale: 1")):
        assert old in text, old
        text = text.replace(old, new)
    result = experiment(text, tmp_path)
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    assert [(c["workload"], c["workers"]) for c in result["cells"]] == [
        ("tpcb-like", 2), ("tpcb-like", 16), ("select-only", 2), ("select-only", 16)]
    for i, (row, cell) in enumerate(zip(result["rows"], result["cells"], strict=True)):
        raw = run_dir / "tools" / f"cell-{i:03d}" / "pgbench"
        assert (raw / "init.out").exists() is (i == 0)  # pgbench -i once for the ladder
        ends = [(int(f[4]) + int(f[5]) / 1e6, int(f[2])) for p in raw.glob("client-*.[0-9]*")
                for f in (line.split() for line in p.read_text().splitlines()) if len(f) >= 6 and f[2].isdigit()]
        lo, hi = (math.floor(t / 0.1) for t in row["window"])
        done = [lat for t, lat in ends if lo <= math.floor(t / 0.1) < hi]
        assert row["tps"] == pytest.approx(len(done) / ((hi - lo) * 0.1), abs=0.051), row
        assert cell["error_rate"] == 0 and cell["p99_ms"] is not None
        lats = sorted(done)
        assert lats[0] / 1000 <= cell["p50_ms"] <= cell["p99_ms"] <= lats[-1] / 1000 * 1.01
        assert 0 < cell["client_cpu_cores"] <= os.cpu_count()
    assert result["knee"]["peak"] is not None


def test_jmeter_ladder_runs_each_cells_threads_and_every_sample_is_a_row(lab: Inventory, tmp_path: Path) -> None:
    """jmeter-thread-ladder shortened to two steps of the plan (4 and 12 threads; the plan's own
    default is 8): JMeter's own count of its active threads, stamped on every sample of a cell's
    JTL, peaks at the cell's workers (chaoskit.threads reached the plan); each cell's TPS is
    recounted from its JTL (successful samples ended in the measured window's 100 ms intervals); the rows
    the plan inserted, recounted in the database, are at least the samples JMeter marked
    successful and at most those plus the failed ones and one in flight per thread when JMeter
    was stopped."""
    from chaoskit.db.registry import driver_for

    def rows() -> int:
        driver = driver_for(lab.clusters["pg"], lab)
        conn = driver.connect_writer()
        try:
            # (the driver's fast path returns text: a boolean would come back as 't' or 'f', both true)
            made = int(driver.query(conn, "SELECT count(*) FROM pg_class WHERE relname = 'chaoskit_jmeter'")[0][0])
            return int(driver.query(conn, "SELECT count(*) FROM chaoskit_jmeter")[0][0]) if made else 0
        finally:
            driver.close_quietly(conn)

    text = Path("playbooks/jmeter-thread-ladder.yaml").read_text()
    for old, new in (("workers: [8, 16, 32, 64], workload: [jmeter, ledger]", "workers: [4, 12], workload: [jmeter]"),
                     ("measure: 15s", "measure: 3s"), ("repeats: 2", "repeats: 1"),
                     ("jmeter/", f"{Path('playbooks/jmeter').resolve()}/")):
        assert old in text, old
        text = text.replace(old, new)
    before = rows()
    result = experiment(text, tmp_path)
    added = rows() - before
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    ok = failed = threads = 0
    for i, (row, cell) in enumerate(zip(result["rows"], result["cells"], strict=True)):
        with (run_dir / "tools" / f"cell-{i:03d}" / "jmeter" / "results.jtl").open() as f:
            samples = list(csv.DictReader(f))
        assert max(int(s["allThreads"]) for s in samples) == cell["workers"] == [4, 12][i], cell
        ends = [(int(s["timeStamp"]) + int(s["elapsed"])) / 1000 for s in samples]
        lo, hi = (math.floor(t / 0.1) for t in row["window"])
        done = [t for t, s in zip(ends, samples, strict=True)
                if s["success"] == "true" and lo <= math.floor(t / 0.1) < hi]
        assert row["tps"] == pytest.approx(len(done) / ((hi - lo) * 0.1), abs=0.051), row
        ok += sum(s["success"] == "true" for s in samples)
        failed += sum(s["success"] != "true" for s in samples)
        threads += cell["workers"]
    assert ok <= added <= ok + failed + threads, (ok, failed, added)


def test_routes_compared_under_the_same_added_delay(lab: Inventory, tmp_path: Path) -> None:
    """The shipped route comparison, shortened: PostgreSQL direct and through PgBouncer at 0 and 5 ms
    added on each route's client link, routes alternating. Bounds from the configuration: at 5 ms
    each way a statement's round trip takes at least 10 ms, so 8 workers make at most 800 ops/s on
    either route, and the relays measured at least ~5 ms added; at 0 ms no relay is in the way.
    PgBouncer's own log counts the route: every PgBouncer cell's 8 workers logged in through it."""
    import yaml

    data = yaml.safe_load(Path("playbooks/route-compare-latency.yaml").read_text())
    data.update({"grid": {"delay_ms": [0, 5], "workers": [8], "workload": ["update"]}, "repeats": 2,
                 "warmup": "1s", "measure": "2s"})
    log = Path("/var/lib/chaoskit-lab/hosts/dcs1/pgbouncer/pgbouncer.log")
    logins_before = log.read_text().count("login attempt")
    result = experiment(yaml.safe_dump(data), tmp_path)
    logins = log.read_text().count("login attempt") - logins_before
    routed = [r for r in result["rows"] if r["target"] == "pg-single-pgbouncer"]
    assert len(routed) == 4 and logins >= 8 * len(routed), logins
    cells = {(c["target"], c["delay_ms"]): c for c in result["cells"]}
    assert set(cells) == {(t, d) for t in ("pg-single", "pg-single-pgbouncer") for d in (0.0, 5.0)}
    for target in ("pg-single", "pg-single-pgbouncer"):
        near, far = cells[(target, 0.0)], cells[(target, 5.0)]
        assert near["proxy_added_p50_ms"] is None and near["error_rate"] == 0 and far["error_rate"] == 0
        assert far["tps"] <= 8 / 0.010 and far["proxy_added_p50_ms"] >= 4.5, far
    by_delay = result["comparison_by_delay"]
    assert set(by_delay) == {"0", "5"} and "comparison" not in result
    for cmp in by_delay.values():
        v = cmp["pg-single-pgbouncer_vs_pg-single"]
        assert v["repeats"] == 2 and v["min"] <= v["relative_tps_change_median"] <= v["max"]
    (line,) = result["headlines"]
    assert line.startswith("pg-single-pgbouncer against pg-single: TPS ") and "with no added delay, " in line
    assert " at +5 ms" in line and line.endswith("(median of 2 repeats at each delay)")


def without_ssh(tmp_path: Path) -> Path:
    """The lab inventory with an SSH key that does not exist: a run that needed any host fails."""
    import yaml

    inv = yaml.safe_load(Path(INV).read_text())
    inv["defaults"]["key_file"] = str(tmp_path / "no-such-key")
    inventory = tmp_path / "lab-no-ssh.yaml"
    inventory.write_text(yaml.safe_dump(inv, sort_keys=False))
    return inventory


def test_a_managed_database_swept_from_the_control_node_only(lab: Inventory, tmp_path: Path) -> None:
    """The shipped managed sweep, shortened, against the lab's MariaDB declared as a managed service,
    with an inventory whose SSH key does not exist: nothing may need a host. Bounds from the
    configuration: with 5 ms added each way a round trip takes at least 10 ms, so 8 of chaoskit's
    clients make at most 800 updates/s, and 8 sysbench threads at most 80 oltp_read_write
    transactions/s (each has at least its 10 point selects, one round trip each)."""
    import yaml

    inventory = without_ssh(tmp_path)
    data = yaml.safe_load(Path("playbooks/managed-mysql-latency-sweep.yaml").read_text())
    data.update({"grid": {"delay_ms": [0, 5], "workers": [8], "workload": ["oltp_read_write", "update"]},
                 "warmup": "1s", "measure": "3s"})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    res = subprocess.run(["chaoskit", "experiment", "run", str(path), "-i", str(inventory), "--out",
                          str(tmp_path / "runs")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "mariadb-managed: a managed service with no host to SSH into" in res.stderr
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    result = json.loads((run_dir / "run.json").read_text())
    assert set(result["managed"]) == {"mariadb-managed"} and set(result["host_metrics"]) == {"control"}
    cells = {(c["workload"], c["delay_ms"]): c for c in result["cells"]}
    assert set(cells) == {(w, d) for w in ("oltp_read_write", "update") for d in (0.0, 5.0)}
    for (_, delay), c in cells.items():
        assert c["error_rate"] == 0 and c["tps"] > 0, c
        if delay:
            assert c["proxy_added_p50_ms"] >= 4.5, c
    assert cells[("update", 5.0)]["tps"] <= 8 / 0.010 and cells[("oltp_read_write", 5.0)]["tps"] <= 8 / (10 * 0.010)
    # each source says what it can: op latency for chaoskit's clients, sysbench's per-second p99 for the tool
    own = cells[("update", 0.0)]
    assert own["p50_ms"] is not None and own["tool_p99_ms_median_of_seconds"] is None
    assert cells[("oltp_read_write", 0.0)]["p50_ms"] is None
    assert cells[("oltp_read_write", 0.0)]["tool_p99_ms_median_of_seconds"] is not None
    assert list((run_dir / "tools").glob("cell-*/sysbench/*"))  # what sysbench wrote, kept


def test_a_managed_database_drilled_through_its_client_link_only(lab: Inventory, tmp_path: Path) -> None:
    """The shipped managed drill, shortened (link down 3 s, then 5 ms each way for 5 s), on the lab's
    MariaDB declared as a managed service, with no SSH key: the endpoints' roles come over SQL, the
    client link's relays run here, nothing reaches a host. What holds in every run: no write is
    acknowledged while the link is down (the first comes after the relays open again); nothing
    acknowledged is lost (recounted through the endpoints); the service, untouched, keeps its
    primary; with 10 ms added to each round trip, 8 clients acknowledge at most 100 writes a second
    each (plus one each already on its way when the delay began)."""
    from drillrun import shortened

    inventory = without_ssh(tmp_path)
    path = shortened("playbooks/managed-mysql-client-link.yaml", tmp_path, ["7s", "14s"], "22s", ["3s", "5s"])
    res = subprocess.run(["chaoskit", "run", str(path), "-i", str(inventory), "--out", str(tmp_path / "runs"), *LEAN],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    (run_dir,) = sorted((tmp_path / "runs").glob("*"))
    run = json.loads((run_dir / "run.json").read_text())
    assert run["aborted"] is None and run["refused"] is None, res.stdout + res.stderr
    endpoints = {e for e in lab.clusters["mariadb-managed"].endpoints}
    before = {r["member"]: r["sql_role"] for r in run["roles_before"]}
    assert set(before) == endpoints and sorted(before.values()).count("primary") == 1
    primary = next(m for m, r in before.items() if r == "primary")
    assert run["clock_offsets"] == {} and run["logs"] == [] and set(run["host_metrics"]) == {"control"}
    assert run["preflight_warnings"][0].startswith("managed service: no host checks")
    down, slow = run["results"]["faults"]
    assert down["outage"] and down["t_first_ok"] >= down["t_reverted"], down
    assert down["rto_first_client_s"] >= down["t_reverted"] - down["t_fault"] and down["t_detect"] is None
    assert any(n.startswith("a managed service fails over by itself") for n in down["notes"])
    for fault in (down, slow):
        assert fault["primary_at_fault"] == primary and fault["outcome"] == "no_reaction", fault
    effect = slow["effect"]
    window = min(slow["t_reverted"], slow["window_end"]) - slow["t_fault"]
    assert effect["window_s"] == pytest.approx(window, abs=0.01)
    assert effect["writes_ok"] <= 8 * (window / 0.010 + 1), effect
    rpo = run["results"]["checks"]["rpo"]
    assert rpo["valid"] is True and rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0, rpo
    assert run["results"]["checks"]["split_brain"]["valid"] is True
