"""How soon after its scheduled instant is a fault in effect on the host? (target: p99 <= 50 ms)

For each round a fault is scheduled 300 ms ahead, sent at that instant over the persistent SSH
shell, and its effect timestamped on the host (offset-corrected onto the control clock); then
reverted. Kinds: pause (process) on a directly reached host and on a host behind the jump
host, partition (iptables) on a direct host. Run as root with the lab up.

python3 benchmarks/fault_timing.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from chaoskit.faults.manager import FaultManager
from chaoskit.faults.models import FaultSpec
from chaoskit.lab.inventory_file import lab_inventory


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    inv = lab_inventory()
    cases = {
        "pause my2 (via jump host)": FaultSpec(kind="pause", target="my2", cluster="mariadb",
                                               processes=("mariadb",), ttl=30),
        "pause pg3 postgres": FaultSpec(kind="pause", target="pg3", cluster="pg", processes=("postgres",), ttl=30),
        "partition pg3 from pg2": FaultSpec(kind="partition", target="pg3", peers=("pg2",), ttl=30),
    }
    with FaultManager(inv) as fm:
        for name, spec in cases.items():
            fm.inject(spec)  # warm: connection, shell, offset, capabilities
            fm.revert_all()
            lags, uncert = [], []
            for _ in range(args.rounds):
                t_sched = time.time() + 0.3
                time.sleep(max(0.0, t_sched - time.time()))
                (fault,) = fm.inject(spec, t_scheduled=t_sched)
                lags.append((fault.t_effect - t_sched) * 1000)
                uncert.append(fault.offset_uncertainty_s * 1000)
                fm.revert(fault)
                time.sleep(0.1)
            print(f"{name:28s} effect after schedule: p50 {statistics.median(lags):6.1f} ms  "
                  f"p99 {pct(lags, 99):6.1f} ms  max {max(lags):6.1f} ms  (clock ±{statistics.median(uncert):.1f} ms)")


if __name__ == "__main__":
    main()
