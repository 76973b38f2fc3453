"""How soon after its scheduled instant is a fault in effect on the host?
(targets: p99 <= 20 ms on a direct host, <= 30 ms through the jump host)

Each round does what a drill does: the fault is staged (journaled, dead-man armed, pids checked)
1.5 s before its instant, and at the instant one trigger is sent over the open SSH shell; the
host timestamps the moment right after the fault's decisive action, corrected onto the control
clock by the measured offset. Then it is reverted. Kinds: pause (process) on a direct host and
on a host behind the jump host, partition (iptables) on a direct host. `--load N` runs the
drill's own load (ledger, N workers on cluster pg) meanwhile, as in a drill.

python3 benchmarks/fault_timing.py [--rounds 30] [--load 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import parse_fault
from chaoskit.faults.ttl import STAGE_AHEAD_S
from chaoskit.lab.inventory_file import lab_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.runner import LoadRunner
from chaoskit.workload.spec import LoadSpec


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--load", type=int, default=0, help="workers of a ledger load on cluster pg meanwhile")
    args = ap.parse_args()
    inv = lab_inventory()
    cases = {
        "pause my2 (via jump host)": parse_fault({"kind": "pause", "target": "my2", "cluster": "mariadb",
                                                  "processes": ["mariadb"], "ttl": 30}),
        "pause pg3 postgres": parse_fault({"kind": "pause", "target": "pg3", "cluster": "pg",
                                           "processes": ["postgres"], "ttl": 30}),
        "partition pg3 from pg2": parse_fault({"kind": "partition", "target": "pg3", "peers": ["pg2"], "ttl": 30}),
    }
    runner = None
    if args.load:
        runner = LoadRunner(inv.clusters["pg"], inv, LoadSpec(workload="ledger", workers=args.load),
                            Recorder(base=time.time()))
        runner.setup()
        runner.start()
    try:
        with FaultManager(inv) as fm:
            for name, spec in cases.items():
                fm.inject(spec)  # warm: connection, shell, offset, capabilities
                fm.revert_all()
                lags, uncert = [], []
                for _ in range(args.rounds):
                    t_sched = time.time() + STAGE_AHEAD_S
                    (staged,) = fm.stage(spec, t_scheduled=t_sched)
                    time.sleep(max(0.0, t_sched - time.time()))
                    fault = fm.trigger(staged)
                    lags.append((fault.t_effect - t_sched) * 1000)
                    uncert.append(fault.offset_uncertainty_s * 1000)
                    fm.revert(fault)
                clock = statistics.median(uncert)
                print(f"{name:28s} in effect after its instant: p50 {statistics.median(lags):6.1f} ms  "
                      f"p99 {pct(lags, 99):6.1f} ms  max {max(lags):6.1f} ms  (clock ±{clock:.1f} ms)"
                      + (f"  [with a {args.load}-worker load]" if args.load else ""))
    finally:
        if runner is not None:
            runner.stop()


if __name__ == "__main__":
    main()
