"""Lab bring-up and teardown times: the default stacks (targets: up <= 15 s, down <= 10 s) and
all four (Patroni, MariaDB, pg_auto_failover, repmgr; target: up <= 20 s), packages installed.

python3 benchmarks/lab_up_down.py [--rounds 3]   (root; leaves the lab down)
"""

from __future__ import annotations

import argparse
import statistics

from chaoskit.lab import manager
from chaoskit.lab.recipes import default_stacks, stack_names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    manager.down()
    for label, stacks, target in (("default", default_stacks(), 15), ("all", stack_names(), 20)):
        ups, downs = [], []
        for _ in range(args.rounds):
            ups.append(manager.up(stacks=stacks).seconds)
            downs.append(manager.down())
        print(f"lab up {label:<8} {', '.join(f'{s:.1f}' for s in ups)} s  (median {statistics.median(ups):.1f} s, "
              f"target {target}); stacks: {', '.join(stacks)}")
        print(f"lab down {label:<6} {', '.join(f'{s:.1f}' for s in downs)} s  "
              f"(median {statistics.median(downs):.1f} s, target 10)")


if __name__ == "__main__":
    main()
