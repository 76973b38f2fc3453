"""RPO: acknowledged ledger writes missing after the run, indeterminate writes resolved, phantoms.

Compared against the rows present on the writer after recovery, keyed (run, worker, seq):
- lost_acknowledged: ok in the history, absent now; rpo_s = t_fault - ack time of the earliest
  lost write (how far back in time the loss reaches);
- indeterminate (info): found or not found, reported apart (both are legal outcomes);
- phantoms: present but never acknowledged nor indeterminate (failed or never attempted): always
  a failure.
"""

from __future__ import annotations

from typing import Any

from chaoskit.recorder import FAIL, INFO, OK, Recorder


def rpo_check(rec: Recorder, present: set[tuple[int, int]], t_fault: float | None,
              max_lost: int | None, workers: set[int] | None = None,
              nodes: dict[tuple[int, int], str] | None = None) -> dict[str, Any]:
    """Of every worker's ledger, or of `workers` only (a client group's). `nodes`: the member
    that acknowledged a write, where the op history knows it."""

    def mine(keys: Any) -> set[tuple[int, int]]:
        return {k for k in keys if workers is None or k[0] in workers}

    acked = mine(rec.ledger_keys(OK))
    info = mine(rec.ledger_keys(INFO))
    failed = mine(rec.ledger_keys(FAIL))
    if workers is not None:
        present = {k for k in present if k[0] in workers}
    lost = sorted(acked - present)
    phantoms = sorted(present - acked - info)
    phantom_failed = [k for k in phantoms if k in failed]
    lost_ack_times = [t for k in lost if (t := rec.ledger_outcome(*k)[1]) is not None]
    rpo_s = None
    if lost_ack_times and t_fault is not None:
        rpo_s = round(max(0.0, t_fault - min(lost_ack_times)), 3)
    valid = not phantoms and (max_lost is None or len(lost) <= max_lost)
    by_node: dict[str, int] = {}
    for k in lost:
        node = (nodes or {}).get(k)
        if node is not None:
            by_node[node] = by_node.get(node, 0) + 1
    window = [min(lost_ack_times), max(lost_ack_times)] if lost_ack_times else None
    rel = [round(window[0] - t_fault, 3), round(window[1] - t_fault, 3)] if window and t_fault is not None else None
    text = f"{len(lost)} lost" + (f", acknowledged between {rel[0]:+.3f} s and {rel[1]:+.3f} s of the fault" if rel
                                  else "") + (", on " + ", ".join(f"{n} ({c})" for n, c in sorted(by_node.items()))
                                              if by_node else "")
    return {
        "valid": valid, "acknowledged": len(acked), "lost_acknowledged": len(lost),
        "indeterminate": len(info), "indeterminate_found": len(info & present),
        "indeterminate_not_found": len(info - present), "phantoms": len(phantoms),
        "phantoms_that_failed": len(phantom_failed), "rpo_s": rpo_s,
        "lost_sample": [list(k) for k in lost[:20]], "phantom_sample": [list(k) for k in phantoms[:20]],
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
