"""Run directories read back: `compare` (a table across drill and experiment runs, with what differs
between them) and `history` (per cluster and playbook: runs over time, last drilled, pass rate, RTO
trend). Both print, and write CSV/HTML (history: HTML and JSON) when asked."""

from __future__ import annotations

import csv
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from chaoskit.errors import InputError
from chaoskit.report.campaign import pass_rate
from chaoskit.report.legacy import upgrade
from chaoskit.report.manifest import verify
from chaoskit.report.rundir import MANIFEST
from chaoskit.report.vocabulary import fault_name, verdict_word, worst_over_outages
from chaoskit.report.writer import CSP, template_env

# what may explain a difference between two runs of one playbook
CONTEXT = ("tool", "cluster", "ha_manager", "ha_version", "server_version", "settings", "inventory_sha256")


def read_run(d: Path) -> dict[str, Any]:
    try:
        return upgrade(json.loads((d / "run.json").read_text()))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read run.json: {exc}", source=str(d), field="RUN_DIR") from None


def _context(ev: dict[str, Any]) -> dict[str, Any]:
    if "experiment" in ev:
        return {"tool": None, "cluster": ev["experiment"].get("cluster"), "ha_manager": None, "ha_version": None,
                "server_version": None, "settings": json.dumps(ev.get("settings"), sort_keys=True, default=str),
                "inventory_sha256": None}
    ha = ev.get("ha") or {}
    return {"tool": (ev.get("tool") or {}).get("version"), "cluster": (ev.get("cluster") or {}).get("name"),
            "ha_manager": ha.get("manager"), "ha_version": ha.get("version"),
            "server_version": (ev.get("server") or {}).get("server_version"),
            "settings": json.dumps(ha.get("settings"), sort_keys=True, default=str),
            "inventory_sha256": ((ev.get("inventory") or {}).get("sha256") or "")[:16] or None}


