"""One name per figure, shown the same way on the terminal, in the report, summary.md, JUnit and
CSV headers: the key run.json uses, the words a reader sees, and the unit. An SLO is shown as the
figure it judges, its comparator and target ("all clients back 10.04 s <= 30 s: PASS")."""

from __future__ import annotations

from typing import Any

# key in run.json -> (words, unit)
FIGURES: dict[str, tuple[str, str]] = {
    "rto_first_client_s": ("first client back", "s"),
    "rto_all_clients_s": ("all clients back", "s"),
    "write_gap_s": ("write gap", "s"),
    "lost_acknowledged": ("acknowledged writes lost", "writes"),
    "error_rate": ("error rate after recovery", "%"),
    "restore.rto_s": ("restore RTO (the disaster to the restored server taking a write)", "s"),
}

# each SLO key -> the figure it judges
SLO_FIGURE = {"rto_max": "rto_all_clients_s", "rpo_max_writes": "lost_acknowledged",
              "max_error_rate_after_recovery": "error_rate"}


def worst_over_outages(results: dict[str, Any], key: str) -> float | None:
    """A run's figure (`rto_first_client_s`, `rto_all_clients_s`) as one number: the worst over the
    faults that caused an outage; None when there was none, or when one of them never ended."""
    values = [f.get(key) for f in results.get("faults") or [] if f.get("outage")]
    return None if not values or None in values else max(values)


def label(key: str) -> str:
    return FIGURES.get(key, (key, ""))[0]


def shown(key: str, value: Any) -> str:
    """A value with its unit: "10.04 s", "1 write", "1,234 writes", "0.55 %"; "—" when missing."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    unit = FIGURES.get(key, ("", ""))[1]
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "%":
        return f"{value * 100:.2f} %"
    if unit == "writes":
        return f"{value:,} write" + ("" if value == 1 else "s")
    return f"{value:,}"


def verdict_word(v: Any) -> str:
    return {True: "PASS", False: "FAIL"}.get(v, str(v).upper())


def slo_figure(name: str, s: dict[str, Any]) -> str:
    """The figure an SLO judges as recorded (a run.json of schema 2 judged another one for
    `rto_max`: its `judges` says which)."""
    return s.get("judges") or SLO_FIGURE.get(name, name)


def slo_sentence(name: str, s: dict[str, Any]) -> str:
    """"all clients back 10.04 s <= 30.00 s: PASS (rto_max)"; a miss reads "41.20 s > 30.00 s", a
    figure never measured "— (target <= 30.00 s)"."""
    key = slo_figure(name, s)
    measured, target = shown(key, s.get("measured")), shown(key, s.get("target"))
    if s.get("measured") is None:
        compared = f"{measured} (target <= {target})"
    else:
        compared = f"{measured} {'<=' if s.get('ok') is True else '>'} {target}"
    return f"{label(key)} {compared}: {verdict_word(s.get('ok'))} ({name})"


def slo_test_name(name: str, s: dict[str, Any]) -> str:
    """A JUnit case name a CI page can show: "SLO all clients back <= 30.00 s"."""
    key = slo_figure(name, s)
    return f"SLO {label(key)} <= {shown(key, s.get('target'))}"


# fields of a check that are data for machines (samples, absolute epoch instants), not for a reader
_CHECK_HIDDEN = {"valid", "text", "error", "lost_sample", "phantom_sample", "lost_keys", "lost_ack_window", "trace",
                 "violations", "allowed",  # anomalies: each in a table of its own
                 "phases", "examples", "pairs"}  # stale reads: a table by phase, examples beside it


def figure_value(key: str, value: Any) -> str:
    """Any recorded figure for a reader: seconds and bytes with their unit, counts with thousands
    separators, yes/no for booleans, a list or mapping summarised."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if key.endswith("_s"):
            return f"{value:.3f} s"
        if key.endswith("_bytes"):
            return f"{value:,} bytes"
        if key.endswith("_rate") or key == "error_rate":
            return f"{value * 100:.2f} %"
        return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"
    if not value and isinstance(value, dict | list):
        return "none"
    if isinstance(value, dict):
        return "; ".join(f"{k} {figure_value(str(k), v) if not isinstance(v, dict | list) else _brief(v)}"
                         for k, v in list(value.items())[:8]) + ("; …" if len(value) > 8 else "")
    if isinstance(value, list):
        return _brief(value)
    return str(value)


def _brief(value: Any) -> str:
    if isinstance(value, list):
        if all(isinstance(x, int | float) for x in value) and len(value) == 2:
            return f"{value[0]:+.3f} s to {value[1]:+.3f} s" if all(isinstance(x, float) for x in value) else \
                f"{value[0]} to {value[1]}"
        return f"{len(value)} item{'s' if len(value) != 1 else ''}" if value and isinstance(value[0], dict | list) \
            else ", ".join(str(x) for x in value[:10]) + (", …" if len(value) > 10 else "")
    return f"{len(value)} entries"


def check_sentence(name: str, c: dict[str, Any]) -> str:
    """A check in one sentence: its own words where it has them."""
    said = c.get("text") or c.get("error")
    return f"{name} {verdict_word(c.get('valid'))}" + (f": {said}" if said else "")


def check_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """A check's figures as (words, value with unit) rows, machine-only fields left out."""
    return [(_CHECK_WORDS.get(k, k.replace("_", " ")), figure_value(k, v)) for k, v in c.items()
            if k not in _CHECK_HIDDEN]


_CHECK_WORDS = {"rpo_s": "RPO in time", "lost_ack_window_rel_s": "lost writes acknowledged, since the fault",
                "lost_acknowledged": "acknowledged writes lost", "overlap_s": "overlap", "waited_s": "waited",
               "stopped_early": "stopped waiting"}


