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
}

# each SLO key -> the figure it judges
SLO_FIGURE = {"rto_max": "rto_all_clients_s", "rpo_max_writes": "lost_acknowledged",
              "max_error_rate_after_recovery": "error_rate"}


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
