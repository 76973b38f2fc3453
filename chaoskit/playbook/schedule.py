"""The drill's schedule as a pure function of the playbook and the load's start instant.

A host fault is staged (journaled on its host, dead-man armed, pids checked) `STAGE_AHEAD_S`
before its instant, so the instant itself is one trigger; a fault on the load's own link
(`target: client`) and actions happen at their instant. Reverts of faults with a duration are
added once the fault has taken effect (at its effect time + duration), by the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chaoskit.faults.spec import CLIENT
from chaoskit.faults.targets import split_target
from chaoskit.faults.ttl import STAGE_AHEAD_S
from chaoskit.playbook.models import Playbook


class Do(StrEnum):
    """What a schedule item does."""

    STAGE = "stage"
    TRIGGER = "trigger"
    ACTION = "action"
    REVERT = "revert"


# items due at the same instant: a fault is staged before any trigger or action (those two in step
# order), and reverted after them
ORDER = {Do.STAGE: 0, Do.TRIGGER: 1, Do.ACTION: 1, Do.REVERT: 2}


@dataclass(frozen=True, order=True)
class Item:
    t: float
    order: int
    step: int
    what: Do

    @classmethod
    def of(cls, t: float, what: Do, step: int) -> Item:
        return cls(t, ORDER[what], step, what)


def plan(pb: Playbook, t0: float, stage_ahead: float = STAGE_AHEAD_S) -> list[Item]:
    items = []
    for i, step in enumerate(pb.steps):
        if step.at is None:
            continue
        t = t0 + step.at
        if not step.specs:
            items.append(Item.of(t, Do.ACTION, i))
            continue
        if any(split_target(f.target)[0] != CLIENT for f in step.specs):
            items.append(Item.of(max(t0, t - stage_ahead), Do.STAGE, i))
        items.append(Item.of(t, Do.TRIGGER, i))
    return sorted(items)


def revert_item(step: int, t: float) -> Item:
    return Item.of(t, Do.REVERT, step)


def step_items(step_no: int, is_fault: bool, now: float, t: float) -> list[Item]:
    """The items of a step decided at run time (after an event): a fault staged `now`, done at `t`."""
    if not is_fault:
        return [Item.of(t, Do.ACTION, step_no)]
    return [Item.of(now, Do.STAGE, step_no), Item.of(t, Do.TRIGGER, step_no)]
