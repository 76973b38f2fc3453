"""Recorder memory over a long run: a synthetic 1 hour at 5,000 ops/s of ledger writes
(8 workers, 2 s outages every 5 min), generated in a worker process and merged by the parent
exactly as the load runner does; the figure is the parent's resident memory growth.
Prints the growth of the process's resident memory (target: under 100 MB).

python3 benchmarks/recorder_memory.py [--seconds 3600] [--rate 5000]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import random
import resource
import time

from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, Recorder


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def produce(seconds: int, rate: int, workers: int, base: float, out: mp.Queue) -> None:
    """A worker process: records ops and ships a batch every 200 ms, as the runner's children do."""
    child = Recorder(base)
    rng = random.Random(1)
    seqs = dict.fromkeys(range(1, workers + 1), 0)
    per_tick = rate // 10  # 100 ms ticks
    for tick in range(seconds * 10):
        t0 = base + tick / 10
        outage = tick % 3000 < 20  # a 2 s outage every 5 minutes
        for i in range(per_tick):
            w = i % workers + 1
            seqs[w] += 1
            t = t0 + i / rate
            if outage:
                outcome = INFO if i % 7 == 0 else FAIL
                child.record(w, "write", t - 0.002, t, outcome, "connection_lost", "lost", key=seqs[w], keyed=SEQUENCE)
            else:
                child.record(w, "write", t - 0.002, t + rng.random() * 0.002, OK, key=seqs[w], keyed=SEQUENCE)
        if tick % 2 == 1:
            out.put(child.drain(t0 + 0.1))
    out.put(child.drain(base + seconds + 1, final=True))
    out.put(None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    base = 1_800_000_000.0
    parent = Recorder(base)
    queue: mp.Queue = mp.Queue(maxsize=50)
    proc = mp.get_context("fork").Process(target=produce, args=(args.seconds, args.rate, args.workers, base, queue))
    gc.collect()
    before = rss_mb()
    t_wall = time.time()
    proc.start()
    while (batch := queue.get()) is not None:
        parent.merge(batch)
        if batch.watermark < (1 << 62):
            parent.close_before(batch.watermark)
    proc.join()
    parent.finish()
    gc.collect()
    after = rss_mb()
    ops = args.seconds * args.rate
    print(f"{ops:,} ops ({args.seconds}s at {args.rate}/s) recorded in {time.time() - t_wall:.0f}s wall")
    print(f"intervals {len(parent.rows):,}, errors kept {len(parent.errors):,}, gaps {len(parent.gaps):,}, "
          f"acknowledged ledger writes {sum(1 for _ in parent.ledger_keys(OK)):,}")
    print(f"memory growth {after - before:.1f} MB (target < 100 MB)")


if __name__ == "__main__":
    main()
