"""The run directory of an imported run (`chaoskit import jtl`): run.json, timeline.csv, the same
timeline and latency plots as a drill's, and a report that says what was measured against which
instants and what an import cannot know."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from chaoskit.incomplete import Failures
from chaoskit.recorder import Recorder
from chaoskit.report.plots import latency_histogram, timeline_plot
from chaoskit.report.writer import CSP, METHODOLOGY, template_env, write_in_stages


def write_imported(run: dict[str, Any], rec: Recorder, path: Path) -> dict[str, Any]:
    """The import's files, each a stage (`write_in_stages`); run.json's content, with `incomplete`
    when a stage failed."""
    (path / "plots").mkdir(parents=True, exist_ok=True)
    faults = run["results"]["faults"]

    def plots() -> None:
        timeline_plot(rec.to_frame(), run["started"], faults, path / "plots" / "timeline.png",
                      f"{run['name']} (imported from JMeter): throughput, errors, latency")
        hist = rec.latency_hist()
        latency_histogram([(it.value_iterated_to / 1000, it.count_at_value_iterated_to)
                           for it in hist.get_recorded_iterator()], path / "plots" / "latency_histogram.png")

    def report(r: dict[str, Any], ids: dict[str, Any]) -> str:
        images = {p.stem: base64.b64encode(p.read_bytes()).decode() for p in sorted((path / "plots").glob("*.png"))}
        return template_env().get_template("imported.html.j2").render(r=r, images=images, csp=CSP, ids=ids)

    stages = [("methodology.md", lambda: (path / "methodology.md").write_text(METHODOLOGY.read_text())),
              ("timeline.csv", lambda: rec.write_timeline_csv(str(path / "timeline.csv"), t0=run["started"])),
              ("plots", plots)]
    return write_in_stages(path, run, Failures(), stages, report, "Imported run")
