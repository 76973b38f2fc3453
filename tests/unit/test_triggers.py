"""Steps after an event: what the role probe and the manager report, turned into the trigger words,
and when each armed step fires or is skipped, on hand-written timelines (times in seconds; the
expected instants are read off the timeline, not computed by the code)."""

from __future__ import annotations

import pytest

from chaoskit.drill.triggers import RoleReader, Triggers
from chaoskit.playbook.models import Playbook, Trigger

MEMBERS = ["pg1", "pg2", "pg3"]


def role(t: float, member: str, r: str) -> dict:
    return {"kind": "role", "t": t, "member": member, "role": r}


def manager(t: float, event: str, member: str | None = None) -> dict:
    return {"kind": "manager_event", "t": t, "event": event, "member": member, "source": "etcd-watch"}


START = [role(0.0, "pg1", "primary"), role(0.0, "pg2", "replica"), role(0.0, "pg3", "replica")]


def test_the_role_probe_in_trigger_words() -> None:
    reader = RoleReader()
    seen = [o for ev in [*START, role(12.1, "pg1", "down"), role(22.3, "pg2", "primary"),
                         role(30.0, "pg1", "replica"), role(40.0, "pg2", "replica")]
            for o in reader.feed(ev["t"], ev["member"], ev["role"])]
    assert [(o.t, o.event, o.member) for o in seen] == [
        (12.1, "member_down", "pg1"), (22.3, "promoted", "pg2"), (30.0, "rejoin_started", "pg1"),
        (40.0, "demoted", "pg2")]  # the starting picture itself is no event


def test_a_step_fires_at_the_first_matching_event_after_its_arming_plus_delay() -> None:
    tr = Triggers(MEMBERS)
    tr.observe([*START, role(5.0, "pg3", "down"), role(6.0, "pg3", "replica")])  # before arming: not it
    tr.arm(1, Trigger(event="member_down", delay=0.5, within=30), now=10.0)
    assert tr.decide(now=11.0) == []  # pg3's earlier down is before the arming
    tr.observe([role(12.1, "pg1", "down"), manager(12.2, "leader_lost")])
    decided = tr.decide(now=12.3)
    assert len(decided) == 1 and decided[0].fired
    assert (decided[0].observation.t, decided[0].observation.member, decided[0].t_planned) == (12.1, "pg1", 12.6)
    assert tr.armed == []


def test_member_filter_and_manager_events() -> None:
    tr = Triggers(MEMBERS)
    tr.observe(START)
    tr.arm(2, Trigger(event="promoted", member="pg3", within=30), now=10.0)
    tr.observe([role(20.0, "pg2", "primary"), manager(20.5, "promoted", "pg3")])
    (d,) = tr.decide(now=21.0)
    assert (d.observation.t, d.observation.member, d.observation.source, d.t_planned) == (20.5, "pg3", "etcd-watch",
                                                                                          20.5)


def test_no_event_within_the_deadline_skips_the_step_and_says_why() -> None:
    tr = Triggers(MEMBERS)
    tr.observe(START)
    tr.arm(3, Trigger(event="promoted", within=15), now=10.0)
    assert tr.decide(now=24.9) == []  # still waiting
    tr.observe([role(25.5, "pg2", "primary")])  # too late: after 10 + 15
    (d,) = tr.decide(now=25.6)
    assert not d.fired and d.reason == "no promoted within 15s of arming" and d.armed_at == 10.0
    assert tr.armed == []


def test_cluster_steady_means_settled_again_after_a_disturbance() -> None:
    tr = Triggers(MEMBERS)
    tr.observe(START)
    tr.arm(1, Trigger(event="cluster_steady", within=60), now=12.0)
    assert tr.decide(now=12.05) == []  # steady at arming, not yet disturbed: not fired at once
    tr.observe([role(12.1, "pg1", "down"), role(22.3, "pg2", "primary")])
    assert tr.decide(now=23.0) == []  # pg1 still down
    tr.observe([role(32.4, "pg1", "replica")])
    (d,) = tr.decide(now=32.5)
    assert d.fired and d.observation.t == 32.4  # the instant it settled


def test_a_quiet_cluster_never_fires_cluster_steady() -> None:
    tr = Triggers(MEMBERS)
    tr.observe(START)
    tr.arm(1, Trigger(event="cluster_steady", within=5), now=12.0)
    assert tr.decide(now=16.0) == []
    (d,) = tr.decide(now=17.1)
    assert not d.fired and d.reason == "no cluster_steady within 5s of arming"


BASE = {"name": "p", "cluster": "pg", "load": {"workload": "ledger", "workers": 1}, "baseline": "5s",
        "duration": "30s"}


@pytest.mark.parametrize(("steps", "message"), [
    ([{"after": {"event": "promoted"}, "fault": {"kind": "kill", "target": "pg1"}}], "steps[0] starts at an offset"),
    ([{"at": "10s", "after": {"event": "promoted"}, "fault": {"kind": "kill", "target": "pg1"}}],
     "exactly one of at (an offset) or after"),
    ([{"at": "10s", "fault": {"kind": "kill", "target": "pg1"}},
      {"after": {"event": "elected"}, "fault": {"kind": "kill", "target": "pg2"}}], "Input should be"),
    ([{"at": "10s", "fault": {"kind": "kill", "target": "pg1"}},
      {"after": {"event": "cluster_steady", "member": "pg2"}, "action": {"kind": "rejoin", "target": "pg1"}}],
     "cluster_steady is the whole cluster's"),
    ([{"at": "10s", "fault": {"kind": "kill", "target": "pg1"}},
      {"after": {"event": "promoted", "within": "0s"}, "fault": {"kind": "kill", "target": "pg2"}}],
     "within in (0, 3600s]"),
])
def test_bad_triggers_are_refused(steps: list, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Playbook.model_validate({**BASE, "steps": steps})
