"""Failover phases, RPO and split-brain on constructed histories whose answers are known."""

from __future__ import annotations

import pytest

from chaoskit.analysis.checks import split_brain
from chaoskit.analysis.failover import NO_MANAGER, analyse_fault, baseline_tps
from chaoskit.analysis.verdict import checked, merge
from chaoskit.ha.base import ManagerEvent
from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, Recorder
from chaoskit.topology.probe import ProbeLog

T0 = 1_800_000_000.0
FAULT = T0 + 20.0


def history() -> tuple[Recorder, ProbeLog]:
    """2 workers writing every 10 ms; the writer dies at +20 s; a new one is writable at +29.5 s."""
    rec = Recorder(T0)
    seq = {1: 0, 2: 0}
    for i in range(4500):
        t = T0 + i / 100
        for w in (1, 2):
            seq[w] += 1
            tw = t + w * 0.003
            if tw < FAULT + 0.004:
                rec.record(w, "write", tw - 0.002, tw, OK, key=seq[w], keyed=SEQUENCE)
            elif tw < T0 + 29.6 + w * 0.1:
                outcome = INFO if abs(tw - (FAULT + 0.006)) < 0.005 else FAIL
                rec.record(w, "write", tw - 0.002, tw, outcome, "connection_lost" if outcome == INFO else
                           "connect_refused", key=seq[w], keyed=SEQUENCE)
            else:
                rec.record(w, "write", tw - 0.002, tw, OK, key=seq[w], keyed=SEQUENCE)
    rec.finish()
    probe = ProbeLog()
    for i in range(450):
        t = T0 + i / 10
        probe.samples.append((t, "pg1", "primary" if t < FAULT + 0.05 else "down"))
        probe.samples.append((t + 0.01, "pg2", "replica" if t < T0 + 29.5 else "primary"))
        leader = "pg1" if t < T0 + 29.3 else "pg2"
        probe.manager.append((t + 0.02, leader, {"pg1": "leader/running", "pg2": "replica/running"}))
    # the manager's poll sees pg2 as leader first at +29.32 s (and an unrelated state event before the fault)
    probe.manager_events.append(ManagerEvent(T0 + 10, "member_state", "patroni-poll", None, "{}", 0.1))
    probe.manager_events.append(ManagerEvent(T0 + 29.32, "leader_changed", "patroni-poll", "pg2", "pg1 -> pg2", 0.1))
    return rec, probe


def test_phases_are_exact_and_ordered() -> None:
    rec, probe = history()
    base = baseline_tps(rec, T0 + 3, T0 + 15)
    assert base == pytest.approx(200, rel=0.02)
    fault = {"id": "f1", "kind": "kill", "host": "pg1", "t_effect": FAULT, "t_reverted": None}
    r = analyse_fault(fault, rec, probe, baseline=base, window_end=T0 + 45, tps_fraction=0.9, hold=3)
    assert r["outage"] and r["old_primary"] == "pg1" and r["new_primary"] == "pg2"
    assert r["t_last_ok"] == pytest.approx(FAULT + 0.003, abs=1e-4)  # worker 1 at +3 ms (t drifts by float sums)
    assert r["t_first_err"] > FAULT
    assert r["t_detect"] == pytest.approx(T0 + 29.32, abs=0.001)  # first manager poll showing pg2 as leader
    assert r["t_promoted"] == pytest.approx(T0 + 29.51, abs=0.001)  # first probe sample: pg2 writable
    assert r["t_first_ok"] == pytest.approx(T0 + 29.701, abs=0.011)
    order = [r[k] for k in ("t_fault", "t_detect", "t_promoted", "t_first_ok", "t_recovered")]
    assert order == sorted(order)
    assert r["rto_first_client_s"] == pytest.approx(r["t_first_ok"] - FAULT, abs=1e-6)  # to the microsecond
    assert "write_gap_s" not in r  # a gap across all clients is an instant no client saw: groups only
    assert set(r["per_client_rto_s"]) == {"1", "2"}
    assert r["t_recovered"] == pytest.approx(r["t_first_ok"] + 1.0, abs=0.15)  # rolling 1 s window refills


def test_no_manager_signal_gives_null_detect_with_reason() -> None:
    rec, probe = history()
    fault = {"id": "f1", "kind": "kill", "host": "pg1", "t_effect": FAULT}
    r = analyse_fault(fault, rec, probe, baseline=200, window_end=T0 + 45, tps_fraction=0.9, hold=3,
                      no_detection=NO_MANAGER)
    assert r["t_detect"] is None and r["phases"]["detection_s"] is None and r["phases"]["promotion_s"] is None
    assert any("no HA manager in this cluster" in n for n in r["notes"])
    assert r["rto_first_client_s"] is not None


