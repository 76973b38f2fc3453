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


def pitr_check(rec: Recorder, present: KeyRanges | set[tuple[int, int]], target_t: float | None, margin_s: float,
               t_disaster: float | None, max_lost: int | None) -> dict[str, Any]:
    """RPO of a restore to the instant `target_t` (control clock; None: the latest), against the
    ledger rows the restored server holds: `rpo_check`'s figures (every acknowledged write
    missing is lost: the restore's RPO in writes), each write also placed against the target:

    - before the target: acknowledged (ack time, rounded up to the next ms) at least `margin_s`
      (the clock's uncertainty) before it. It committed before the target, so it must be there:
      `missing_before_target` must be 0;
    - after the target: started (a worker's op starts after its previous write was acknowledged)
      at least `margin_s` after it. It committed after the target, so it must not be there:
      `present_after_target` must be 0; those acknowledged are the loss the target chose
      (`lost_after_target`);
    - around the target: in flight at it (commit on either side): `around_target`, how many of
      them acknowledged and how many present, never judged.

    How far back the restored data reaches: the last acknowledged write present (`last_present_t`),
    in seconds before the disaster, and the acknowledged writes lost (the writes it takes back)."""
    out = rpo_check(rec, present, t_disaster, max_lost)
    if target_t is None:
        out["pitr"] = {"target": None, "text": "restored to the latest archived change"}
        return out
    held = KeyRanges.of(present)
    base_ms, target_ms, margin_ms = rec.base * 1000, target_t * 1000, margin_s * 1000
    before = missing_before = after = present_after = lost_after = around = around_acked = around_present = 0
    missing_sample: list[list[int]] = []
    after_sample: list[list[int]] = []
    last_present_ms: int | None = None
    for worker in sorted(set(rec.ledger_workers()) | set(held.workers())):
        values = rec.ledger_column(worker)
        n = len(values)
        if not n:
            continue
        acked = values < LEDGER_UNSET
        here = held.mask(worker, n)
        t = values.astype(np.float64)
        # each op's earliest start: the ack of the worker's previous acknowledged write (ms, rounded down)
        prev = np.where(acked, t, -1.0)
        prev = np.maximum.accumulate(prev)
        start_lb = np.concatenate(([-1.0], prev[:-1]))
        is_before = acked & (base_ms + t + 1 <= target_ms - margin_ms)
        is_after = (start_lb >= 0) & (base_ms + start_lb >= target_ms + margin_ms)
        is_around = ~is_before & ~is_after & (acked | (values == LEDGER_INFO) | here)
        before += int(is_before.sum())
        miss = np.flatnonzero(is_before & ~here)
        missing_before += len(miss)
        missing_sample += [[worker, int(i) + 1] for i in miss[:20 - len(missing_sample)]]
        after += int((is_after & acked).sum())
        lost_after += int((is_after & acked & ~here).sum())
        extra = np.flatnonzero(is_after & here)
        present_after += len(extra)
        after_sample += [[worker, int(i) + 1] for i in extra[:20 - len(after_sample)]]
        around += int(is_around.sum())
        around_acked += int((is_around & acked).sum())
        around_present += int((is_around & here).sum())
        kept = np.flatnonzero(acked & here)
        if len(kept):
            last = int(values[kept].max())
            last_present_ms = last if last_present_ms is None else max(last_present_ms, last)
        # rows held beyond the column (never attempted by this run's record) are rpo_check's phantoms
    last_present_t = rec.base + last_present_ms / 1000 if last_present_ms is not None else None
    out["pitr"] = {
        "target": target_t, "margin_s": margin_s,
        "acknowledged_before_target": before, "missing_before_target": missing_before,
        "missing_before_sample": missing_sample,
        "acknowledged_after_target": after, "lost_after_target": lost_after,
        "present_after_target": present_after, "present_after_sample": after_sample,
        "around_target": around, "around_target_acknowledged": around_acked, "around_target_present": around_present,
        "last_present_t": last_present_t,
        "data_reaches_s_before_disaster": round(t_disaster - last_present_t, 3)
        if t_disaster is not None and last_present_t is not None else None,
    }
    out["valid"] = False if (missing_before or present_after or out["phantoms"]
                             or (max_lost is not None and out["lost_acknowledged"] > max_lost)) else out["valid"]
    out["text"] = (f"{out['lost_acknowledged']} acknowledged writes not restored ({lost_after} after the target, "
                   f"{missing_before} before it: must be 0); {present_after} after the target present (must be 0); "
                   f"{around} in flight at the target ({around_present} present)")
    return out


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
