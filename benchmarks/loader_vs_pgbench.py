"""Is the load generator the bottleneck? pgbench and chaoskit's loader back to back on the lab
leader: same connections, same single-row update transaction. Prints `ratio <chaoskit/pgbench>`.

Run as root with the lab up: python3 benchmarks/loader_vs_pgbench.py [--clients 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import re
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
    args = ap.parse_args()
    inv = lab_inventory()
    cluster = inv.clusters["pg"]
    params = WorkloadParams(table_rows=args.rows)
    spec = LoadSpec(workload="update", workers=args.clients, params=params, processes=args.processes)
    runner = LoadRunner(cluster, inv, spec, Recorder(base=time.time()))
    runner.setup()  # the same chaoskit_kv table pgbench will update
    conn = runner.driver.connect_writer()
    leader = conn.execute("SELECT host(inet_server_addr())").fetchone()[0]
    conn.close()

    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(f"\\set id random(1, {args.rows})\nUPDATE chaoskit_kv SET value = value + 1 WHERE id = :id;\n")
    env = {**os.environ, "PGPASSWORD": runner.driver.password() or ""}
    cmd = [f"{PG_BIN}/pgbench", "-n", "-h", leader, "-p", str(cluster.port), "-U", cluster.user,
           "-c", str(args.clients), "-j", str(min(args.clients, os.cpu_count() or 1)), "-T", str(int(args.seconds)),
           "-f", script.name, cluster.database]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    pgbench_tps = float(re.search(r"tps = ([0-9.]+)", res.stdout).group(1))  # type: ignore[union-attr]

    runner.run_for(args.seconds)
    assert runner.t_start is not None
    chaoskit_tps = runner.recorder.window(runner.t_start, runner.t_start + args.seconds)["tps"]
    errors = runner.recorder.totals()["fail"] + runner.recorder.totals()["info"]
    print(f"leader {leader}, {args.clients} connections, {args.seconds:g}s each, processes={spec.process_count()}")
    print(f"pgbench  TPS {pgbench_tps:10.1f}")
    print(f"chaoskit TPS {chaoskit_tps:10.1f}  (errors {errors})")
    print(f"ratio {chaoskit_tps / pgbench_tps:.3f}")


if __name__ == "__main__":
    main()
