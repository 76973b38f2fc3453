"""Is the load generator the bottleneck? pgbench and chaoskit's loader back to back on the lab
leader: same connections, same single-row update transaction. Prints `ratio <chaoskit/pgbench>`.

Rounds alternate (pgbench, chaoskit, pgbench, ...) so drift on the shared 2 cores (checkpoints,
autovacuum, the replicas catching up) hits both alike; the median ratio is the figure. pgbench runs
with prepared statements, as the loader does.

Run as root with the lab up:
python3 benchmarks/loader_vs_pgbench.py [--clients 8] [--seconds 10] [--rounds 3] [--engine auto|loop|threads]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

from chaoskit.lab.inventory_file import lab_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams

PG_BIN = "/usr/lib/postgresql/15/bin"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine", default="auto", choices=["auto", "loop", "threads"])
    args = ap.parse_args()
    inv = lab_inventory()
    cluster = inv.clusters["pg"]
    params = WorkloadParams(table_rows=args.rows)
    spec = LoadSpec(workload="update", workers=args.clients, params=params, processes=args.processes,
                    engine=args.engine)
    runner = LoadRunner(cluster, inv, spec, Recorder(base=time.time()))
    runner.setup()  # the same chaoskit_kv table pgbench will update
    conn = runner.driver.connect_writer()
    leader = conn.execute("SELECT host(inet_server_addr())").fetchone()[0]
    conn.close()

    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"\\set id random(1, {args.rows})\nUPDATE chaoskit_kv SET value = value + 1 WHERE id = :id;\n")
    env = {**os.environ, "PGPASSWORD": runner.driver.password() or ""}
    def pgbench(mode: str) -> float:
        cmd = [f"{PG_BIN}/pgbench", "-n", "-M", mode, "-h", leader, "-p", str(cluster.port), "-U", cluster.user,
               "-c", str(args.clients), "-j", str(min(args.clients, os.cpu_count() or 1)),
               "-T", str(int(args.seconds)), "-f", script.name, cluster.database]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        return float(re.search(r"tps = ([0-9.]+)", res.stdout).group(1))  # type: ignore[union-attr]

    print(f"leader {leader}, {args.clients} connections, {args.seconds:g}s each, "
          f"processes={spec.process_count(runner.driver.family)}, engine={args.engine}; {args.rounds} rounds of "
          "pgbench -M simple (its default), pgbench -M prepared (the protocol the loader uses), chaoskit")
    ratios: dict[str, list[float]] = {"simple": [], "prepared": []}
    for i in range(args.rounds):
        base = {mode: pgbench(mode) for mode in ratios}
        runner = LoadRunner(cluster, inv, spec, Recorder(base=time.time()))
        runner.run_for(args.seconds)
        assert runner.t_start is not None
        chaoskit_tps = runner.recorder.window(runner.t_start, runner.t_start + args.seconds)["tps"]
        totals = runner.recorder.totals()
        for mode, tps in base.items():
            ratios[mode].append(chaoskit_tps / tps)
        print(f"round {i + 1}: pgbench simple {base['simple']:7.1f}  prepared {base['prepared']:7.1f}  "
              f"chaoskit {chaoskit_tps:7.1f} TPS (errors {totals['fail'] + totals['info']})")
    for mode, values in ratios.items():
        print(f"ratio vs pgbench -M {mode:8s} {statistics.median(values):.3f} (median of {len(values)}; "
              f"min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
