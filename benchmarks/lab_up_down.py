"""Lab bring-up and teardown times (targets: up <= 15 s, down <= 10 s, packages installed).

python3 benchmarks/lab_up_down.py [--rounds 3]   (root; leaves the lab down)
"""

from __future__ import annotations

import argparse
import statistics

from chaoskit.lab import manager


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    manager.down()
    ups, downs = [], []
    for _ in range(args.rounds):
        res = manager.up()
        ups.append(res.seconds)
        downs.append(manager.down())
    print(f"lab up   {', '.join(f'{s:.1f}' for s in ups)} s  (median {statistics.median(ups):.1f} s, target 15)")
    print(f"lab down {', '.join(f'{s:.1f}' for s in downs)} s  (median {statistics.median(downs):.1f} s, target 10)")


if __name__ == "__main__":
    main()
