"""Observations on a PASS, worked by hand: asynchronous replication (Patroni's synchronous_mode
off, synchronous_standby_names empty), the pool clients lost 1 write acknowledged by pg1 17 ms
after the kill, the deadline clients none; 2 commits had an unknown outcome, 1 found."""

from __future__ import annotations

from chaoskit.report.observations import observations


def ev(synchronous: bool = False) -> dict:
    return {"server": {"synchronous_standby_names": "pg2" if synchronous else ""},
            "ha": {"settings": {"synchronous_mode": synchronous}},
            "results": {"verdict": True,
                        "rpo": {"lost_acknowledged": 1, "indeterminate": 2, "indeterminate_found": 1},
                        "groups": {"deadline": {"rpo": {"lost_acknowledged": 0}},
                                   "pool": {"rpo": {"lost_acknowledged": 1, "lost_by_node": {"pg1": 1},
                                                    "lost_ack_window_rel_s": [0.017, 0.017]}}},
                        "slo": {"rpo_max_writes": {"target": 5, "measured": 1, "ok": True}}}}


def test_a_lost_write_on_pass_is_explained() -> None:
    assert observations(ev()) == [
        "1 acknowledged write of the pool clients lost on pg1 (1), acknowledged +0.017 s to +0.017 s after the fault "
        "took effect (the old primary still acknowledged commits after it was struck); replication was asynchronous "
        "(synchronous_standby_names is empty, Patroni's synchronous_mode is off): the primary acknowledged commits "
        "no standby had received yet, and a failover to a standby loses them by design; within the target of 5 "
        "(rpo_max_writes).",
        "2 writes had an unknown outcome (the connection was lost at commit): 1 found afterwards, 1 not; either is "
        "legal, neither counts as lost."]


def test_no_asynchronous_reason_is_invented() -> None:
    first = observations(ev(synchronous=True))[0]
    assert "asynchronous" not in first and first.endswith("within the target of 5 (rpo_max_writes).")
    quiet = ev()
    quiet["results"] = {"verdict": True, "rpo": {"lost_acknowledged": 0, "indeterminate": 0}}
    assert observations(quiet) == []
