"""Observations: what a reader should know even when every target was met, each explained from
the evidence itself. A write acknowledged and then lost on a PASS (within `rpo_max_writes`) is
said with who lost it, which node acknowledged it, when relative to the fault, and the durability
settings that allowed it; indeterminate commits are said apart (either outcome is legal)."""

from __future__ import annotations

from typing import Any


def _asynchronous(ev: dict[str, Any]) -> str | None:
    """Why an acknowledged write can be lost at failover, from the recorded settings (None when
    nothing recorded says replication was asynchronous)."""
    server, ha = ev.get("server") or {}, (ev.get("ha") or {}).get("settings") or {}
    reasons = []
    if server.get("synchronous_standby_names") == "":
        reasons.append("synchronous_standby_names is empty")
    if ha.get("synchronous_mode") is False:
        reasons.append("Patroni's synchronous_mode is off")
    if server.get("rpl_semi_sync_master_enabled") in ("OFF", "0", 0, False):
        reasons.append("semi-synchronous replication is off")
    if not reasons:
        return None
    return (f"replication was asynchronous ({', '.join(reasons)}): the primary acknowledged commits no standby "
            "had received yet, and a failover to a standby loses them by design")


def _when(window: list[float] | None) -> str:
    if not window:
        return ""
    lo, hi = window
    if lo >= 0:
        return (f", acknowledged {lo:+.3f} s to {hi:+.3f} s after the fault took effect (the old primary still "
                "acknowledged commits after it was struck)")
    if hi < 0:
        return f", acknowledged {lo:+.3f} s to {hi:+.3f} s before the fault (not yet on a standby when it struck)"
    return f", acknowledged between {lo:+.3f} s and {hi:+.3f} s of the fault"


def observations(ev: dict[str, Any]) -> list[str]:
    res = ev.get("results") or {}
    out: list[str] = []
    why = _asynchronous(ev)
    groups = {n: g["rpo"] for n, g in (res.get("groups") or {}).items() if isinstance(g.get("rpo"), dict)}
    sources = groups or ({"all": res["rpo"]} if isinstance(res.get("rpo"), dict) else {})
    for name, rpo in sources.items():
        lost = rpo.get("lost_acknowledged") or 0
        if not lost:
            continue
        who = "" if name == "all" else f" of the {name} clients"
        nodes = rpo.get("lost_by_node") or {}
        by = f" on {', '.join(f'{n} ({c:,})' for n, c in sorted(nodes.items()))}" if nodes else ""
        when = _when(rpo.get("lost_ack_window_rel_s"))
        text = f"{lost:,} acknowledged write{'s' if lost != 1 else ''}{who} lost{by}{when}"
        bound = ((res.get("slo") or {}).get("rpo_max_writes") or {}).get("target")
        if why:
            text += f"; {why}"
        if bound is not None and lost <= bound:
            text += f"; within the target of {bound:,} (rpo_max_writes)"
        out.append(text + ".")
    rpo = res["rpo"] if isinstance(res.get("rpo"), dict) else {}
    if rpo.get("indeterminate"):
        n, found = rpo["indeterminate"], rpo.get("indeterminate_found", 0)
        out.append(f"{n:,} write{'s' if n != 1 else ''} had an unknown outcome (the connection was lost at commit): "
                   f"{found:,} found afterwards, {n - found:,} not; either is legal, neither counts as lost.")
    if (res.get("errors") or {}).get("dropped"):
        out.append(f"{res['errors']['dropped']:,} errors beyond the 200,000 kept are counted in the totals only.")
    return out
