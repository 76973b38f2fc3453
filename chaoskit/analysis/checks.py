"""Split-brain (two members writable at overlapping times) and replica convergence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.inventory.models import Cluster
from chaoskit.timesource import SYSTEM_CLOCK, Clock
from chaoskit.topology.probe import ProbeLog, same_component


def split_brain(probe: ProbeLog, interval: float, *, multi_writer: bool = False) -> dict[str, Any]:
    """A member counts as writable from a `primary` sample until its next sample; two members
    writable at once (within one probe interval of each other) is split-brain.

    In a multi-writer cluster (Galera; `probe` is then the writer view, see
    `topology.probe.writer_view`) only writers in different components count, and only for
    longer than two probe intervals: the members of one component see a view change up to one
    interval apart, a real split lasts until the partition heals."""
    spans: dict[str, list[tuple[float, float]]] = {}
    by_member: dict[str, list[tuple[float, str]]] = {}
    for t, m, r in probe.samples:
        by_member.setdefault(m, []).append((t, r))
    for m, seq in by_member.items():
        for (t, r), (t_next, _) in zip(seq, [*seq[1:], (seq[-1][0] + interval, "")], strict=True):
            if r == "primary":
                spans.setdefault(m, []).append((t, min(t_next, t + 2 * interval)))
    pieces = []
    members = sorted(spans)
    for i, a in enumerate(members):
        for b in members[i + 1:]:
            for s1, e1 in spans[a]:
                for s2, e2 in spans[b]:
                    lo, hi = max(s1, s2), min(e1, e2)
                    if hi > lo:
                        pieces.append((a, b, lo, hi))
    if multi_writer:
        pieces = [p for p in pieces if not same_component(_component_at(probe, p[0], p[2]),
                                                           _component_at(probe, p[1], p[2]))]
    # one entry per stretch of time a pair was writable together (samples one interval apart join)
    overlaps: list[dict[str, Any]] = []
    for a, b, lo, hi in sorted(pieces, key=lambda p: (p[0], p[1], p[2])):
        last = overlaps[-1] if overlaps else None
        if last and last["members"] == [a, b] and lo <= last["to"] + interval:
            last["to"] = max(last["to"], hi)
        else:
            overlaps.append({"members": [a, b], "from": lo, "to": hi})
    for o in overlaps:
        o["seconds"] = round(o["to"] - o["from"], 3)
    ignored = 0
    if multi_writer:
        ignored = sum(1 for o in overlaps if o["seconds"] <= 2 * interval)
        overlaps = [o for o in overlaps if o["seconds"] > 2 * interval]
    overlaps.sort(key=lambda o: o["from"])
    extra = {"multi_writer": True, "short_overlaps_ignored": ignored} if multi_writer else {}
    return {**extra, "valid": not overlaps, "overlaps": overlaps[:20], "overlap_count": len(overlaps),
            "overlap_s": round(sum(o["seconds"] for o in overlaps), 3), "samples": len(probe.samples)}


def _component_at(probe: ProbeLog, member: str, t: float) -> str | None:
    """The component `member` last reported at or before `t` (multi-writer clusters)."""
    found = None
    for ts, m, c in probe.components:
        if ts > t:
            break
        if m == member:
            found = c
    return found


def gather_convergence(driver: Driver, cluster: Cluster, digest: Callable[[Any], tuple[int, int]],
                       within: float, rows_only_added: bool = False, multi_writer: bool = False,
                       clock: Clock = SYSTEM_CLOCK) -> dict[str, Any]:
    """Per member: the workload's digest of this run's data (`rows`, `seq_sum`: the ledger's row
    count and sum of sequence numbers) and its role, read directly; repeated (bounded by `within`)
    until every member answers with the same digest.

    Waiting longer cannot help when the load's rows are only ever added (`rows_only_added`, the
    ledger) and a member holds more of them than the cluster's one writer (`multi_writer` off):
    the load has stopped, the writer replicates from nobody, so those rows are on that member
    for good (an old primary that took writes nobody else got and was not rewound). The reading
    then stops at once, with `stopped_early` saying why, instead of spending the whole bound."""
    deadline = clock.now() + within
    while True:
        digests: dict[str, Any] = {}
        for member in cluster.members:
            conn = None
            try:
                conn = driver.connect_member(member)
                count, total = digest(conn)
                digests[member.host] = {"rows": int(count), "seq_sum": int(total),
                                        "role": driver.role(conn)}
            except Exception as exc:  # a member down is reported, not fatal
                digests[member.host] = {"error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
            finally:
                Driver.close_quietly(conn)
        ahead = _ahead_of_the_writer(digests) if rows_only_added and not multi_writer else []
        if _converged(digests, len(cluster.members)) or clock.now() >= deadline or ahead:
            out = {"members": digests, "waited_s": round(within - max(0.0, deadline - clock.now()), 3)}
            if ahead and not _converged(digests, len(cluster.members)):
                out["stopped_early"] = (f"{', '.join(ahead)} {'holds' if len(ahead) == 1 else 'hold'} more of this "
                                        "run's rows than the one writer: rows are only ever added, so no replication "
                                        "can make them equal; not waited for")
            return out
        clock.sleep(0.5)


def _ahead_of_the_writer(digests: dict[str, Any]) -> list[str]:
    """The members holding more rows than the one member that answered as primary (none when no
    member, or more than one, did)."""
    writers = [d for d in digests.values() if d.get("role") == "primary" and "rows" in d]
    if len(writers) != 1:
        return []
    return sorted(h for h, d in digests.items() if "rows" in d and d["rows"] > writers[0]["rows"])


def _converged(digests: dict[str, Any], members: int) -> bool:
    answered = [(d["rows"], d["seq_sum"]) for d in digests.values() if "rows" in d]
    return len(answered) == members and len(set(answered)) == 1


def convergence_verdict(gathered: dict[str, Any], old_primary: str | None, ha: dict[str, Any],
                        said: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every member holds the same rows for this run; and what became of the old primary:
    `rejoined` means back in the cluster *and* holding exactly the writer's rows. A member that
    does not hold the writer's rows is named with what it holds and, from `said` (host -> error
    lines of its logs in the run's window, `hostlogs.complaints`), the server's own words."""
    if "members" not in gathered:
        return gathered
    members = gathered["members"]
    answered = [(d["rows"], d["seq_sum"]) for d in members.values() if "rows" in d]
    out: dict[str, Any] = {"valid": _converged(members, len(members)) if answered else "unknown", **gathered}
    if out["valid"] is False:
        out["not_converged"] = behind = _behind(members, said or {})
        out["text"] = "; ".join(b["text"] for b in behind)
    if old_primary and old_primary in members:
        writer: dict[str, Any] = next((d for d in members.values() if d.get("role") == "primary"), {})
        mine = members[old_primary]
        same = "rows" in mine and (mine.get("rows"), mine.get("seq_sum")) == (writer.get("rows"), writer.get("seq_sum"))
        out["old_primary"] = {
            "host": old_primary, "role_now": mine.get("role"),
            "rejoined": mine.get("role") in ("replica", "primary") and same,
            "diverged": mine.get("role") == "replica" and not same,
            "rewind": rewind_note(ha.get("manager"), mine.get("role"))}
    return out


def _behind(members: dict[str, Any], said: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Members without the writer's rows (or that did not answer), each with its logs' last
    error lines of the run's window."""
    writer = next((d for d in members.values() if d.get("role") == "primary" and "rows" in d), None)
    out = []
    for host, d in members.items():
        if d is writer or (writer is not None and (d.get("rows"), d.get("seq_sum")) ==
                           (writer["rows"], writer["seq_sum"])):
            continue
        if "rows" in d:
            of = f" of the writer's {writer['rows']:,}" if writer is not None else ""
            text = f"{host} ({d.get('role')}) holds {d['rows']:,} rows{of}"
        else:
            text = f"{host} did not answer: {d.get('error')}"
        words = said.get(host) or []
        if words:
            text += "; its log said: " + " | ".join(words)
        out.append({"host": host, "rows": d.get("rows"), "writer_rows": writer["rows"] if writer else None,
                    "server_said": words, "text": text})
    return out


def rewind_note(manager: str | None, role_now: str | None) -> str:
    if role_now == "primary":
        return "not needed: the old primary is the writer again"
    if manager in (None, "none"):
        return "not applicable: no HA manager rejoins nodes in this cluster"
    return f"unknown: not observable through {manager}'s interface (see the member's manager log)"
