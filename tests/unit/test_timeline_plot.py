"""The timeline plot draws every lane it is given: throughput, errors, latency, one role lane per
member and the lag lane, on an axis in seconds since the fault; without roles, three panels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg

from chaoskit.recorder import FAIL, INFO, OK, Recorder
from chaoskit.report.plots import timeline_plot

T0 = 1_800_000_000.0
FAULT = T0 + 10.0


def frame():
    rec = Recorder(T0, interval=0.1)
    for k in range(300):  # 30 s: 10 writes/s; refused from +0.5 to +4.0 s after the fault, one unknown at +0.1
        t = T0 + k * 0.1
        outcome = FAIL if FAULT + 0.5 <= t < FAULT + 4.0 else INFO if abs(t - FAULT - 0.1) < 0.01 else OK
        rec.record(1, "write", t, t + 0.002, outcome, None if outcome == OK else "connect_refused")
    rec.finish()
    return rec.to_frame()


def test_the_plot_has_its_lanes(tmp_path: Path) -> None:
    faults = [{"kind": "kill", "target_host": "pg1", "t_fault": FAULT, "outage": True, "t_first_ok": FAULT + 4.0,
               "t_detect": FAULT + 3.0, "t_promoted": FAULT + 3.9, "t_recovered": FAULT + 5.0,
               "t_reverted": FAULT + 10.0}]
    roles = [(T0, "pg1", "primary"), (T0, "pg2", "replica"), (FAULT + 0.05, "pg1", "down"),
             (FAULT + 3.9, "pg2", "primary"), (FAULT + 15.0, "pg1", "replica")]
    lag = [(T0 + i, {"pg2": 1000 * i if i < 10 else None, "pg1": None if i < 25 else 0}) for i in range(30)]
    full, short = tmp_path / "full.png", tmp_path / "short.png"
    timeline_plot(frame(), T0, faults, full, "t", roles=roles, lag=lag)
    timeline_plot(frame(), T0, faults, short, "t")
    a, b = mpimg.imread(full), mpimg.imread(short)
    assert a.std() > 0 and b.std() > 0
    assert a.shape[0] > b.shape[0] * 1.3  # two more panels: roles and lag


def test_the_cpu_panel_sits_under_the_throughput(tmp_path: Path) -> None:
    """With each host's CPU given, one more panel (the figure grows by it) and the rest still drawn."""
    faults = [{"kind": "stress", "target_host": "pg3", "t_fault": FAULT, "t_reverted": FAULT + 6.0}]
    cpu = {"pg3": [(T0 + i, 50.0 if 10 <= i < 16 else 1.0) for i in range(30)],
           "control": [(T0 + i, 55.0 if 10 <= i < 16 else 5.0) for i in range(30)]}
    with_cpu, without = tmp_path / "cpu.png", tmp_path / "plain.png"
    timeline_plot(frame(), T0, faults, with_cpu, "t", cpu=cpu)
    timeline_plot(frame(), T0, faults, without, "t")
    a, b = mpimg.imread(with_cpu), mpimg.imread(without)
    assert a.std() > 0 and a.shape[0] > b.shape[0] * 1.2  # 4 panels against 3
