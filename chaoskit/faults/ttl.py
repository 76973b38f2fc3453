"""Every TTL and margin of a fault, in one place.

A fault has two deadlines on its host, both enforced by the host's dead-man:
- the outer bound, `ttl` seconds after the fault was staged (journaled): whatever happens, the
  host reverts it then;
- with a `duration`, the planned end: the host reverts it `duration + DEADMAN_MARGIN_S` after it
  took effect if the controller has not reverted it by then (the controller does it at `duration`).
"""

from __future__ import annotations

DEFAULT_TTL_S = 300.0
MAX_TTL_S = 24 * 3600.0
DEADMAN_MARGIN_S = 2.0  # after the planned end, the host acts on its own
STAGE_AHEAD_S = 1.5  # a drill journals a fault this long before its instant; the instant is one trigger
RELAY_EXTRA_S = 60.0  # a host-side relay outlives its fault's TTL by this much at most (then ends itself)
DRILL_HEAL_MARGIN_S = 60.0  # a drill fault without duration: the drill's remaining time + recovery + this


def drill_fault_ttl(explicit_ttl: float | None, duration: float | None, remaining_s: float,
                    recovery_s: float) -> float:
    """The outer bound for a drill step's fault: the step's own TTL if given; with a duration,
    the planned end plus margins; else (reverted at heal) the drill's remaining time + recovery."""
    if explicit_ttl is not None:
        return explicit_ttl
    if duration is not None:
        return min(MAX_TTL_S, duration + DEADMAN_MARGIN_S + STAGE_AHEAD_S + 5.0)
    return min(MAX_TTL_S, remaining_s + recovery_s + DRILL_HEAL_MARGIN_S)
