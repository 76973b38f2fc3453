"""What happened, in time order and in words: the faults and actions, the HA manager's own
events, every role change the probe saw, the clients' marks (first error, first client back,
recovered), the cluster steady again; each line at its instant in seconds since the first fault
(control clock). The phases follow in plain words, detection with its bound from the manager's
settings, and the log lines the members wrote about it are quoted with the file they are in.
Built from the run directory's own events.jsonl and run.json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chaoskit.report.vocabulary import fault_name

MARK_WORDS = {"t_detect": "detection (the HA manager's first reaction)", "t_promoted": "a writer again (promotion)",
              "t_first_ok": "first client back", "t_recovered": "throughput back to its threshold (recovered)"}


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and isinstance(ev.get("t"), int | float):
            out.append(ev)
    return out


def _line(e: dict[str, Any]) -> str | None:
    kind = e.get("kind")
    if kind == "fault_injected":
        return f"fault: {e.get('fault_kind')} on {e.get('host')} took effect"
    if kind == "fault_reverted":
        return f"fault on {e.get('host')} reverted (by {e.get('by')})"
    if kind == "action":
        return f"action: {e.get('action') or e.get('what') or 'action'} {e.get('member') or ''}".rstrip()
    if kind == "manager_event":
        return f"HA manager ({e.get('source')}): {e.get('detail') or e.get('event')}"
    if kind == "role" and e.get("previous") is not None:
        return f"{e.get('member')}: {e.get('previous')} -> {e.get('role')}"
    if kind == "phase_mark" and e.get("mark") in MARK_WORDS:
        return f"mark: {MARK_WORDS[e['mark']]}"
    if kind == "cluster_steady":
        roles = e.get("roles") or {}
        return "cluster steady: " + ", ".join(f"{m} {r}" for m, r in sorted(roles.items()))
    if kind == "step_triggered":
        who = f" of {e.get('member')}" if e.get("member") else ""
        return f"steps[{e.get('step')}] started by {e.get('event')}{who} ({e.get('source')})"
    if kind == "step_skipped":
        return f"steps[{e.get('step')}] skipped: {e.get('reason')}"
    if kind == "step_late":
        held = e.get("held_by") or {}
        why = (f": steps[{held.get('step')}]'s {held.get('what')} before it took {held.get('took_s')} s"
               if held else "")
        return f"steps[{e.get('step')}]'s {e.get('what')} started {e.get('late_s')} s after its planned instant{why}"
    if kind == "load_started":
        return f"load started ({e.get('workers')} clients, {e.get('workload')})"
    if kind in ("throughput_not_recovered", "aborted", "preflight_refused"):
        return kind.replace("_", " ") + (f": {e.get('reason')}" if e.get("reason") else "")
    return None


def narrative(events: list[dict[str, Any]], ev: dict[str, Any]) -> list[dict[str, Any]]:
    """[{t_s, what}] in time order, seconds since the first fault (since the run started when
    there was none)."""
    faults = [f for f in (ev.get("results") or {}).get("faults") or [] if isinstance(f.get("t_fault"), int | float)]
    origin = min((f["t_fault"] for f in faults), default=ev.get("started") or 0.0)
    rows = []
    for e in sorted(events, key=lambda e: e["t"]):
        text = _line(e)
        if text:
            rows.append({"t_s": round(e["t"] - origin, 3), "what": text})
    return rows


def phases_in_words(ev: dict[str, Any]) -> list[str]:
    """"kill on pg1: detection 9.90 s (bound 11.0 s from patroni's settings: ttl 10, loop_wait 1), ..."."""
    out = []
    bound = ev.get("detection_bound_s")
    ha = ev.get("ha") or {}
    settings = ", ".join(f"{k} {v}" for k, v in (ha.get("settings") or {}).items() if k in BOUND_SETTINGS)
    for f in (ev.get("results") or {}).get("faults") or []:
        ph = f.get("phases") or {}
        if not f.get("outage"):
            continue
        words = []
        if ph.get("detection_s") is not None:
            b = f" (bound {bound:.1f} s from {ha.get('manager')}'s settings{': ' + settings if settings else ''})" \
                if isinstance(bound, int | float) else ""
            parts = ph.get("detection_parts") or {}
            split = f" (watcher {parts['watcher_s']:.2f} s, monitor's confirmation {parts['confirmation_s']:.2f} s)" \
                if parts.get("watcher_s") is not None and parts.get("confirmation_s") is not None else \
                " (ends at the monitor's confirmation)" if parts else ""
            words.append(f"detection {ph['detection_s']:.2f} s{split}{b}")
        for key, name in (("promotion_s", "promotion"), ("reconnect_s", "reconnect"),
                          ("stabilisation_s", "stabilisation")):
            if ph.get(key) is not None:
                words.append(f"{name} {ph[key]:.2f} s")
        out.append(f"{fault_name(f)}: " + (", ".join(words) or "no phases measured"))
    return out


# the settings that bound detection, as the managers name them
BOUND_SETTINGS = ("ttl", "loop_wait", "retry_timeout", "health_check_period", "unhealthy_timeout",
                  "node_down_timeout", "reconnect_attempts", "reconnect_interval", "monitor_interval_secs",
                  "ping_interval", "evs.suspect_timeout", "evs.inactive_timeout")


_LOG_FILE = re.compile(r"^logs/[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")


def log_quotes(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """The error lines each member's logs wrote in the run's window, with the file they are in
    (linked only when it is a path of the run directory's logs/, as chaoskit writes it)."""
    return [{"host": lg.get("host"), "label": lg.get("label"), "lines": lg["complaints"],
             "file": lg["file"] if isinstance(lg.get("file"), str) and _LOG_FILE.match(lg["file"])
             and ".." not in lg["file"] else None}
            for lg in ev.get("logs") or [] if lg.get("complaints")]
