"""Errors by class and phase, worked by hand: load from 100.0, a fault at 110.0 (t_open 109.995),
first client back 114.0, recovered 115.0."""

from __future__ import annotations

from chaoskit.analysis.errors import error_table

FAULT = {"id": "f1", "t_open": 109.995, "t_fault": 110.0, "outage": True, "t_first_ok": 114.0, "t_recovered": 115.0}


def test_errors_by_class_and_phase() -> None:
    errors = [  # (t, worker, kind, outcome, class, message)
        (105.0, 1, "write", "fail", "timeout", "canceling statement"),  # before the fault
        (109.997, 2, "write", "info", "connection_lost", "server closed the connection"),  # after t_open
        (110.5, 1, "write", "fail", "connect_refused", "Connection refused"),
        (113.9, 1, "write", "fail", "connect_refused", "Connection refused (again)"),
        (111.0, 2, "write", "fail", "read_only", "cannot execute INSERT in a read-only transaction"),
        (114.5, 2, "write", "fail", "connect_refused", "Connection refused"),  # back, not yet recovered
        (120.0, 3, "write", "fail", "serialization", "could not serialize"),  # after recovery
    ]
    table = error_table(errors, [FAULT], t0=100.0, dropped=4)
    assert table["dropped"] == 4
    assert table["rows"] == [
        {"fault": None, "phase": "before the fault", "outcome": "fail", "class": "timeout", "count": 1,
         "first_s": 5.0, "last_s": 5.0, "sample": "canceling statement"},
        {"fault": "f1", "phase": "fault to first client back", "outcome": "info", "class": "connection_lost",
         "count": 1, "first_s": -0.003, "last_s": -0.003, "sample": "server closed the connection"},
        {"fault": "f1", "phase": "fault to first client back", "outcome": "fail", "class": "connect_refused",
         "count": 2, "first_s": 0.5, "last_s": 3.9, "sample": "Connection refused"},
        {"fault": "f1", "phase": "fault to first client back", "outcome": "fail", "class": "read_only", "count": 1,
         "first_s": 1.0, "last_s": 1.0, "sample": "cannot execute INSERT in a read-only transaction"},
        {"fault": "f1", "phase": "first client back to recovered", "outcome": "fail", "class": "connect_refused",
         "count": 1, "first_s": 4.5, "last_s": 4.5, "sample": "Connection refused"},
        {"fault": "f1", "phase": "after recovery", "outcome": "fail", "class": "serialization", "count": 1,
         "first_s": 10.0, "last_s": 10.0, "sample": "could not serialize"}]


def test_a_fault_without_outage_has_one_phase_and_no_errors_no_rows() -> None:
    quiet = {"id": "g", "t_open": 110.0, "t_fault": 110.0, "outage": False}
    table = error_table([(111.0, 1, "write", "fail", "timeout", "slow")], [quiet], t0=100.0)
    assert [(r["phase"], r["first_s"]) for r in table["rows"]] == [("during and after the fault", 1.0)]
    assert error_table([], [quiet], t0=100.0) == {"rows": [], "dropped": 0}
