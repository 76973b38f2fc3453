"""Split-brain (two members writable at overlapping times) and replica convergence."""

from __future__ import annotations

import time
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.topology.probe import ProbeLog


def split_brain(probe: ProbeLog, interval: float) -> dict[str, Any]:
    """A member counts as writable from a `primary` sample until its next sample; two members
    writable at once (within one probe interval of each other) is split-brain."""
    spans: dict[str, list[tuple[float, float]]] = {}
    by_member: dict[str, list[tuple[float, str]]] = {}
    for t, m, r in probe.samples:
        by_member.setdefault(m, []).append((t, r))
    for m, seq in by_member.items():
        for (t, r), (t_next, _) in zip(seq, [*seq[1:], (seq[-1][0] + interval, "")], strict=True):
            if r == "primary":
                spans.setdefault(m, []).append((t, min(t_next, t + 2 * interval)))
    overlaps = []
    members = sorted(spans)
    for i, a in enumerate(members):
        for b in members[i + 1:]:
            for s1, e1 in spans[a]:
                for s2, e2 in spans[b]:
                    lo, hi = max(s1, s2), min(e1, e2)
                    if hi > lo:
                        overlaps.append({"members": [a, b], "from": lo, "to": hi})
    return {"valid": not overlaps, "overlaps": overlaps[:20], "overlap_count": len(overlaps),
            "samples": len(probe.samples)}


def replica_convergence(driver: Driver, cluster: Cluster, inventory: Inventory, run_id: str,
                        within: float) -> dict[str, Any]:
    """Every member that answers holds the same chaoskit ledger rows for this run (count, sum)."""
    sql = driver.q("SELECT COUNT(*), COALESCE(SUM(seq), 0) FROM chaoskit_ledger WHERE run_id = %s")
    deadline = time.time() + within
    while True:
        digests: dict[str, Any] = {}
        for member in cluster.members:
            conn = None
            try:
                conn = driver.connect_member(member)
                count, total = driver.query(conn, sql, (run_id,))[0]
                digests[member.host] = {"rows": int(count), "seq_sum": int(total),
                                        "role": "primary" if driver.is_writable(conn) else "replica"}
            except Exception as exc:  # a member down is reported, not fatal
                digests[member.host] = {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
            finally:
                Driver.close_quietly(conn)
        answered = [(d["rows"], d["seq_sum"]) for d in digests.values() if "rows" in d]
        converged = len(answered) == len(cluster.members) and len(set(answered)) == 1
        if converged or time.time() >= deadline:
            return {"valid": converged if answered else "unknown", "members": digests,
                    "waited_s": round(within - max(0.0, deadline - time.time()), 3)}
        time.sleep(0.5)
