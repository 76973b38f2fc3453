"""The headline rows, pinned against a run.json worked out by hand: a kill of pg1 at
T = 1,800,000,010.0 (10.0 s into a run that started at T - 10 and ended at T + 50), two client
groups, 3 writes lost (2 by the deadline group, 1 by the pool, all acknowledged by pg1), pg2
promoted, pg1 a replica again at T + 26.5."""

from __future__ import annotations

from pathlib import Path

from chaoskit.report.headline import headline
from chaoskit.report.writer import markdown_env

T = 1_800_000_010.0


def run() -> dict:
    return {
        "schema_version": 3, "started": T - 10, "ended": T + 50, "operator": "dba@ops",
        "environment": {"name": "staging", "from": "the env tags of the cluster and its hosts"},
        "faults_injected": [{"kind": "kill", "host": "pg1", "t_effect": T}], "actions": [],
        "results": {
            "verdict": False,
            "faults": [{"outage": True, "rto_first_client_s": 9.84, "rto_all_clients_s": 10.04, "t_fault": T,
                        "outcome": "failover", "outcome_text": "failover from pg1 to pg2",
                        "primary_at_fault": "pg1", "t_rejoined": T + 26.5}],
            "rpo": {"acknowledged": 145_700, "lost_acknowledged": 3, "lost_ack_window_rel_s": [0.015, 0.059]},
            "groups": {"deadline": {"rpo": {"lost_by_node": {"pg1": 2}}},
                       "pool": {"rpo": {"lost_by_node": {"pg1": 1}}}},
            "checks": {"split_brain": {"valid": True},
                       "replica_convergence": {"valid": False, "text": "pg3 (replica) holds 68,315 rows of the "
                                                                       "writer's 339,698"}},
            "slo": {"rto_max": {"target": 30.0, "measured": 10.04, "ok": True, "judges": "rto_all_clients_s"},
                    "rpo_max_writes": {"target": 1, "measured": 2, "ok": False,
                                       "by_group": {"deadline": 2, "pool": 1}}}}}


def test_headline_rows() -> None:
    rows = dict(headline(run(), signed=False))
    assert list(rows) == ["verdict", "environment", "what was done", "why it failed", "RTO", "data lost", "failover",
                          "duration", "operator", "evidence"]
    assert rows["verdict"] == "FAIL"
    # what did not hold, in its own words: the failed check, then the missed SLO (the held ones not)
    assert rows["why it failed"] == ("check replica_convergence FAIL: pg3 (replica) holds 68,315 rows of the "
                                     "writer's 339,698; SLO acknowledged writes lost 2 writes > 1 write: FAIL "
                                     "(rpo_max_writes)")
    assert rows["environment"] == "staging (the env tags of the cluster and its hosts)"
    assert rows["what was done"] == "kill on pg1 at 2027-01-15 08:00:10.000 UTC (+10.0 s into the run)"
    assert rows["RTO"] == ("first client back 9.84 s, all clients back 10.04 s; "
                           "SLO all clients back 10.04 s <= 30.00 s: PASS (rto_max)")
    assert rows["data lost"] == ("3 of 145,700 acknowledged writes lost; SLO, worst client group acknowledged "
                                 "writes lost 2 writes > 1 write: FAIL (rpo_max_writes); acknowledged between "
                                 "+0.015 s and +0.059 s of the fault, by pg1 (3)")
    assert rows["failover"] == "failover from pg1 to pg2; pg1 rejoined as a replica at +26.5 s"
    assert rows["duration"] == "60.0 s, 2027-01-15 08:00:00.000 UTC to 2027-01-15 08:01:00.000 UTC"
    assert rows["operator"] == "dba@ops"
    assert rows["evidence"].startswith("NOT SIGNED")
    assert "evidence" not in dict(headline(run()))  # not known: not said


