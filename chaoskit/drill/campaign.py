"""A campaign: one drill run N times, each into its own sealed run directory, the cluster waited
for between runs until it is steady again. The loop and its health wait live here, beside the
drill; the figures and the campaign's report are `chaoskit.report.campaign`, the command line's
words are the CLI's (it passes what to say as callbacks)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaoskit.report.campaign import run_figures
from chaoskit.timesource import Held
from chaoskit.topology.roles import steady


def wait_healthy(roles: Callable[[], dict[str, str]], members: int, settle_s: float, hold_s: float = 3.0,
                 sleep: Callable[[float], None] = time.sleep, now: Callable[[], float] = time.time) -> bool:
    """True once the cluster is steady (`topology.roles.steady`), held for `hold_s`; False when
    `settle_s` passed first. A failed look counts as not steady."""
    deadline = now() + settle_s
    held = Held(hold_s)
    while now() < deadline:
        try:
            seen = roles()
        except Exception:
            seen = {}
        if held.look(steady(seen, members), now()):
            return True
        sleep(0.5)
    return False


@dataclass
class Campaign:
    """What the runs gave: each run's figures (`report.campaign.run_figures`), whether one was
    aborted or incomplete (the campaign stops there), and whether the cluster failed to settle."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    aborted: bool = False
    unsettled_after: int | None = None  # the run after which the cluster was not steady within the settle time


def run_campaign(repeat: int, drill_once: Callable[[], Any], roles: Callable[[], dict[str, str]], members: int,
                 settle_s: float, said: Callable[[int, Any, dict[str, Any]], None] | None = None,
                 wait: Callable[..., bool] = wait_healthy) -> Campaign:
    """Up to `repeat` drills, one after the other: before each but the first, the cluster must be
    steady (`roles`, `members`) within `settle_s`, else the campaign stops; a run that was aborted
    or left incomplete stops it too (its directory is sealed all the same). `drill_once` runs one
    drill and returns its sealed run directory (`path`, `evidence`, `aborted`, `incomplete`);
    `said(i, sealed, figures)` is told each run as it ends."""
    out = Campaign()
    for i in range(repeat):
        if i and not wait(roles, members, settle_s):
            out.unsettled_after = i
            break
        sealed = drill_once()
        out.aborted = bool(sealed.aborted or sealed.incomplete)
        out.runs.append(run_figures(sealed.path, sealed.evidence))
        if said is not None:
            said(i, sealed, out.runs[-1])
        if out.aborted:
            break
    return out
