"""Steps that start after something the cluster did, not at a fixed offset.

A step with `after: {event, member, delay, within}` is armed once the step before it has started
(fired, or was skipped). From then on the drill's observations are read in time order: the HA
manager's own events (as each manager reports them) and what the role probe saw, turned into the
same words: `promoted` (a member became the writable primary), `demoted` (a primary became
read-only), `member_down` (a member stopped answering), `rejoin_started` (a member that was the
primary earlier in the drill follows another one: streaming again or being rewound),
`cluster_steady` (the cluster settled again: one primary, every member answering, after the
probe saw it otherwise since the step was armed; a step armed on a cluster nothing disturbs is
skipped at its deadline, never fired at once). The first match at or after the arming
instant decides the step's instant (event + delay); none by `armed + within`: the step is
skipped, and the record says so. Pure: the runner feeds observations and a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaoskit.playbook.models import Trigger
from chaoskit.topology.roles import steady


@dataclass(frozen=True)
class Observation:
    """One thing seen, in the trigger vocabulary, on the control clock."""

    t: float
    event: str
    member: str | None
    source: str  # the manager's source (etcd-watch, monitor-events, ...) or role-probe


def describe_trigger(trigger: Trigger) -> str:
    who = f" of {trigger.member}" if trigger.member else ""
    delay = f" + {trigger.delay:g}s" if trigger.delay else ""
    return f"after {trigger.event}{who}{delay} (within {trigger.within:g}s)"


@dataclass
class RoleReader:
    """Role-probe transitions turned into observations; remembers who was ever the primary."""

    roles: dict[str, str] = field(default_factory=dict)
    ever_primary: set[str] = field(default_factory=set)

    def feed(self, t: float, member: str, role: str) -> list[Observation]:
        before = self.roles.get(member)
        self.roles[member] = role
        if before == role:
            return []
        out = []
        if role == "primary":
            if before is not None:  # the first sample of a member is the drill's starting picture
                out.append(Observation(t, "promoted", member, "role-probe"))
            self.ever_primary.add(member)
        elif before == "primary" and role == "replica":
            out.append(Observation(t, "demoted", member, "role-probe"))
        if role == "down" and before is not None:
            out.append(Observation(t, "member_down", member, "role-probe"))
        if role == "replica" and member in self.ever_primary and before != "primary":
            out.append(Observation(t, "rejoin_started", member, "role-probe"))
        return out

    def steady(self, members: Iterable[str]) -> bool:
        """The members as the probe last saw them make a steady cluster (`topology.roles.steady`);
        a member not seen yet is not answering."""
        wanted = list(members)
        return steady({m: self.roles[m] for m in wanted if m in self.roles}, len(wanted))


def from_event(ev: dict[str, Any], reader: RoleReader) -> list[Observation]:
    """Observations of one recorded event (a manager event or a role change); others: none."""
    if ev.get("kind") == "manager_event":
        return [Observation(ev["t"], ev["event"], ev.get("member"), ev.get("source") or "manager")]
    if ev.get("kind") == "role":
        return reader.feed(ev["t"], ev["member"], ev["role"])
    return []


@dataclass
class Armed:
    """A step waiting for its event."""

    step: int
    trigger: Trigger
    armed_at: float
    disturbed: bool = False  # the probe saw the cluster not steady since arming

    @property
    def deadline(self) -> float:
        return self.armed_at + self.trigger.within

    def matches(self, ob: Observation) -> bool:
        return (ob.t >= self.armed_at and ob.event == self.trigger.event
                and (self.trigger.member is None or ob.member == self.trigger.member))


@dataclass(frozen=True)
class Decision:
    """What became of an armed step: `fired` at `t_event` (by `observation`), planned for
    `t_planned` (event + delay); or skipped at its deadline."""

    step: int
    fired: bool
    armed_at: float
    t_planned: float | None = None
    observation: Observation | None = None
    reason: str = ""

    def to_event(self) -> dict[str, Any]:
        if self.fired:
            assert self.observation is not None
            return {"step": self.step, "armed_at": self.armed_at, "event": self.observation.event,
                    "member": self.observation.member, "source": self.observation.source,
                    "t_event": self.observation.t, "planned": self.t_planned}
        return {"step": self.step, "armed_at": self.armed_at, "reason": self.reason}


class Triggers:
    """The armed steps of one drill and the observations read so far."""

    def __init__(self, members: list[str]) -> None:
        self.members = members
        self.reader = RoleReader()
        self.seen: list[Observation] = []
        self.armed: list[Armed] = []
        self.steady_since: float | None = None

    def observe(self, events: Iterable[dict[str, Any]]) -> None:
        for ev in events:
            self.seen.extend(from_event(ev, self.reader))
            if ev.get("kind") != "role":
                continue
            if self.reader.steady(self.members):
                self.steady_since = self.steady_since or ev["t"]
            else:
                self.steady_since = None
                for a in self.armed:
                    a.disturbed = a.disturbed or ev["t"] >= a.armed_at

    def arm(self, step: int, trigger: Trigger, now: float) -> None:
        self.armed.append(Armed(step, trigger, now, disturbed=not self.reader.steady(self.members)))

    def decide(self, now: float) -> list[Decision]:
        """Every armed step whose event was seen (the first at or after its arming) or whose
        deadline passed; `cluster_steady` is the role picture at `now`."""
        out = []
        for a in list(self.armed):
            if a.trigger.event == "cluster_steady":
                ob: Observation | None = None
                if a.disturbed and self.steady_since is not None:
                    ob = Observation(max(self.steady_since, a.armed_at), "cluster_steady", None, "role-probe")
            else:
                ob = next((o for o in sorted(self.seen, key=lambda o: o.t) if a.matches(o)), None)
            if ob is not None and ob.t <= a.deadline:
                out.append(Decision(a.step, True, a.armed_at, ob.t + a.trigger.delay, ob))
            elif now > a.deadline:
                who = f" of {a.trigger.member}" if a.trigger.member else ""
                out.append(Decision(a.step, False, a.armed_at,
                                    reason=f"no {a.trigger.event}{who} within {a.trigger.within:g}s of arming"))
            else:
                continue
            self.armed.remove(a)
        return out