def test_an_old_lab_run_says_lab_and_a_run_without_outage_says_so() -> None:
    ev = run()
    del ev["environment"]
    ev["inventory"] = {"content": {"lab": {"subnet": "10.77.0.0/24"}}}
    ev["results"]["faults"] = [{"outage": False, "outcome_text": "no failover: pg1 stayed the primary"}]
    rows = dict(headline(ev))
    assert rows["environment"] == "lab (the inventory is the lab's)"
    assert rows["RTO"] == "no write outage" and rows["failover"] == "no failover: pg1 stayed the primary"


def test_the_headline_comes_first_in_summary_md(tmp_path: Path) -> None:
    ev = {**run(), "playbook": {"content": {"name": "pg-kill-primary", "description": "", "load": {
        "workload": "ledger", "workers": 8}}}, "cluster": {"name": "pg", "engine": "postgres", "ha": "patroni"}}
    text = markdown_env().get_template("summary.md.j2").render(ev=ev, head=headline(ev, signed=True))
    lines = text.splitlines()
    assert lines[0] == "# Drill `pg-kill-primary`: FAIL"
    assert lines[2] == "- **verdict**: FAIL" and lines[3].startswith("- **environment**: staging")
    assert "- **evidence**: signed (check it with chaoskit verify --allowed-signers)" in lines


def test_the_operator_is_the_person_not_only_the_account(tmp_path: Path, monkeypatch: object) -> None:
    """SUDO_USER first, then the git identity, the Unix account alone last; control characters never
    reach the evidence."""
    import getpass

    from chaoskit.lifeline import controller_user, operator_identity

    identify = operator_identity.__wrapped__  # uncached
    monkeypatch.delenv("SUDO_USER", raising=False)  # type: ignore[attr-defined]
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]
    (tmp_path / "gitconfig").write_text("[user]\n\tname = Ada \x1b[31mL\n\temail = ada@example.org\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))  # type: ignore[attr-defined]
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")  # type: ignore[attr-defined]
    assert identify() == f"Ada [31mL <ada@example.org> (git identity, as {controller_user()})"
    sudo = "alice" if getpass.getuser() != "alice" else "bob"
    monkeypatch.setenv("SUDO_USER", sudo)  # type: ignore[attr-defined]
    assert identify() == f"{sudo} (via sudo, as {controller_user()})"
    monkeypatch.delenv("SUDO_USER")  # type: ignore[attr-defined]
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "none"))  # type: ignore[attr-defined]
    assert identify() == controller_user()


def test_empty_audit_fields_are_said_not_hidden() -> None:
    from chaoskit.drill.runner import unrecorded_audit
    from chaoskit.playbook.models import Audit

    assert unrecorded_audit(Audit.model_validate({"scope": "payments pg"})) == [
        "evidence: participants, change_ref not given (playbook `evidence:`, --participant, --change-ref): the report "
        "says 'not recorded'"]
    full = Audit.model_validate({"scope": "s", "participants": ["DBA"], "change_ref": "CHG-1"})
    assert unrecorded_audit(full) == []


def test_a_client_group_without_an_outage_says_so_in_the_terminal() -> None:
    """Its RTO figures are 0.0 by definition (nothing to wait for); the line says "no write
    outage" rather than "first client back 0.00 s"."""
    from chaoskit.report.summary import group_line

    quiet = {"profile": "deadline", "workers": [1, 2], "rto_first_client_s": 0.0, "rto_all_clients_s": 0.0,
             "write_gap_s": 0.0, "rpo": {"lost_acknowledged": 0}, "faults": [{"id": "f", "outage": False}]}
    assert group_line("deadline", quiet) == ("  client group deadline (deadline, 2 clients): no write outage; "
                                             "0 writes lost")
    hit = {**quiet, "rto_first_client_s": 1.5, "rto_all_clients_s": 2.25, "write_gap_s": 1.25,
           "faults": [{"id": "f", "outage": True}]}
    assert group_line("deadline", hit) == ("  client group deadline (deadline, 2 clients): first client back 1.50 s, "
                                           "all clients back 2.25 s, write gap 1.25 s; 0 writes lost")
