"""How long the stale-reads judgement takes per 100,000 reads, and its peak memory.

The history is what a replica route gives under load: `--writers` clients set their registers one
write after another (each acknowledged 1 ms after it began), `--readers` clients read every
register from a replica that applies each write `--lag` seconds after it was acknowledged, one
read every 0.2 ms per reader, the readers' route moving once to a replica twice as far behind (so
monotonic-read and read-your-writes violations are judged too). Read from a spilled transaction
log, as a drill's check reads it.

python3 benchmarks/stale_reads_checker.py [--reads 100000] [--writers 3] [--readers 3] [--lag 0.005]
"""

from __future__ import annotations

import argparse
import bisect
import tempfile
import time
import tracemalloc
from pathlib import Path

from chaoskit.txnlog import TxnLog
from chaoskit.workload.kinds.stale_reads import judge_reads


def history(log: TxnLog, reads: int, writers: int, readers: int, lag: float) -> None:
    per_reader = reads // readers
    span = per_reader * 0.0002
    writes_each = int(span / 0.001)
    acked: dict[int, list[tuple[float, int]]] = {}
    batch = []
    for w in range(1, writers + 1):
        acked[w] = [(k * 0.001 + 0.001, 1_000 + k) for k in range(writes_each)]
        batch.extend((w, t - 0.001, t, "ok", (("set", w, v),)) for t, v in acked[w])
    log.add(batch)
    done = {w: [t for t, _ in xs] for w, xs in acked.items()}
    for r in range(writers + 1, writers + readers + 1):
        batch = []
        for i in range(per_reader):
            t = i * 0.0002
            behind = lag if i < per_reader // 2 else 2 * lag  # the route moves to a replica further behind
            seen = []
            for w in range(1, writers + 1):
                n = bisect.bisect_right(done[w], t - behind)
                if n:
                    seen.append(("get", w, acked[w][n - 1][1]))
            batch.append((r, t, t + 0.0001, "ok", tuple(seen)))
        log.add(batch)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=100_000)
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--readers", type=int, default=3)
    ap.add_argument("--lag", type=float, default=0.005)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = TxnLog(Path(tmp))
        history(log, args.reads, args.writers, args.readers, args.lag)
        t_fault = args.reads * 0.0002 / args.readers / 2
        t0 = time.perf_counter()
        got = judge_reads(log, t_fault, None)
        took = time.perf_counter() - t0
        tracemalloc.start()  # a second pass for the memory: tracing slows Python down several times
        judge_reads(log, t_fault, None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        log.close()
    print(f"{got['reads']:,} reads, {got['stale_reads']:,} stale, {got['monotonic_read_violations']:,} went back, "
          f"{got['read_your_writes_violations']:,} missed own write")
    print(f"judged in {took:.2f} s: {took / got['reads'] * 100_000:.2f} s per 100,000 reads; "
          f"peak memory {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
