"""Recorder memory over a long run: the controller's recorder fed what a drill's worker processes
ship it (a batch every 200 ms: closed intervals with their histograms, each worker's ledger
entries, errors and outage gaps, and the op history around each fault) at 5,000 ledger writes/s from
8 workers, with a 2 s outage every 5 minutes, merged and closed exactly as the load runner does.
The figure is the controller's resident memory: its growth and its peak, with the recorder
spilling to a run directory (the drill's default) or, with --no-spill, all in memory (before
issue 45).

The batches are built directly (numpy, a histogram encoded once) instead of by recording each op
in a worker process, so a simulated day takes minutes instead of hours. Ops (for the history
around each fault) are shipped from 40 s before each fault to 40 s after it: the history keeps the
ops within 30 s of a fault and holds the last 35 s of ops meanwhile, so its peak is reached there;
elsewhere they would only pass through.

python3 benchmarks/recorder_memory.py [--hours 24] [--seconds N] [--rate 5000] [--workers 8] [--no-spill]
Goal: at most 200 MB resident at 24 h, 5,000 ops/s.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from chaoskit.recorder import COLUMNS, HIST_MAX_US, LEDGER_FAIL, LEDGER_INFO, OK, Batch, Gap, Recorder

FAULT_EVERY_S = 300
OUTAGE_S = 2.0
OPS_AROUND_S = 40.0


def status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def produce(seconds: int, rate: int, workers: int, base: float, out: Any) -> None:
    """Batches as a worker process ships them, every 200 ms of simulated time."""
    rng = random.Random(1)
    hist = HdrHistogram(1, HIST_MAX_US, 2)
    for _ in range(rate // 10):
        hist.record_value(1500 + rng.randrange(1000))
    encoded = hist.encode()
    per_interval = rate // 10
    per_worker = rate // 5 // workers  # ledger entries per worker per batch
    col = {name: i for i, name in enumerate(COLUMNS)}
    seqs = dict.fromkeys(range(1, workers + 1), 0)
    for tick in range(seconds * 5):
        t0 = base + tick * 0.2
        in_cycle = tick % (FAULT_EVERY_S * 5)  # 200 ms ticks since the last fault
        t_fault = t0 - in_cycle * 0.2
        outage = tick >= FAULT_EVERY_S * 5 and in_cycle < OUTAGE_S * 5
        if outage and in_cycle == 0:
            out.put(("fault", t_fault))
        first = round(base / 0.1) + 2 * tick  # this batch's two 100 ms intervals
        batch = Batch(watermark=first + 1)
        for k in range(2):
            counts = [0] * len(COLUMNS)
            if outage:
                counts[col["fail"]] = per_interval * 6 // 7
                counts[col["info"]] = per_interval - counts[col["fail"]]
                counts[col["err_connection_lost"]] = per_interval
                batch.intervals.append((first + k, counts, HdrHistogram(1, HIST_MAX_US, 2).encode()))
            else:
                counts[col["ok"]] = counts[col["write_ok"]] = per_interval
                batch.intervals.append((first + k, counts, encoded))
        ops_here = tick >= FAULT_EVERY_S * 5 - OPS_AROUND_S * 5 and (
            in_cycle < OPS_AROUND_S * 5 or in_cycle >= (FAULT_EVERY_S - OPS_AROUND_S) * 5)
        for w in range(1, workers + 1):
            seq0 = seqs[w] + 1
            seqs[w] += per_worker
            times = t0 + np.arange(per_worker) * (0.2 / per_worker)
            if outage:
                values = np.where(np.arange(per_worker) % 7 == 0, LEDGER_INFO, LEDGER_FAIL).astype(np.uint32)
                batch.errors += [(float(t), w, "write", "fail", "connection_lost", "lost") for t in times]
            else:
                values = ((times - base) * 1000).astype(np.uint32)
            batch.ledger.append((w, seq0, values.tobytes()))
            if ops_here:
                outcome = "fail" if outage else OK
                batch.ops += [(float(t) - 0.002, float(t), w, "write", outcome, seq0 + i, "pg1",
                               "connection_lost" if outage else None, None) for i, t in enumerate(times)]
            if outage and in_cycle == OUTAGE_S * 5 - 1:
                batch.gaps.append(Gap(w, t_fault - 0.01, t_fault, "connection_lost", t0 + 0.2, per_worker * 10))
        out.put(("batch", batch))
    out.put(("end", None))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--no-spill", action="store_true")
    args = ap.parse_args()
    seconds = int(args.hours * 3600) if args.hours is not None else args.seconds
    base = 1_800_000_000.0
    spill = None if args.no_spill else Path(tempfile.mkdtemp(prefix="chaoskit-spill-"))
    parent = Recorder(base, spill_dir=spill)
    queue: Any = mp.get_context("fork").Queue(maxsize=50)
    proc = mp.get_context("fork").Process(target=produce, args=(seconds, args.rate, args.workers, base, queue))
    gc.collect()
    before = status_mb("VmRSS")
    t_wall = time.time()
    proc.start()
    peak = before
    n = 0
    while True:
        kind, item = queue.get()
        if kind == "end":
            break
        if kind == "fault":
            parent.keep_around(item)
            continue
        parent.merge(item)
        parent.close_before(item.watermark)
        n += 1
        if n % 3000 == 0:  # every 10 simulated minutes
            gc.collect()
            peak = max(peak, status_mb("VmRSS"))
            print(f"  {n / 5 / 3600:5.2f} h simulated: resident {status_mb('VmRSS'):.0f} MB", flush=True)
    proc.join()
    parent.finish()
    gc.collect()
    after = status_mb("VmRSS")
    peak = max(peak, after)
    ops = seconds * args.rate
    t_read = time.time()
    acked = sum(hi - lo + 1 for ranges in parent.ledger_acknowledged().values() for lo, hi in ranges)
    totals = parent.totals()
    read_s = time.time() - t_read
    on_disk = sum(p.stat().st_size for p in spill.rglob("*") if p.is_file()) / 2**20 if spill else 0.0
    print(f"{ops:,} ops ({seconds / 3600:g} h at {args.rate}/s, {args.workers} workers) merged in "
          f"{time.time() - t_wall:.0f} s wall; {'spilling to ' + str(spill) if spill else 'no spill'}")
    print(f"intervals {totals['ok'] + totals['fail'] + totals['info']:,} ops in {len(parent.rows):,} intervals, "
          f"errors kept {len(parent.errors):,}, gaps {len(parent.gaps):,}, history ops kept "
          f"{parent.history.count():,}, acknowledged ledger writes {acked:,} (read back in {read_s:.0f} s)")
    print(f"resident memory: {after:.0f} MB at the end, {peak:.0f} MB at the highest sample, "
          f"growth {after - before:.0f} MB; spilled {on_disk:.0f} MB; goal <= 200 MB at 24 h")
    if spill:
        shutil.rmtree(spill, ignore_errors=True)


if __name__ == "__main__":
    main()
