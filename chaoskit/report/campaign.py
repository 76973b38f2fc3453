"""A campaign: one drill run N times, so an RTO is a distribution rather than one data point.

Between runs the cluster must be healthy again (every member answering, exactly one primary, as the
servers themselves say), checked for at most `settle_s`; the campaign directory holds each run's
directory, `campaign.json` (per run: verdict, RTO, RPO; over the runs: min / median / p95 / max and
the pass rate), a plot and `campaign.html`. The loop over runs and the health wait are
`chaoskit.drill.campaign`; this module makes the figures and the campaign's report.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from chaoskit.report.legacy import upgrade
from chaoskit.report.vocabulary import worst_over_outages
from chaoskit.stats import nearest_rank

FORMAT = "chaoskit-campaign/1"


def distribution(values: list[float | None]) -> dict[str, Any]:
    """min / median / p95 (nearest rank) / max of the runs that have a value; how many have none."""
    have = [v for v in values if v is not None]
    if not have:
        return {"n": 0, "missing": len(values)}
    return {"n": len(have), "missing": len(values) - len(have), "min": round(min(have), 6),
            "median": round(statistics.median(have), 6), "p95": nearest_rank(sorted(have), 95),
            "max": round(max(have), 6)}


def pass_rate(verdicts: list[Any]) -> float | None:
    """Passed among the judged runs (true or false; aborted and undecided runs are not judged)."""
    judged = [v for v in verdicts if v in (True, False)]
    return round(sum(v is True for v in judged) / len(judged), 3) if judged else None


def summarise(playbook: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """runs: per run {run, verdict, rto_all_clients_s, lost, ...}."""
    return {"format": FORMAT, "playbook": playbook, "runs": runs, "repeat": len(runs),
            "passed": sum(r["verdict"] is True for r in runs),
            "pass_rate": pass_rate([r["verdict"] for r in runs]),
            "rto_all_clients_s": distribution([r["rto_all_clients_s"] for r in runs]),
            "lost": distribution([r["lost"] for r in runs])}


def run_figures(run_dir: Path, evidence: dict[str, Any]) -> dict[str, Any]:
    """A run's figures for the campaign: all clients back (the worst over its outages; null if a
    client never came back) and the acknowledged writes lost."""
    evidence = upgrade(evidence)
    res = evidence.get("results") or {}
    return {"run": run_dir.name, "verdict": "incomplete" if evidence.get("incomplete") else
            "aborted" if evidence.get("aborted") else res.get("verdict"),
            "rto_all_clients_s": worst_over_outages(res, "rto_all_clients_s"),
            "lost": (res.get("rpo") or {}).get("lost_acknowledged"),
            "groups_rto_all_clients_s": {n: g.get("rto_all_clients_s") for n, g in (res.get("groups") or {}).items()}}


def write_campaign(summary: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from chaoskit.report.writer import CSP, template_env

    (out / "campaign.json").write_text(json.dumps(summary, indent=2, default=str))
    runs = summary["runs"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    xs = list(range(1, len(runs) + 1))
    ys = [r["rto_all_clients_s"] if r["rto_all_clients_s"] is not None else float("nan") for r in runs]
    colors = ["tab:green" if r["verdict"] is True else "tab:red" for r in runs]
    ax.bar(xs, ys, color=colors)
    if summary["rto_all_clients_s"].get("n"):
        ax.axhline(summary["rto_all_clients_s"]["median"], color="gray", linestyle="--", label="median")
        ax.legend()
    ax.set_xlabel("run")
    ax.set_ylabel("all clients back (s)")
    ax.set_title(f"{summary['playbook']}: RTO, all clients back, per run (green passed, red failed)")
    ax.set_xticks(xs)
    fig.tight_layout()
    fig.savefig(out / "campaign_rto.png", dpi=100)
    plt.close(fig)
    import base64

    image = base64.b64encode((out / "campaign_rto.png").read_bytes()).decode()
    html = template_env().get_template("campaign.html.j2").render(c=summary, image=image, csp=CSP)
    (out / "campaign.html").write_text(html)
