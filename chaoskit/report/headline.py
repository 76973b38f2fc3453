"""The headline an auditor reads first, the same rows on the terminal, in summary.md and at the
top of the report: the verdict, where it ran (lab, production, or the inventory's own tag), what
was done at which UTC instant, both RTOs and the data lost against their targets (and where the
lost writes were acknowledged), the failover (old -> new primary, the rejoin), the duration, who
ran it, and whether the evidence is signed. Built from run.json alone (a pure function), so a
re-rendered report says what the first one said."""

from __future__ import annotations

import datetime as dt
from typing import Any

from chaoskit.report.vocabulary import check_sentence, label, shown, slo_sentence, verdict_word, worst_over_outages


def utc(t: Any) -> str:
    if not isinstance(t, int | float):
        return "—"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _since(t: Any, origin: Any) -> str:
    return f"+{t - origin:.1f} s" if isinstance(t, int | float) and isinstance(origin, int | float) else "—"


def _done(ev: dict[str, Any]) -> str:
    what = []
    for f in ev.get("faults_injected") or []:
        what.append(f"{f.get('kind')} on {f.get('host')} at {utc(f.get('t_effect'))} "
                    f"({_since(f.get('t_effect'), ev.get('started'))} into the run)")
    for a in ev.get("actions") or []:
        what.append(f"{a.get('kind')}{' of ' + str(a['member']) if a.get('member') else ''} at "
                    f"{utc(a.get('t_sent'))} ({_since(a.get('t_sent'), ev.get('started'))} into the run)")
    return "; ".join(what) or "nothing (no fault or action took effect)"


def _rto(res: dict[str, Any]) -> str | None:
    if not any(f.get("outage") for f in res.get("faults") or []):
        return "no write outage" if res.get("faults") else None
    text = ", ".join(f"{label(k)} {shown(k, worst_over_outages(res, k))}"
                     for k in ("rto_first_client_s", "rto_all_clients_s"))
    slo = (res.get("slo") or {}).get("rto_max")
    return text + (f"; SLO {slo_sentence('rto_max', slo)}" if slo else " (no target)")


def _loss(res: dict[str, Any]) -> str | None:
    rpo = res.get("rpo") or {}
    if "lost_acknowledged" not in rpo:
        return None
    text = f"{rpo['lost_acknowledged']:,} of {rpo.get('acknowledged', 0):,} acknowledged writes lost"
    slo = (res.get("slo") or {}).get("rpo_max_writes")
    if slo:
        scope = ", worst client group" if slo.get("by_group") else ""
        text += f"; SLO{scope} {slo_sentence('rpo_max_writes', slo)}"
    window = rpo.get("lost_ack_window_rel_s")
    if rpo["lost_acknowledged"] and window:
        text += f"; acknowledged between {window[0]:+.3f} s and {window[1]:+.3f} s of the fault"
    nodes: dict[str, int] = {}
    for g in (res.get("groups") or {}).values():
        for node, n in ((g.get("rpo") or {}).get("lost_by_node") or {}).items():
            nodes[node] = nodes.get(node, 0) + n
    if nodes:
        text += ", by " + ", ".join(f"{n} ({c})" for n, c in sorted(nodes.items()))
    return text


def _failover(res: dict[str, Any]) -> str | None:
    parts = []
    for f in res.get("faults") or []:
        if not f.get("outcome_text"):
            continue
        text = f["outcome_text"]
        if f.get("t_rejoined") is not None:
            at = _since(f["t_rejoined"], f.get("t_fault"))
            text += f"; {f.get('primary_at_fault')} rejoined as a replica at {at}"
        elif f.get("outcome") == "failover" and "t_rejoined" in f:
            text += f"; {f.get('primary_at_fault')} not seen as a replica again within the fault's window"
        parts.append(text)
    return "; ".join(parts) or None


def _why_not(res: dict[str, Any], width: int = 160) -> str | None:
    """Each check and service level that did not hold, in its own words (cut at `width`): what a
    reader of a FAIL wants next."""
    parts = []
    for name, c in (res.get("checks") or {}).items():
        if isinstance(c, dict) and c.get("valid") is not True:
            parts.append("check " + check_sentence(name, c))
    for name, sl in (res.get("slo") or {}).items():
        if isinstance(sl, dict) and sl.get("ok") is False:
            parts.append("SLO " + slo_sentence(name, sl))
    cut = [p if len(p) <= width else p[: width - 1].rstrip() + "…" for p in parts]
    return "; ".join(cut) or None


def _environment_of_old(ev: dict[str, Any]) -> dict[str, str]:
    """A run.json written before `environment` was recorded: what its own fields still show."""
    if ((ev.get("inventory") or {}).get("content") or {}).get("lab"):
        return {"name": "lab", "from": "the inventory is the lab's"}
    if ev.get("production_targets"):
        return {"name": "production", "from": f"production tags on {', '.join(ev['production_targets'])}"}
    return {"name": "not stated", "from": "not recorded by the chaoskit that ran it"}


def headline(ev: dict[str, Any], signed: bool | None = None) -> list[tuple[str, str]]:
    """(label, text) rows. `signed`: whether the seal carries a signature (None: not known when
    this is written; the terminal and the report know it)."""
    res = ev.get("results") or {}
    env = ev.get("environment") or _environment_of_old(ev)
    verdict = ("INCOMPLETE" if ev.get("incomplete") else "ABORTED" if ev.get("aborted") else
               "REFUSED" if ev.get("refused") else verdict_word(res.get("verdict")))
    rows = [("verdict", verdict),
            *([("incomplete", f"{ev['incomplete']} (the run directory is sealed with what was written; "
                              "tracebacks in logs/chaoskit-error.txt)")] if ev.get("incomplete") else []),
            *([("verdict of the checks", f"{verdict_word(res['verdict'])} (as far as they ran)")]
              if ev.get("incomplete") and res.get("verdict") is not None else []),
            ("environment", f"{env.get('name', 'not stated')}" + (f" ({env['from']})" if env.get("from") else "")),
            ("what was done", _done(ev))]
    why = _why_not(res) if verdict == "FAIL" else None
    if why:
        rows.append(("why it failed", why))
    for key, text in (("RTO", _rto(res)), ("data lost", _loss(res)), ("failover", _failover(res))):
        if text:
            rows.append((key, text))
    started, ended = ev.get("started"), ev.get("ended")
    if isinstance(started, int | float) and isinstance(ended, int | float):
        rows.append(("duration", f"{ended - started:.1f} s, {utc(started)} to {utc(ended)}"))
    rows.append(("operator", str(ev.get("operator") or "not recorded")))
    if signed is not None:
        rows.append(("evidence", "signed (check it with chaoskit verify --allowed-signers)" if signed else
                     "NOT SIGNED: chaoskit verify shows it is unaltered only as far as nobody re-sealed it"))
    if ev.get("aborted"):
        rows.append(("aborted", str(ev["aborted"])))
    return rows
