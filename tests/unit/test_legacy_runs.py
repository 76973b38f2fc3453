"""A run.json written before schema 3 (one RTO, `rto_s`, the first client back) still renders:
first client back is its rto_s, all clients back is derived from the per-client RTOs it kept
(their largest; null when a client never came back), rto_max says it judged the first client,
and the report and summary carry the note. The file itself is not rewritten."""

from __future__ import annotations

from pathlib import Path

from chaoskit.report.legacy import upgrade
from chaoskit.report.writer import markdown_env


def schema2() -> dict:
    # fault at +0: worker 1 back at 9.84 s, worker 2 at 10.04 s (deadline group), worker 3 at 9.94 s (pool)
    deadline_fault = {"id": "f", "outage": True, "rto_s": 9.84, "write_gap_s": 10.1,
                      "per_client_rto_s": {"1": 9.84, "2": 10.04}}
    pool_fault = {"id": "f", "outage": True, "rto_s": 9.94, "write_gap_s": 10.0, "per_client_rto_s": {"3": 9.94}}
    return {
        "schema_version": 2, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
            "name": "pg-kill-primary", "description": "", "load": {"workload": "ledger", "workers": 3}}},
        "cluster": {"name": "pg", "engine": "postgres", "ha": "patroni"}, "run_id": "r", "started": 1.0,
        "ended": 2.0,
        "results": {
            "verdict": True,
            "faults": [{"id": "f", "kind": "kill", "target_host": "pg1", "outage": True, "rto_s": 9.84,
                        "write_gap_s": 9.7, "per_client_rto_s": {"1": 9.84, "2": 10.04, "3": 9.94},
                        "phases": {}},
                       {"id": "g", "kind": "kill", "target_host": "pg2", "outage": True, "rto_s": 3.0,
                        "per_client_rto_s": {"1": 3.0, "2": None}, "phases": {}}],
            "groups": {"deadline": {"profile": "deadline", "workers": [1, 2], "rto_s": 9.84, "write_gap_s": 10.1,
                                    "faults": [deadline_fault]},
                       "pool": {"profile": "pool", "workers": [3], "rto_s": 9.94, "write_gap_s": 10.0,
                                "faults": [pool_fault]}},
            "slo": {"rto_max": {"target": 30.0, "measured": 9.94, "ok": True,
                                "by_group": {"deadline": 9.84, "pool": 9.94}}}}}


def test_an_old_run_reads_in_the_current_vocabulary() -> None:
    old = schema2()
    ev = upgrade(old)
    f, g = ev["results"]["faults"]
    assert (f["rto_first_client_s"], f["rto_all_clients_s"]) == (9.84, 10.04)  # max of 9.84, 10.04, 9.94
    assert (g["rto_first_client_s"], g["rto_all_clients_s"]) == (3.0, None)  # worker 2 never came back
    groups = ev["results"]["groups"]
    assert (groups["deadline"]["rto_first_client_s"], groups["deadline"]["rto_all_clients_s"]) == (9.84, 10.04)
    assert (groups["pool"]["rto_first_client_s"], groups["pool"]["rto_all_clients_s"]) == (9.94, 9.94)
    assert ev["results"]["slo"]["rto_max"]["judges"] == "rto_first_client_s"
    assert "schema 2" in ev["legacy_note"] and "first client back" in ev["legacy_note"]
    assert old["results"]["faults"][0]["rto_s"] == 9.84 and "legacy_note" not in old  # the input is untouched
    current = {"schema_version": 3, "results": {"faults": []}}
    assert upgrade(current) is current


def test_an_old_run_renders_with_its_note(tmp_path: Path) -> None:
    text = markdown_env().get_template("summary.md.j2").render(ev=upgrade(schema2()))
    assert "> note: recorded by an earlier chaoskit (run.json schema 2)" in text
    # the SLO says which figure it judged then, with units and the comparator
    assert "| rto_max | first client back | 9.94 s | <= 30.00 s | PASS |" in text
    assert "| kill | pg1 | 9.840 s | 10.040 s |" in text


def test_slo_sentences_name_the_figure_with_unit_and_comparator() -> None:
    from chaoskit.report.vocabulary import slo_sentence, slo_test_name

    assert slo_sentence("rto_max", {"target": 30.0, "measured": 10.04, "ok": True}) == \
        "all clients back 10.04 s <= 30.00 s: PASS (rto_max)"
    assert slo_sentence("rto_max", {"target": 30.0, "measured": None, "ok": False}) == \
        "all clients back — (target <= 30.00 s): FAIL (rto_max)"
    assert slo_sentence("rpo_max_writes", {"target": 5, "measured": 1, "ok": True}) == \
        "acknowledged writes lost 1 write <= 5 writes: PASS (rpo_max_writes)"
    assert slo_sentence("max_error_rate_after_recovery", {"target": 0.01, "measured": 0.0123, "ok": False}) == \
        "error rate after recovery 1.23 % > 1.00 %: FAIL (max_error_rate_after_recovery)"
    assert slo_test_name("rpo_max_writes", {"target": 1200}) == "SLO acknowledged writes lost <= 1,200 writes"


def test_checks_read_as_a_sentence_and_figures_with_units() -> None:
    from chaoskit.report.vocabulary import check_rows, check_sentence

    c = {"valid": True, "acknowledged": 145700, "lost_acknowledged": 1, "rpo_s": 0.0, "lost_ack_window": [1.0, 2.0],
         "lost_ack_window_rel_s": [0.017, 0.017], "lost_by_node": {}, "lost_sample": [[1, 2]], "drift": -3,
         "text": "1 lost, acknowledged between +0.017 s and +0.017 s of the fault", "peak_lag_bytes": 16777216}
    assert check_sentence("rpo", c) == "rpo PASS: 1 lost, acknowledged between +0.017 s and +0.017 s of the fault"
    assert check_rows(c) == [("acknowledged", "145,700"), ("acknowledged writes lost", "1"),
                             ("RPO in time", "0.000 s"),
                             ("lost writes acknowledged, since the fault", "+0.017 s to +0.017 s"),
                             ("lost by node", "none"), ("drift", "-3"), ("peak lag bytes", "16,777,216 bytes")]
    assert check_sentence("bank", {"valid": "unknown", "error": "no writer"}) == "bank UNKNOWN: no writer"