GLOSSARY: tuple[tuple[str, str], ...] = (
    ("T_fault", "the instant the fault took effect, stamped on its host right after the decisive command, "
                "corrected by the measured clock offset"),
    ("first client back", "RTO for the first client: its first acknowledged write after the fault, minus T_fault"),
    ("all clients back", "RTO for the last client that lost service; what the rto_max SLO judges"),
    ("write gap", "in one client group: from its last write before the outage to its first after it"),
    ("detection", "T_detect - T_fault: until the HA manager's first reaction"),
    ("promotion", "T_promoted - T_detect: until a member is writable again"),
    ("reconnect", "T_first_ok - T_promoted: until a client's write succeeds"),
    ("stabilisation", "T_recovered - T_first_ok: until throughput holds at its threshold of the baseline"),
    ("acknowledged writes lost (RPO)", "writes the cluster acknowledged to a client and that are not there "
                                       "after recovery"),
    ("indeterminate", "a write whose outcome the client could not know (the connection was lost at commit); "
                      "either outcome is legal"),
    ("phantom", "a row present that was never acknowledged nor indeterminate: always a failure"),
    ("split-brain", "two members answering as writable primaries at the same time"),
    ("client group", "clients of one kind (deadline, pool, per-op), each with its own figures"),
)


def fault_name(f: dict[str, Any]) -> str:
    """A disturbance as every part of the evidence names it: "kill on pg3", and the faults of the
    same step started with it: "kill on pg3 with kill on pg1"."""
    name = f"{f.get('kind')} on {f.get('target_host')}"
    together = [f"{o.get('kind')} on {o.get('host')}" for o in f.get("together_with") or ()]
    return name + (" with " + ", ".join(together) if together else "")


def group_maker(g: dict[str, Any]) -> str:
    """Who made a group's load: its profile, or the external tool (and the profile its connections
    had, where chaoskit's profiles shape them)."""
    from chaoskit.workload.engine import BUILTIN, measures

    tool = g.get("tool") or BUILTIN
    if tool == BUILTIN:
        return str(g.get("profile"))
    return f"{tool}, {g.get('profile')} connections" if measures(tool).profiles else tool


PHASE_WORDS = {"fetch_and_restore_files": "fetch and restore files", "start": "server start",
               "replay": "WAL replay", "open": "end of recovery to open", "answering": "open to taking a write"}


def seconds(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f} s"


def restore_lines(r: dict[str, Any] | None, pitr: dict[str, Any] | None = None) -> list[str]:
    """A restore drill's figures in sentences (`results.restore`, and the rpo check's `pitr`)."""
    if not r:
        return []
    said = r.get("target_said")
    to = (f"{r['target_utc']}" + (f" ({said['before']:g} s before steps[{said['step']}])"
                                        if isinstance(said, dict) and said.get("step") is not None else "")
          if r.get("target_utc") else "the latest archived change")
    if not r.get("ok"):
        return [f"restore on {r.get('host')} to {to}: FAILED: {r.get('answer')}"]
    out = [f"restore on {r.get('host')} to {to} from backup {r.get('backup') or '—'}: taking writes after "
           f"{seconds(r.get('restore_s'))}; restore RTO {seconds(r.get('rto_s'))} from the disaster"]
    if r.get("phases"):
        out.append("  phases: " + ", ".join(f"{PHASE_WORDS.get(p['phase'], p['phase'])} {p['seconds']:.2f} s"
                                           for p in r["phases"]))
    if pitr and pitr.get("target") is not None:
        out.append(f"  PITR: {pitr['missing_before_target']:,} of {pitr['acknowledged_before_target']:,} writes "
                   f"acknowledged before the target missing (must be 0); {pitr['present_after_target']:,} started "
                   f"after it present (must be 0); {pitr['lost_after_target']:,} acknowledged after it not restored "
                   f"(the target's choice); {pitr['around_target']:,} in flight at it "
                   f"({pitr['around_target_present']:,} present)"
                   + (f"; the data reaches to {pitr['data_reaches_s_before_disaster']:.3f} s before the disaster"
                      if pitr.get("data_reaches_s_before_disaster") is not None else ""))
    arch = r.get("archive_at_disaster") or {}
    if arch.get("last_archived"):
        out.append(f"  archive at the disaster: last archived {arch['last_archived']}"
                   + (f", {arch['archive_age_s']:.3f} s old" if arch.get("archive_age_s") is not None else "")
                   + (f" (the primary was writing {arch['current_segment']})" if arch.get("current_segment") else ""))
    for b in r.get("backups_taken") or []:
        out.append(f"  backup {b.get('label') or '—'} ({b.get('type')}): "
                   + (f"{b['seconds']:.2f} s" if b.get("ok") and b.get("seconds") is not None else "FAILED"))
    return out


def archive_line(a: dict[str, Any] | None) -> str | None:
    """The archive over the run (`results.archive`) in one sentence."""
    if not a:
        return None
    out = f"archive: {a['readings']} readings of the primary's archiver"
    if a.get("max_age_s") is not None:
        out += f"; the archive at most {a['max_age_s']:.1f} s behind (+{a['max_age_at_s']:.1f} s into the run)"
    if a.get("over_archive_timeout"):
        out += f"; older than archive_timeout ({a['archive_timeout_s']:g} s) " + ", ".join(
            f"from +{f:.1f} s" + (f" to +{to:.1f} s" if to is not None else " to the last reading")
            for f, to in a["over_archive_timeout"])
    if a.get("failing"):
        out += "; archiving failed " + ", ".join(
            f"from +{f:.1f} s" + (f" to +{to:.1f} s" if to is not None else " to the end") for f, to in a["failing"])
    if a.get("unread"):
        out += f"; {a['unread']} readings not taken (the primary did not answer)"
    return out
