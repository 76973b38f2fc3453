"""Is the load generator the bottleneck on MySQL? sysbench and chaoskit's loader back to back on the
lab's MariaDB primary: same connections, the same statement (a single-row update by primary key of
chaoskit's `chaoskit_kv` table, autocommit). Prints `ratio <chaoskit/sysbench>`.

Rounds alternate (sysbench, chaoskit, sysbench, ...) so drift on the shared cores hits both
alike; the median ratio is the figure. sysbench runs a Lua script of that one statement (its
`oltp_update_non_index` updates its own table the same way).

Run as root with the lab up (`chaoskit lab up`, or `--stack mha` with `--cluster mha`):
python3 benchmarks/loader_vs_sysbench.py [--cluster mariadb] [--clients 8,64] [--seconds 10] [--rounds 3]
    [--clients-by pymysql/loop,pymysql/threads,mysqlclient/threads]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time

from chaoskit.lab.inventory_file import lab_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams

SCRIPT = """
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
end
function thread_done()
  con:disconnect()
end
function event()
  con:query(string.format("UPDATE chaoskit_kv SET value = value + 1 WHERE id = %d",
                          sysbench.rand.uniform(1, {rows})))
end
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default="mariadb")
    ap.add_argument("--clients", default="8,64", help="connection counts, comma-separated")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients-by", default="pymysql/loop,pymysql/threads,mysqlclient/threads",
                    help="chaoskit's MySQL client library/executor pairs to measure, comma-separated")
    args = ap.parse_args()
    inv = lab_inventory()
    cluster = inv.clusters[args.cluster]
    counts = [int(c) for c in args.clients.split(",")]
    pairs = [tuple(p.split("/")) for p in args.clients_by.split(",")]
    first = LoadSpec(workload="update", workers=1, params=WorkloadParams(table_rows=args.rows))
    runner = LoadRunner(cluster, inv, first, Recorder(base=time.time()))
    runner.setup()  # the chaoskit_kv table sysbench will update too
    conn = runner.driver.connect_writer()
    host, port = runner.driver._peer(conn)
    conn.close()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(SCRIPT.replace("{rows}", str(args.rows)))

    def sysbench(clients: int) -> float:
        cmd = ["sysbench", script.name, f"--mysql-host={host}", f"--mysql-port={port}",
               f"--mysql-user={cluster.user}", f"--mysql-password={runner.driver.password() or ''}",
               f"--mysql-db={cluster.database}", f"--threads={clients}", f"--time={int(args.seconds)}",
               "--rand-type=uniform", "run"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        m = re.search(r"events/s \(eps\):\s+([0-9.]+)", res.stdout) or \
            re.search(r"transactions:\s+\d+\s+\(([0-9.]+) per sec", res.stdout)
        assert m, res.stdout[-600:]
        return float(m.group(1))

    print(f"primary {host}:{port} ({args.cluster}), {args.seconds:g}s each, {args.rounds} rounds of sysbench then "
          "chaoskit per figure")
    results = []
    for clients in counts:
        for library, engine in pairs:
            spec = LoadSpec(workload="update", workers=clients, params=WorkloadParams(table_rows=args.rows),
                            processes=args.processes, engine=engine, mysql_library=library)
            ratios = []
            for i in range(args.rounds):
                base = sysbench(clients)
                runner = LoadRunner(cluster, inv, spec, Recorder(base=time.time()))
                runner.run_for(args.seconds)
                assert runner.t_start is not None
                tps = runner.recorder.window(runner.t_start, runner.t_start + args.seconds)["tps"]
                totals = runner.recorder.totals()
                ratios.append(tps / base)
                errors = totals["fail"] + totals["info"]
                print(f"  {clients} clients, {library}/{engine}, round {i + 1}: sysbench {base:8.1f}  chaoskit "
                      f"{tps:8.1f} TPS (errors {errors})", flush=True)
            results.append((clients, library, engine, statistics.median(ratios), min(ratios), max(ratios)))
    print("clients  library/executor      ratio (median; min-max)")
    for clients, library, engine, med, lo, hi in results:
        print(f"{clients:7d}  {library + '/' + engine:20s}  {med:.3f} ({lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
