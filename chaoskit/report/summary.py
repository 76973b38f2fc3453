"""The drill's last lines on the terminal, as a person would write them: PASS/FAIL, units, rounded
figures (the raw values stay in run.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from chaoskit.report.headline import headline
from chaoskit.report.legacy import upgrade
from chaoskit.report.vocabulary import (
    archive_line,
    fault_name,
    group_maker,
    label,
    restore_lines,
    seconds,
    shown,
    slo_sentence,
    verdict_word,
)


def slo_line(name: str, s: dict[str, Any]) -> str:
    return f"SLO {slo_sentence(name, s)}"


def rto_words(f: dict[str, Any]) -> str:
    """"first client back 9.84 s, all clients back 10.04 s" (the two RTOs, named as everywhere)."""
    return ", ".join(f"{label(k)} {shown(k, f.get(k))}" for k in ("rto_first_client_s", "rto_all_clients_s"))


def fault_line(f: dict[str, Any]) -> str:
    where = fault_name(f)
    if f.get("valid") == "unknown":
        return f"{where}: analysis failed: {f.get('error')}"
    if not f.get("outage"):
        eff = f.get("effect") or {}
        change = eff.get("tps_change")
        return f"{where}: no write outage" + (f"; throughput {change:+.0%} against baseline" if change is not None
                                               else "") + (f"; {f['outcome_text']}" if f.get("outcome_text") else "")
    ph = f.get("phases") or {}
    return (f"{where}: RTO {rto_words(f)}; detection "
            f"{seconds(ph.get('detection_s'))}, promotion {seconds(ph.get('promotion_s'))}, reconnect "
            f"{seconds(ph.get('reconnect_s'))}, stabilisation {seconds(ph.get('stabilisation_s'))}"
            + (f"; {f['outcome_text']}" if f.get("outcome_text") else ""))


def group_line(name: str, g: dict[str, Any]) -> str:
    rpo = g.get("rpo") or {}
    lost = f"; {shown('lost_acknowledged', rpo['lost_acknowledged'])} lost" if "lost_acknowledged" in rpo else ""
    n = len(g.get("workers") or [])
    who = group_maker(g)
    head = f"  client group {name} ({who}, {n} client{'s' if n != 1 else ''}): "
    if g.get("rpo_null_reason"):
        lost = "; RPO not measured (the tool does not say which writes it had acknowledged)"
    restarts = g.get("tool_restarts") or {}
    if restarts.get("aborted"):
        lost += (f"; {g.get('tool')} gave up {restarts['aborted']} client(s), {restarts['back']} back after being "
                 f"started again ({restarts['failed_starts']} starts found no writer, longest down "
                 f"{seconds(restarts['longest_down_s'])})")
    if restarts.get("ended_early"):
        lost += f"; {g.get('tool')} ended before the load's stop (not started again: no load from it after that)"
    if restarts.get("samples_dropped"):
        lost += f"; {restarts['samples_dropped']} samples of threads beyond the group's clients not counted"
    if g.get("faults") and not any(f.get("outage") for f in g["faults"]):  # its figures are 0.0 by definition
        return head + "no write outage" + lost
    resolution = g.get("rto_resolution_s")
    late = f" (up to {resolution:g} s late: {g.get('tool')} reports rates, not transactions)" if resolution else ""
    return head + f"{rto_words(g)}{late}, {label('write_gap_s')} {shown('write_gap_s', g.get('write_gap_s'))}{lost}"


def catchup_line(c: dict[str, Any]) -> str:
    if c.get("valid") == "unknown":
        return f"  standby catch-up: analysis failed: {c.get('error')}"
    if c.get("streaming_s") is None:
        return f"  standby {c['member']}: " + ("; ".join(c.get("notes") or []) or "no catch-up observed")
    peak = c.get("peak_lag_bytes")
    delay = c.get("peak_replay_delay_s")
    how = "rebuilt" if c.get("rebuilt") else "rewound" if c.get("rewound") else None
    missed = c.get("missed_bytes")
    return (f"  standby {c['member']} back"
            + ("" if missed is None else f" {missed:,} bytes of WAL behind")
            + f": streaming after {seconds(c['streaming_s'])}, caught up after "
            f"{seconds(c.get('caught_up_s'))} (peak lag {'—' if peak is None else f'{peak:,} bytes'}"
            f"{'' if delay is None else f', replay delay {delay:.2f} s'})" + (f"; {how}" if how else ""))


def print_drill_summary(out: Console, ev: dict[str, Any], run_dir: Path) -> None:
    ev = upgrade(ev)
    res = ev.get("results") or {}
    for key, text in headline(ev, signed=(run_dir / "manifest.json.sig").exists()):
        out.print(f"{key:>13}: {text}", highlight=False, markup=False, soft_wrap=True)
    out.print("")
    for w in ev.get("preflight_warnings") or []:
        out.print(f"preflight warning: {w}", highlight=False, markup=False)
    for f in res.get("faults", []):
        out.print(fault_line(f), highlight=False, markup=False)
        if f.get("catchup"):
            out.print(catchup_line(f["catchup"]), highlight=False, markup=False)
    for name, g in (res.get("groups") or {}).items():
        out.print(group_line(name, g), highlight=False, markup=False)
    cpu = (ev.get("load") or {}).get("client_cpu") or {}
    if cpu.get("client_saturated"):
        out.print(f"client-bound: {cpu['client_saturated_why']}: the figures may be the client's, not the "
                  "cluster's", highlight=False, markup=False)
    r = res.get("rpo")
    if r and "acknowledged" in r:
        out.print(f"RPO: {r['lost_acknowledged']:,} of {r['acknowledged']:,} acknowledged writes lost; "
                  f"{r['indeterminate']:,} indeterminate ({r['indeterminate_found']:,} found); "
                  f"{r['phantoms']:,} phantoms", highlight=False, markup=False)
    for line in restore_lines(res.get("restore"), (res.get("rpo") or {}).get("pitr")):
        out.print(line, highlight=False, markup=False)
    archive = archive_line(res.get("archive"))
    if archive:
        out.print(archive, highlight=False, markup=False)
    for name, c in (res.get("checks") or {}).items():
        if name != "rpo":
            out.print(f"check {name}: {verdict_word(c.get('valid'))}", highlight=False, markup=False)
        for row in c.get("steps") or [] if name == "expected_outcome" else []:
            if not row["ok"]:
                what = row.get("action") or row.get("fault")
                out.print(f"  steps[{row['step']}] ({what}): expected {row['expected']}, got {row['outcome']}"
                          + (f": {row['text']}" if row.get("text") else ""), highlight=False, markup=False)
    for name, s in (res.get("slo") or {}).items():
        out.print(slo_line(name, s), highlight=False, markup=False)
    if ev.get("aborted"):
        out.print(f"ABORTED: {ev['aborted']} (every fault was reverted)", highlight=False, markup=False)
    size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
    out.print(f"verdict: {verdict_word(res.get('verdict'))}   report: {run_dir / 'report.html'}   run directory: "
              f"{size / 1e6:,.1f} MB", highlight=False, markup=False)
