"""What happened, in words and time order, from hand-written events: a kill of pg1 at T, the
manager's reaction, the role changes, the marks, the revert and the steady cluster."""

from __future__ import annotations

import json
from pathlib import Path

from chaoskit.report.narrative import narrative, phases_in_words, read_events

T = 1_800_000_010.0


def test_events_in_words_since_the_fault(tmp_path: Path) -> None:
    events = [
        {"kind": "load_started", "t": T - 12.0, "workers": 8, "workload": "ledger"},
        {"kind": "role", "t": T - 11.0, "member": "pg1", "previous": None, "role": "primary"},  # first sight: no change
        {"kind": "manager_members", "t": T - 10.0, "members": {}},  # polled states: not told
        {"kind": "fault_injected", "t": T, "fault_kind": "kill", "host": "pg1"},
        {"kind": "role", "t": T + 0.052, "member": "pg1", "previous": "primary", "role": "down"},
        {"kind": "manager_event", "t": T + 9.904, "source": "etcd-watch", "detail": "leader key deleted"},
        {"kind": "phase_mark", "t": T + 10.289, "mark": "t_first_ok"},
        {"kind": "phase_mark", "t": T, "mark": "t_fault"},  # the fault itself is told once, above
        {"kind": "fault_reverted", "t": T + 20.193, "host": "pg1", "by": "controller"},
        {"kind": "cluster_steady", "t": T + 27.982, "roles": {"pg2": "primary", "pg1": "replica"}},
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\nnot json\n")
    ev = {"results": {"faults": [{"t_fault": T}]}}
    assert narrative(read_events(tmp_path), ev) == [
        {"t_s": -12.0, "what": "load started (8 clients, ledger)"},
        {"t_s": 0.0, "what": "fault: kill on pg1 took effect"},
        {"t_s": 0.052, "what": "pg1: primary -> down"},
        {"t_s": 9.904, "what": "HA manager (etcd-watch): leader key deleted"},
        {"t_s": 10.289, "what": "mark: first client back"},
        {"t_s": 20.193, "what": "fault on pg1 reverted (by controller)"},
        {"t_s": 27.982, "what": "cluster steady: pg1 replica, pg2 primary"}]


def test_phases_with_the_bound_from_the_managers_settings() -> None:
    ev = {"detection_bound_s": 11.0, "ha": {"manager": "patroni", "settings": {"ttl": 10, "loop_wait": 1,
                                                                                "use_pg_rewind": True}},
          "results": {"faults": [{"kind": "kill", "target_host": "pg1", "outage": True,
                                  "phases": {"detection_s": 9.904, "promotion_s": 0.36, "reconnect_s": None,
                                             "stabilisation_s": 0.571}},
                                 {"kind": "kill", "target_host": "pg3", "outage": False}]}}
    assert phases_in_words(ev) == ["kill on pg1: detection 9.90 s (bound 11.0 s from patroni's settings: ttl 10, "
                                   "loop_wait 1), promotion 0.36 s, stabilisation 0.57 s"]


def test_log_quotes_link_only_files_of_the_run_directory() -> None:
    from chaoskit.report.narrative import log_quotes

    ev = {"logs": [{"host": "pg1", "label": "postgres", "file": "logs/pg1/postgres.log", "complaints": ["FATAL: x"]},
                   {"host": "pg2", "label": "postgres", "file": "javascript:alert(1)", "complaints": ["FATAL: y"]},
                   {"host": "pg3", "label": "postgres", "file": "logs/../../etc/passwd", "complaints": ["z"]},
                   {"host": "pg4", "label": "patroni", "file": "logs/pg4/patroni.log", "complaints": []}]}
    assert [(q["host"], q["file"]) for q in log_quotes(ev)] == [
        ("pg1", "logs/pg1/postgres.log"), ("pg2", None), ("pg3", None)]
