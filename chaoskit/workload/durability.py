"""RPO: acknowledged ledger writes missing after the run, indeterminate writes resolved, phantoms.

Compared against the rows present on the writer after recovery, keyed (run, worker, seq):
- lost_acknowledged: ok in the history, absent now; rpo_s = t_fault - ack time of the earliest
  lost write (how far back in time the loss reaches);
- indeterminate (info): found or not found, reported apart (both are legal outcomes);
- phantoms: present but never acknowledged nor indeterminate (failed or never attempted): always
  a failure;
- undelivered: present, from ops whose outcomes never reached the controller (a batch lost on its
  way, a load source that ended without its final batch: `Recorder.ledger_undelivered`). Neither
  phantoms nor lost: what those ops were told is not known, so a check that would otherwise pass
  is `unknown`, and says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chaoskit.keyranges import KeyRanges
from chaoskit.recorder import LEDGER_FAIL, LEDGER_INFO, LEDGER_UNSET, Recorder


def rpo_check(rec: Recorder, present: KeyRanges | set[tuple[int, int]], t_fault: float | None,
              max_lost: int | None, workers: set[int] | None = None,
              nodes: dict[tuple[int, int], str] | None = None) -> dict[str, Any]:
    """Of every worker's ledger, or of `workers` only (a client group's). `nodes`: the member
    that acknowledged a write, where the op history knows it. Worker by worker: one worker's
    column and the ranges the database holds for it are all that is in memory at a time."""
    held = KeyRanges.of(present)
    unheard = rec.ledger_undelivered()
    acknowledged = indeterminate = info_found = lost_n = phantom_n = phantom_failed = undelivered_n = 0
    unheard_workers = 0
    lost_sample: list[list[int]] = []
    phantom_sample: list[list[int]] = []
    first_ms: int | None = None
    last_ms: int | None = None
    by_node: dict[str, int] = {}
    for worker in sorted(set(rec.ledger_workers()) | set(held.workers()) | set(unheard.workers())):
        if workers is not None and worker not in workers:
            continue
        values = rec.ledger_column(worker)
        acked, info, failed = values < LEDGER_UNSET, values == LEDGER_INFO, values == LEDGER_FAIL
        unknown = unheard.mask(worker, len(values))
        # a worker with results missing, where it wrote ledger rows (a tool's workers write none)
        unheard_workers += bool(unheard.ranges(worker)) and (len(values) > 0 or bool(held.ranges(worker)))
        here = held.mask(worker, len(values))
        # an outcome that arrived decides, wherever it lies; only a key still unset is unknown there
        unknown &= values == LEDGER_UNSET
        undelivered_n += int((here & unknown).sum())
        acknowledged += int(acked.sum())
        indeterminate += int(info.sum())
        info_found += int((info & here).sum())
        lost = np.flatnonzero(acked & ~here)
        lost_n += len(lost)
        if len(lost):
            times = values[lost]
            lo, hi = int(times.min()), int(times.max())
            first_ms = lo if first_ms is None else min(first_ms, lo)
            last_ms = hi if last_ms is None else max(last_ms, hi)
            lost_sample += [[worker, int(i) + 1] for i in lost[:20 - len(lost_sample)]]
            for i in lost if nodes else ():
                node = nodes.get((worker, int(i) + 1)) if nodes else None
                if node is not None:
                    by_node[node] = by_node.get(node, 0) + 1
        inside = np.flatnonzero(here & ~acked & ~info & ~unknown)
        phantom_failed += int((here & failed).sum())
        beyond = held.outside(worker, len(values))
        outside = unheard.without(worker, beyond)  # past the column: unknown where never delivered
        undelivered_n += sum(hi - lo + 1 for lo, hi in beyond) - sum(hi - lo + 1 for lo, hi in outside)
        phantom_n += len(inside) + sum(hi - lo + 1 for lo, hi in outside)
        if len(phantom_sample) < 20:
            below = [s for lo, hi in outside if hi < 1 for s in range(lo, min(hi, lo + 20) + 1)]
            above = [s for lo, hi in outside if lo >= 1 for s in range(lo, min(hi, lo + 20) + 1)]
            seqs = below + [int(i) + 1 for i in inside[:20]] + above
            phantom_sample += [[worker, s] for s in seqs[:20 - len(phantom_sample)]]
    window = [rec.base + first_ms / 1000, rec.base + last_ms / 1000] \
        if first_ms is not None and last_ms is not None else None
    rpo_s = round(max(0.0, t_fault - window[0]), 3) if window and t_fault is not None else None
    failed_check = bool(phantom_n) or (max_lost is not None and lost_n > max_lost)
    valid: bool | str = False if failed_check else ("unknown" if unheard_workers else True)
    rel = [round(window[0] - t_fault, 3), round(window[1] - t_fault, 3)] if window and t_fault is not None else None
    text = f"{lost_n} lost" + (f", acknowledged between {rel[0]:+.3f} s and {rel[1]:+.3f} s of the fault" if rel
                               else "") + (", on " + ", ".join(f"{n} ({c})" for n, c in sorted(by_node.items()))
                                           if by_node else "")
    if unheard_workers:
        text += (f"; {unheard_workers} worker(s)' results did not all reach the controller"
                 + (f" ({undelivered_n} of their rows are present, outcome unknown)" if undelivered_n else "")
                 + ": a loss there cannot be seen")
    return {
        "valid": valid, "acknowledged": acknowledged, "lost_acknowledged": lost_n,
        "indeterminate": indeterminate, "indeterminate_found": info_found,
        "indeterminate_not_found": indeterminate - info_found, "phantoms": phantom_n,
        "phantoms_that_failed": phantom_failed, "undelivered": undelivered_n,
        "undelivered_workers": unheard_workers, "rpo_s": rpo_s,
        "lost_sample": lost_sample, "phantom_sample": phantom_sample,
        "lost_ack_window": window, "lost_ack_window_rel_s": rel, "lost_by_node": by_node, "text": text,
    }


def lost_update_check(updates: dict[int, list[int]], before: dict[int, int], after: dict[int, int],
                      max_lost: int | None) -> dict[str, Any]:
    """The update workload's RPO: every row's version (its value) before the load and after
    recovery. A row must have grown by at least its acknowledged increments: each one short is a
    lost update (counted like a lost write); by more than acknowledged + indeterminate is a
    phantom update. A row missing afterwards loses all its acknowledged increments."""
    lost = phantoms = 0
    lost_rows: list[list[int]] = []
    for row in sorted(set(before) | set(updates)):
        acked, info = updates.get(row, (0, 0))
        start = before.get(row, 0)
        final = after.get(row)
        if final is None:
            short, extra = acked, 0
        else:
            short, extra = max(0, start + acked - final), max(0, final - (start + acked + info))
        lost += short
        phantoms += extra
        if short:
            lost_rows.append([row, start + acked, -1 if final is None else final])
    acked_total = sum(a for a, _ in updates.values())
    return {"valid": not phantoms and (max_lost is None or lost <= max_lost), "workload": "update",
            "acknowledged": acked_total, "lost_acknowledged": lost, "rows_with_lost_updates": len(lost_rows),
            "indeterminate": sum(i for _, i in updates.values()), "phantoms": phantoms,
            "rows_checked": len(set(before) | set(updates)),
            "sum_before": sum(before.values()), "sum_after": sum(after.values()),
            "lost_sample": lost_rows[:20],  # [row, at least this version, found]
            "text": f"{lost} acknowledged updates lost on {len(lost_rows)} rows"}
