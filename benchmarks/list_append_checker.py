"""How long the list-append checker takes per 10,000 transactions, and its peak memory.

The history is what a healthy run gives: `--clients` clients, each transaction 1-4 micro-operations
on `--keys` keys, executed by a simulated database that applies each transaction at one instant
inside its client's window (so reads are consistent and windows overlap as they do under load),
checked with both client and real-time order. `--skew` makes that many transactions read a stale
state (each gives a cycle, so the cycle search is timed too).

python3 benchmarks/list_append_checker.py [--txns 10000] [--clients 16] [--keys 32] [--skew 0]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from chaoskit.elle.list_append import Append, Read, Txn, check, forbidden_at


def history(n: int, clients: int, keys: int, skew: int, seed: int = 1) -> list[Txn]:
    rng = random.Random(seed)
    state: dict[int, list[int]] = {}
    snapshots: list[dict[int, tuple[int, ...]]] = []
    out: list[Txn] = []
    value, now = 0, 0.0
    stale = set(rng.sample(range(100, n), skew)) if skew else set()
    for tid in range(1, n + 1):
        now += 0.0005
        ops: list[Append | Read] = []
        old = snapshots[-50] if tid in stale and len(snapshots) > 50 else None
        for _ in range(rng.randint(1, 4)):
            key = rng.randrange(keys)
            if rng.random() < 0.5:
                value += 1
                state.setdefault(key, []).append(value)
                ops.append(Append(key, value))
            else:
                seen = old.get(key, ()) if old is not None else tuple(state.get(key, []))
                ops.append(Read(key, tuple(seen)))
        if tid % 10 == 0:
            snapshots.append({k: tuple(v) for k, v in state.items()})
        # applied at `now`, inside a window that began up to 5 ms before and ends up to 5 ms after
        out.append(Txn(tid, tid % clients, now - rng.uniform(0, 0.005), now + rng.uniform(0, 0.005), "ok",
                       tuple(ops)))
    # a final read of every key, after everything
    out.append(Txn(n + 1, clients, now + 1, now + 1.01, "ok",
                   tuple(Read(k, tuple(state.get(k, []))) for k in range(keys))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--keys", type=int, default=32)
    ap.add_argument("--skew", type=int, default=0)
    args = ap.parse_args()
    h = history(args.txns, args.clients, args.keys, args.skew)
    orders = ("process", "realtime")
    began = time.perf_counter()
    got = check(h, forbidden_at("serializable", orders), orders)
    took = time.perf_counter() - began
    tracemalloc.start()  # a second pass for the memory (tracing slows it several times over)
    check(h, forbidden_at("serializable", orders), orders)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{len(h)} transactions, {args.clients} clients, {args.keys} keys, {args.skew} stale: "
          f"{took:.2f} s ({took / len(h) * 10_000:.2f} s per 10,000), peak {peak / 2**20:.0f} MiB traced; "
          f"anomalies {got.counts or 'none'}")


if __name__ == "__main__":
    main()