def test_fault_without_outage_has_no_phases() -> None:
    rec, probe = history()
    fault = {"id": "f2", "kind": "kill", "host": "pg3", "t_effect": T0 + 5, "t_reverted": T0 + 8}
    r = analyse_fault(fault, rec, probe, baseline=200, window_end=T0 + 10, tps_fraction=0.9, hold=3)
    assert r["outage"] is False and r["rto_first_client_s"] is None and all(v is None for v in r["phases"].values())
    assert r["effect"]["baseline_tps"] == 200 and "dip_depth" in r["effect"]


def test_split_brain_detects_overlap_only() -> None:
    log = ProbeLog()
    for i in range(20):
        t = T0 + i * 0.1
        log.samples.append((t, "a", "primary" if i < 10 else "replica"))
        log.samples.append((t + 0.05, "b", "primary" if i >= 10 else "replica"))
    assert split_brain(log, 0.1)["valid"] is True
    log.samples.append((T0 + 0.52, "b", "primary"))  # b writable while a still is
    log.samples.sort()
    r = split_brain(log, 0.1)
    assert r["valid"] is False and r["overlaps"][0]["members"] == ["a", "b"]


def test_checker_crash_is_unknown_and_merge_is_worst_first() -> None:
    def boom() -> dict:
        raise RuntimeError("kaput")

    v = checked(boom)
    assert v["valid"] == "unknown" and "kaput" in v["error"]
    assert merge([True, "unknown", True]) == "unknown"
    assert merge([True, False, "unknown"]) is False
    assert merge([True, True]) is True


def test_errors_just_before_t_fault_belong_to_the_fault() -> None:
    """The host stamps t_fault after applying; a client can fail a few ms earlier. Its gap counts."""
    rec = Recorder(T0)
    rec.record(1, "write", FAULT - 0.010, FAULT - 0.009, OK)
    rec.record(1, "write", FAULT - 0.004, FAULT - 0.002, FAIL, "connection_lost")  # before t_fault
    rec.record(1, "write", FAULT + 3.0, FAULT + 3.001, OK)  # this worker recovers first
    rec.record(2, "write", FAULT - 0.010, FAULT - 0.008, OK)
    rec.record(2, "write", FAULT + 0.001, FAULT + 0.002, FAIL, "connection_lost")
    rec.record(2, "write", FAULT + 3.5, FAULT + 3.501, OK)
    rec.finish()
    probe = ProbeLog()
    fault = {"id": "f", "kind": "kill", "host": "pg1", "t_effect": FAULT, "t_apply_start": FAULT - 0.003,
             "offset_uncertainty_s": 0.001}
    r = analyse_fault(fault, rec, probe, baseline=None, window_end=FAULT + 10, tps_fraction=0.9, hold=1,
                      no_detection=NO_MANAGER)
    assert set(r["per_client_rto_s"]) == {"1", "2"}
    assert r["t_first_ok"] == pytest.approx(FAULT + 3.001) and r["rto_first_client_s"] == pytest.approx(3.001, abs=1e-6)
    assert r["rto_all_clients_s"] == pytest.approx(3.501, abs=1e-6)  # worker 2, the last one back
    assert r["t_first_err"] == pytest.approx(FAULT - 0.002)


def test_error_rate_slo_starts_where_service_is_back() -> None:
    from chaoskit.analysis.drill import recovery_start as _recovery_start

    recovered = {"t_fault": 100.0, "t_recovered": 112.0, "rto_all_clients_s": 4.0}
    slow = {"t_fault": 100.0, "t_recovered": None, "rto_all_clients_s": 4.5}
    stuck = {"t_fault": 100.0, "t_recovered": None, "rto_all_clients_s": None}  # a client never back
    assert _recovery_start([recovered]) == (112.0, "t_recovered")
    start, anchor = _recovery_start([slow])  # throughput never back to 90 %: judge errors from all clients back
    assert start == 104.5 and anchor.startswith("every client writing again")
    assert _recovery_start([stuck]) == (None, "a client never wrote again")
    assert _recovery_start([recovered, slow])[0] == 112.0


def test_split_brain_joins_one_stretch_and_gives_its_length() -> None:
    # a: primary at 0.0 .. 1.9 (every 0.1 s), replica from 2.0; b: replica until 0.95, primary from
    # 1.05 on. Writable together from b's first primary sample (1.05) to a's first replica sample
    # (2.0): one stretch of 0.95 s, not one entry per probe sample.
    log = ProbeLog()
    for i in range(31):
        t = T0 + i * 0.1
        log.samples.append((t, "a", "primary" if i < 20 else "replica"))
        log.samples.append((t + 0.05, "b", "primary" if i >= 10 else "replica"))
    log.samples.sort()
    r = split_brain(log, 0.1)
    assert r["overlap_count"] == 1
    (o,) = r["overlaps"]
    assert o["members"] == ["a", "b"]
    assert o["from"] == pytest.approx(T0 + 1.05) and o["to"] == pytest.approx(T0 + 2.0)
    assert o["seconds"] == pytest.approx(0.95) and r["overlap_s"] == pytest.approx(0.95)


def _log(samples: list[tuple[float, str, str]]) -> ProbeLog:
    log = ProbeLog()
    log.samples += sorted(samples)
    return log


