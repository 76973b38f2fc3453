"""What running the load through load agents costs: the same ledger load on the lab's PostgreSQL
cluster from the control node's worker processes and from load agents (a detached process per
share, spooling every delivery, read back through FramedSource), rounds alternating so drift on
the shared cores hits both alike. `--agents here` runs the agents on the control node (read from
the spool file), `--agents loaders` on the lab's loader hosts ld-a and ld-b, half the clients
each, started and read over SSH. Prints the acknowledged writes per second of each and
`ratio <agents/local>` (the median over the rounds; the goal for loaders: >= 0.9).

Run as root with the lab up:
python3 benchmarks/loaders.py [--clients 8] [--seconds 10] [--rounds 3] [--agents here|loaders]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from chaoskit.inventory.fanout import RemotePool
from chaoskit.lab.inventory_file import lab_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.agent import agent_sources
from chaoskit.workload.placement import loader_agent_sources
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.spec import ClientGroup
from chaoskit.workload.workloads import WorkloadParams


def one(clients: int, seconds: float, agents: Path | None, where: str = "here") -> float:
    half = clients // 2
    groups = (ClientGroup("a", workers=half), ClientGroup("b", workers=clients - half, first_worker=half + 1))
    # a run id of its own
    spec = LoadSpec(workload="ledger", workers=clients, params=WorkloadParams(table_rows=2_000), groups=groups)
    inv = lab_inventory()
    rec = Recorder(base=time.time())
    with RemotePool(inv) as pool:
        make = None if agents is None else agent_sources(agents) if where == "here" else \
            loader_agent_sources(pool, {"a": ("ld-a",), "b": ("ld-b",)}, spec.run_id)
        runner = LoadRunner(inv.clusters["pg"], inv, spec, rec, make_sources=make)
        runner.setup()
        try:
            runner.run_for(seconds + 1.0)
        finally:
            if agents is not None and where == "loaders" and inv.loaders is not None:
                shutil.rmtree(Path(inv.loaders.spool) / spec.run_id, ignore_errors=True)
    # the acknowledged writes of the window [start + 1 s, start + 1 s + seconds]: neither the
    # start nor the stop (an agent's is a file it polls) counts
    df = rec.to_frame()
    t0 = (runner.t_start or 0.0) + 1.0
    window = df[(df["t"] >= t0) & (df["t"] < t0 + seconds)]
    totals = rec.totals()
    if totals["fail"] or totals["info"]:
        print(f"  ({'agents' if agents else 'local'}: {totals['fail']} failed, {totals['info']} indeterminate; "
              f"first: {rec.errors[:1]})", flush=True)
    return float(window["write_ok"].sum()) / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--agents", choices=("here", "loaders"), default="here")
    args = ap.parse_args()
    local, agents = [], []
    with tempfile.TemporaryDirectory(prefix="chaoskit-agents-") as tmp:
        for r in range(args.rounds):
            local.append(one(args.clients, args.seconds, None))
            agents.append(one(args.clients, args.seconds, Path(tmp) / f"round{r}", args.agents))
            print(f"round {r + 1}: local {local[-1]:.0f} ops/s, agents {agents[-1]:.0f} ops/s", flush=True)
    ratio = statistics.median(a / b for a, b in zip(agents, local, strict=True))
    print(f"{args.clients} connections, {args.seconds:g} s each: local {statistics.median(local):.0f} ops/s, "
          f"agents ({args.agents}) {statistics.median(agents):.0f} ops/s")
    print(f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