def compare_rows(run_dirs: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per fault of a drill, one per cell of an experiment; and the context fields whose
    values differ between the runs (those are shown: they may explain the difference)."""
    rows: list[dict[str, Any]] = []
    contexts = []
    for d in run_dirs:
        ev = read_run(d)
        ctx = _context(ev)
        contexts.append(ctx)
        if "experiment" in ev:
            exp = ev["experiment"]
            for cell in ev.get("cells") or [{}]:
                what = ", ".join(f"{k}={cell[k]}" for k in ("workload", "workers", "delay_ms", "synchronous_mode",
                                                             "target") if k in cell)
                rows.append({"run": d.name, "name": exp.get("name"), "type": f"experiment ({exp.get('kind')})",
                             "verdict": "INCOMPLETE" if ev.get("incomplete") else
                             "ABORTED" if ev.get("aborted") else "DONE", "what": what,
                             "tps": cell.get("tps"), "p99_ms": cell.get("p99_ms"), "rto_first_client_s": None,
                             "rto_all_clients_s": None, "lost": None,
                             **ctx})
            continue
        res = ev.get("results") or {}
        rpo = res.get("rpo") or {}
        for f in res.get("faults") or [{}]:
            ph = f.get("phases") or {}
            rows.append({"run": d.name, "name": ev["playbook"]["content"]["name"], "type": "drill",
                         "verdict": "INCOMPLETE" if ev.get("incomplete") else verdict_word(res.get("verdict")),
                         "what": fault_name(f) if f else "",
                         "tps": res.get("baseline_tps"), "p99_ms": None,
                         "rto_first_client_s": f.get("rto_first_client_s"),
                         "rto_all_clients_s": f.get("rto_all_clients_s"),
                         "detection_s": ph.get("detection_s"), "promotion_s": ph.get("promotion_s"),
                         "lost": rpo.get("lost_acknowledged"), "phantoms": rpo.get("phantoms"), **ctx})
    differing = [k for k in CONTEXT if len({json.dumps(c.get(k)) for c in contexts}) > 1]
    return rows, differing


def write_compare(rows: list[dict[str, Any]], differing: list[str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out_dir / "compare.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    shown = [k for k in fields if k not in CONTEXT or k in differing]
    html = template_env().get_template("runs.html.j2").render(title="compare", rows=rows, columns=shown,
                                                              differing=differing, csp=CSP)
    (out_dir / "compare.html").write_text(html)


def history(root: Path) -> dict[str, Any]:
    """Every drill under `root`, grouped by cluster and playbook, oldest first. A run is counted
    once however many copies of its directory there are (by run id; a refused run, which has
    none, by run.json's SHA-256): the copies are listed beside it. Every directory is verified, the
    copies too: a run's figures come from a copy that verifies where there is one (`evidence`:
    intact, unsealed, or what changed), each copy's state is in `copies_evidence`, and every
    directory that does not verify, original or copy, is in `not_verified`."""
    groups: dict[str, dict[str, Any]] = {}
    restores: list[dict[str, Any]] = []
    found: dict[str, list[tuple[Path, dict[str, Any], str]]] = {}
    for run_json in sorted(root.glob("*/run.json")):
        try:
            raw = run_json.read_bytes()
            ev = upgrade(json.loads(raw))
        except (OSError, ValueError):
            continue
        if "experiment" in ev or not isinstance(ev.get("playbook"), dict) or "content" not in ev["playbook"]:
            continue
        key = str(ev.get("run_id") or "sha256:" + hashlib.sha256(raw).hexdigest())
        found.setdefault(key, []).append((run_json.parent, ev, _evidence_state(run_json.parent)))
    for dirs in found.values():
        first_intact = next((d for d in dirs if d[2] == "intact"), dirs[0])
        run_dir, ev, state = first_intact
        copies = [d for d in dirs if d is not first_intact]
        res = ev.get("results") or {}
        name = f"{(ev.get('cluster') or {}).get('name')}/{ev['playbook']['content']['name']}"
        entry = groups.setdefault(name, {"cluster": (ev.get("cluster") or {}).get("name"),
                                         "playbook": ev["playbook"]["content"]["name"], "runs": []})
        if res.get("restore"):
            restores.append(_restore_test(run_dir, ev, state))
        entry["runs"].append({
            "run": run_dir.name, "run_id": ev.get("run_id"), "started": ev.get("started"),
            "verdict": listed_verdict(ev),
            "rto_all_clients_s": worst_over_outages(res, "rto_all_clients_s"),
            "lost": (res.get("rpo") or {}).get("lost_acknowledged"), "evidence": state,
            "copies": [c[0].name for c in copies], "copies_evidence": {c[0].name: c[2] for c in copies},
            "not_verified": [d[0].name for d in dirs if d[2] != "intact"]})
    for entry in groups.values():
        runs = sorted(entry["runs"], key=started_key)
        entry["runs"] = runs
        entry["last_drilled"] = runs[-1]["started"]
        entry["last_verdict"] = runs[-1]["verdict"]
        entry["pass_rate"] = pass_rate([r["verdict"] for r in runs])
        entry["rto_all_clients_trend_s"] = [r["rto_all_clients_s"] for r in runs]
        entry["not_verified"] = [name for r in runs for name in r.pop("not_verified")]
    return {"root": str(root), "generated": time.time(), "playbooks": dict(sorted(groups.items())),
            "dr_register": dr_register(restores)}


def listed_verdict(ev: dict[str, Any]) -> Any:
    """A run's verdict as history lists it: refused and incomplete runs say so."""
    if ev.get("refused"):
        return "refused"
    return "incomplete" if ev.get("incomplete") else (ev.get("results") or {}).get("verdict")


def started_key(run: dict[str, Any]) -> float:
    """A listed run's start, for ordering (one without a number first)."""
    return run["started"] if isinstance(run["started"], int | float) else 0


def _restore_test(run_dir: Path, ev: dict[str, Any], state: str) -> dict[str, Any]:
    """One restore drill as the DR register lists it: when, to what, how long, what was lost,
    against the objectives the playbook states, and whether it passed."""
    res = ev.get("results") or {}
    r, rpo = res["restore"], res.get("rpo") or {}
    pitr = rpo.get("pitr") or {}
    slo = res.get("slo") or {}
    return {"run": run_dir.name, "run_id": ev.get("run_id"), "started": ev.get("started"),
            "cluster": (ev.get("cluster") or {}).get("name"), "playbook": ev["playbook"]["content"]["name"],
            "restored_on": r.get("host"), "target": r.get("target_utc") or "latest", "backup": r.get("backup"),
            "restore_ok": r.get("ok"), "restore_s": r.get("restore_s"), "rto_s": r.get("rto_s"),
            "lost_acknowledged": rpo.get("lost_acknowledged"),
            "missing_before_target": pitr.get("missing_before_target"),
            "present_after_target": pitr.get("present_after_target"),
            "data_reaches_s_before_disaster": pitr.get("data_reaches_s_before_disaster"),
            "objectives": {name: {"target": o.get("target"), "measured": o.get("measured"), "ok": o.get("ok")}
                           for name, o in slo.items() if name in ("rto_max", "rpo_max_writes")},
            "verdict": listed_verdict(ev),
            "evidence": state}


def dr_register(restores: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cluster: its last restore test and every one before it (newest first), and its last region
    failover (none recorded yet: chaoskit drills no standby cluster so far)."""
    out: dict[str, Any] = {}
    for r in sorted(restores, key=started_key,
                    reverse=True):
        entry = out.setdefault(str(r["cluster"]), {"last_restore_test": r, "restore_tests": [],
                                                   "last_region_failover": None})
        entry["restore_tests"].append(r)
    return out


def _evidence_state(run_dir: Path) -> str:
    """"intact", "unsealed" (no manifest: the run never finished) or "ALTERED: <first change>"."""
    if not (run_dir / MANIFEST).exists():
        return "unsealed"
    problems = verify(run_dir).problems
    return "intact" if not problems else f"ALTERED: {problems[0]}" + (
        f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")


def write_history(data: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "history.json").write_text(json.dumps(data, indent=2, default=str))
    rows = [{"cluster": e["cluster"], "playbook": e["playbook"], "runs": len(e["runs"]),
             "last drilled": e["last_drilled"], "last verdict": verdict_word(e["last_verdict"]),
             "pass rate": e["pass_rate"],
             "all clients back, trend (s)": ", ".join("—" if v is None else f"{v:.2f}"
                                                      for v in e["rto_all_clients_trend_s"]),
             "not verified": ", ".join(e["not_verified"]) or "none"}
            for e in data["playbooks"].values()]
    columns = ["cluster", "playbook", "runs", "last drilled", "last verdict", "pass rate",
               "all clients back, trend (s)", "not verified"]
    html = template_env().get_template("runs.html.j2").render(title=f"drill history of {data['root']}", rows=rows,
                                                              columns=columns, differing=[], csp=CSP)
    (out_dir / "history.html").write_text(html)
    register = [{"cluster": cluster, **register_row(e["last_restore_test"]),
                 "restore tests": len(e["restore_tests"]),
                 "last region failover": "none recorded" if e["last_region_failover"] is None else "see JSON"}
                for cluster, e in data["dr_register"].items()]
    columns = [*REGISTER_COLUMNS, "restore tests", "last region failover"]
    html = template_env().get_template("runs.html.j2").render(
        title=f"DR-test register of {data['root']}", rows=register, columns=columns, differing=[], csp=CSP)
    (out_dir / "dr-register.html").write_text(html)


REGISTER_COLUMNS = ("cluster", "last restore test", "run", "target", "restore (s)", "RTO from the disaster (s)",
                    "acknowledged writes lost", "objectives", "verdict", "evidence")


def register_row(r: dict[str, Any]) -> dict[str, Any]:
    """The DR register's row of one restore test (its HTML and the console table)."""
    objectives = "; ".join(f"{name} {o['target']}: measured {o['measured']}, {'met' if o['ok'] else 'NOT met'}"
                           for name, o in r["objectives"].items()) or "none stated"
    return {"last restore test": r["started"], "run": r["run"], "target": r["target"], "restore (s)": r["restore_s"],
            "RTO from the disaster (s)": r["rto_s"], "acknowledged writes lost": r["lost_acknowledged"],
            "objectives": objectives, "verdict": verdict_word(r["verdict"]), "evidence": r["evidence"]}
