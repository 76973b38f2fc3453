"""The run directory of an imported run (`chaoskit import jtl`): run.json, timeline.csv, the same
timeline and latency plots as a drill's, and a report that says what was measured against which
instants and what an import cannot know."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from chaoskit.recorder import Recorder
from chaoskit.report.plots import latency_histogram, timeline_plot
from chaoskit.report.rundir import clean, evidence_ids
from chaoskit.report.writer import CSP, METHODOLOGY, template_env


def write_imported(run: dict[str, Any], rec: Recorder, path: Path) -> None:
    (path / "plots").mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps(clean(run), indent=2, default=str))
    (path / "methodology.md").write_text(METHODOLOGY.read_text())
    rec.write_timeline_csv(str(path / "timeline.csv"), t0=run["started"])
    faults = run["results"]["faults"]
    timeline_plot(rec.to_frame(), run["started"], faults, path / "plots" / "timeline.png",
                  f"{run['name']} (imported from JMeter): throughput, errors, latency")
    hist = rec.latency_hist()
    latency_histogram([(it.value_iterated_to / 1000, it.count_at_value_iterated_to)
                       for it in hist.get_recorded_iterator()], path / "plots" / "latency_histogram.png")
    images = {p.stem: base64.b64encode(p.read_bytes()).decode() for p in sorted((path / "plots").glob("*.png"))}
    html = template_env().get_template("imported.html.j2").render(r=run, images=images, csp=CSP,
                                                                  ids=evidence_ids(path))
    (path / "report.html").write_text(html)
    for p in path.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