def test_split_brain_records_by_hand() -> None:
    """Interval 0.5 s. A primary sample is writable until the member's next sample, at most two
    intervals (1.0 s); a member's last sample until one interval after it."""
    # pg1's last sample (primary at 1.0) lasts to 1.5; pg2 primary from 1.1: overlap 1.1-1.5 (0.4 s)
    log = _log([(0.0, "pg1", "primary"), (0.5, "pg1", "primary"), (1.0, "pg1", "primary"),
                (0.1, "pg2", "replica"), (0.6, "pg2", "replica"), (1.1, "pg2", "primary"), (1.6, "pg2", "primary")])
    assert split_brain(log, 0.5) == {"valid": False, "overlap_count": 1, "overlap_s": 0.4, "samples": 7,
                                     "overlaps": [{"members": ["pg1", "pg2"], "from": 1.1, "to": 1.5,
                                                   "seconds": 0.4}]}
    # a gap in pg1's samples (0 -> 3.0) caps its span at two intervals (to 1.0): pg2's primary at 1.2
    # does not overlap it
    log = _log([(0.0, "pg1", "primary"), (3.0, "pg1", "replica"), (1.2, "pg2", "primary"), (1.7, "pg2", "replica")])
    assert split_brain(log, 0.5)["valid"] is True
    # spans that only touch (pg1 to 0.5, pg2 from 0.5) are not an overlap
    log = _log([(0.0, "pg1", "primary"), (0.5, "pg1", "replica"), (0.5, "pg2", "primary"), (1.0, "pg2", "replica")])
    assert split_brain(log, 0.5)["valid"] is True


def test_split_brain_joins_pieces_one_interval_apart_and_rounds() -> None:
    """Interval 0.25: pg1 and pg2 overlap on [0.0, 0.1234] and again on [0.3734, 0.5]: the second
    begins exactly one interval after the first ends, so one stretch from 0.0 to 0.5."""
    log = _log([(0.0, "pg1", "primary"), (0.1234, "pg1", "replica"), (0.3734, "pg1", "primary"),
                (0.5, "pg1", "replica"), (0.0, "pg2", "primary"), (0.25, "pg2", "primary"),
                (0.5, "pg2", "replica")])
    r = split_brain(log, 0.25)
    assert r["overlaps"] == [{"members": ["pg1", "pg2"], "from": 0.0, "to": 0.5, "seconds": 0.5}]
    log = _log([(0.0, "pg1", "primary"), (0.1234, "pg1", "replica"), (0.0, "pg2", "primary"),
                (0.5, "pg2", "replica")])
    assert split_brain(log, 0.25)["overlaps"][0]["seconds"] == 0.123  # 0.1234 to 3 decimals
    # three members, stretches ordered by their start; at most 20 listed, all counted
    many = []
    for i in range(25):
        t = i * 2.0
        many += [(t, "pg1", "primary"), (t + 0.1, "pg1", "replica"), (t, "pg2", "primary"), (t + 0.1, "pg2", "replica")]
    r = split_brain(_log(many), 0.25)
    assert r["overlap_count"] == 25 and len(r["overlaps"]) == 20 and r["overlap_s"] == 2.5
    assert [o["from"] for o in r["overlaps"]][:3] == [0.0, 2.0, 4.0]
    three = _log([(1.0, "pg2", "primary"), (1.5, "pg2", "replica"), (1.0, "pg3", "primary"), (1.5, "pg3", "replica"),
                  (0.0, "pg1", "primary"), (0.5, "pg1", "replica"), (0.0, "pg3", "primary"), (0.5, "pg3", "replica")])
    r = split_brain(three, 0.5)
    assert [(o["members"], o["from"]) for o in r["overlaps"]] == [(["pg1", "pg3"], 0.0), (["pg2", "pg3"], 1.0)]


def test_merge_and_checked() -> None:
    from chaoskit.analysis.verdict import checked, merge

    assert merge([]) is True
    assert merge([True, "odd"]) == "odd"  # anything unrecognised counts as unknown
    assert merge(["odd", False]) is False and merge([True, "unknown", True]) == "unknown"
    r = checked(lambda: 1 / 0)
    assert r["valid"] == "unknown" and r["error"] == "ZeroDivisionError: division by zero"
    assert r["trace"].startswith("Traceback") and "1 / 0" in r["trace"]


def test_split_brain_marks_only_overlaps_inside_the_fault_window() -> None:
    from chaoskit.analysis.drill import mark_split_brain

    def fault() -> dict:
        return {"outcome": "failover", "t_fault": 10.0, "window_end": 20.0}

    touching = {"overlaps": [{"members": ["a", "b"], "from": 9.0, "to": 10.0}, {"members": ["a", "b"], "from": 20.0,
                                                                                  "to": 21.0}]}
    f = fault()
    mark_split_brain(f, touching)
    assert f["outcome"] == "failover"  # one ends at the fault, one starts at the window's end
