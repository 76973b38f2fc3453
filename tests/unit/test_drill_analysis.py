"""`analyse` (a drill's whole `results`) and the convergence check, on the hand-written history of
test_figures.py (see its docstring: T0 = 1000, fault at F = 1010, interval 0.125 s, two workers).
Every expected value is worked out here from that history; the per-fault figures are pinned one by
one in test_figures.py, and here the glue: baseline window, SLOs with their units, merged verdict,
phase marks, windows between disturbances, missing truth, aborts, and timeline.csv."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError
from test_figures import T0, F, outcome1, outcome2, probe, recorder, t1, t2

from chaoskit.analysis.checks import convergence_verdict, gather_convergence, rewind_note
from chaoskit.analysis.drill import analyse as analyse_drill
from chaoskit.analysis.drill import expectations, recovery_start
from chaoskit.faults.manager import InjectedFault
from chaoskit.inventory.models import Cluster
from chaoskit.playbook.models import Playbook
from chaoskit.playbook.record import DrillRecord
from chaoskit.recorder import OK, SEQUENCE, VERSION, error_rate
from chaoskit.testing.clock import FakeClock
from chaoskit.workload.kinds.bank import Bank
from chaoskit.workload.kinds.ledger import Ledger
from chaoskit.workload.kinds.update import Update
from chaoskit.workload.workloads import WorkloadParams

PLAYBOOK = {
    "name": "hand", "cluster": "pg",
    "load": {"workload": "ledger", "workers": 2, "warmup": "2s"},
    "probes": {"interval": "500ms"}, "baseline": "8s",
    "steps": [{"at": "10s", "expect": "failover",
               "fault": {"kind": "kill", "target": "role:primary", "processes": ["postgres"]}}],
    "duration": "30s", "recovery": {"within": "30s", "tps_fraction": 0.9, "hold": "3s"},
    "checks": ["rpo", "split_brain"],
    "slo": {"rto_max": "6s", "rpo_max_writes": 5, "max_error_rate_after_recovery": 0.01},
}


def playbook(**changes: Any) -> Playbook:
    data = {**PLAYBOOK, **changes}
    return Playbook.model_validate(data)


def kill(t_effect: float = F, fid: str = "f", step: int = 0) -> InjectedFault:
    return InjectedFault(id=fid, kind="kill", host="pg1", target="role:primary", spec={}, t_scheduled=t_effect,
                         t_staged=t_effect - 1.5, t_sent=t_effect - 0.01, t_effect=t_effect, t_effect_host=t_effect,
                         t_apply_start=t_effect - 0.001, t_applied=t_effect + 0.001, offset_s=0.0,
                         offset_uncertainty_s=0.0005, step=step)


@dataclass
class Probe:
    log: Any


@dataclass
class Ctx:
    playbook: Playbook
    recorder: Any
    probe: Probe
    faults: list[InjectedFault]
    actions: list[dict[str, Any]] = field(default_factory=list)
    preflight: dict[str, Any] = field(default_factory=lambda: {"ha": {"manager": "patroni"},
                                                               "primary_before": "pg1"})
    t0: float = T0
    ended: float = 1030.0
    aborted: str | None = None
    logs: list[dict[str, Any]] = field(default_factory=list)


def analyse(ctx: Ctx, truth: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The drill's analysis of a hand-made run: its fields as the drill's record."""
    run = DrillRecord(started=ctx.t0, t0=ctx.t0, ended=ctx.ended, preflight=ctx.preflight, faults=ctx.faults,
                      actions=ctx.actions, logs=ctx.logs, aborted=ctx.aborted)
    return analyse_drill(ctx.playbook, run, ctx.recorder, ctx.probe.log, truth)


ACKED = {(1, k + 1) for k in range(240) if outcome1(k) == OK} | {(2, k + 1) for k in range(240) if outcome2(k) == OK}
LOST = {(1, 79), (1, 80), (2, 82)}  # worker 1's k = 78, 79 and worker 2's k = 81 (acknowledged before F + 0.22)


@pytest.fixture  # per test: mutation testing maps each test to the code it runs
def analysed() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    ctx = Ctx(playbook(), recorder(), Probe(probe()), [kill()])
    return analyse(ctx, {"ledger_present": {"rows": ACKED - LOST}})


def test_baseline_and_the_fault_window(analysed: tuple) -> None:
    results, _ = analysed
    # warm-up 2 s, baseline 8 s after T0: 1002..1008, two writes per 0.125 s interval = 16/s
    assert results["baseline_tps"] == 16.0
    [fault] = results["faults"]
    assert fault["window_end"] == 1030.0  # the only disturbance: its window runs to the end of the run
    assert fault["rto_first_client_s"] == 4.0625 and fault["outcome"] == "failover"


def test_phase_marks_in_order(analysed: tuple) -> None:
    _, marks = analysed
    assert marks == [{"t": 1010.0, "mark": "t_fault", "fault": "f"}, {"t": 1011.5, "mark": "t_detect", "fault": "f"},
                     {"t": 1014.01, "mark": "t_promoted", "fault": "f"},
                     {"t": 1014.0625, "mark": "t_first_ok", "fault": "f"},
                     {"t": 1018.625, "mark": "t_recovered", "fault": "f"}]


def test_rpo_split_brain_and_expected_outcome(analysed: tuple) -> None:
    results, _ = analysed
    rpo = results["checks"]["rpo"]
    assert results["rpo"] is rpo
    assert (rpo["acknowledged"], rpo["lost_acknowledged"], rpo["valid"]) == (403, 3, True)  # 3 <= bound 5
    # the two info commits (worker 1 seq 81, worker 2 seq 83) were not found
    assert (rpo["indeterminate"], rpo["indeterminate_not_found"], rpo["phantoms"]) == (2, 2, 0)
    brain = results["checks"]["split_brain"]
    assert brain["valid"] is True and brain["overlaps"] == [] and brain["samples"] == 122
    assert results["checks"]["expected_outcome"] == {
        "valid": True, "steps": [{"step": 0, "fault": "f", "expected": "failover", "outcome": "failover", "ok": True,
                                  "text": results["faults"][0]["outcome_text"]}]}


def test_slos_with_targets_and_measurements(analysed: tuple) -> None:
    results, _ = analysed
    slo = results["slo"]
    # all clients back: worker 2 wrote again at 1015.59375, 5.59375 s after the fault at 1010
    assert slo["rto_max"] == {"target": 6.0, "measured": 5.59375, "ok": True, "judges": "rto_all_clients_s"}
    assert slo["rpo_max_writes"] == {"target": 5, "measured": 3, "ok": True}
    # after T_recovered 1018.625 (interval k = 149 on): 91 writes per worker, one failure (worker 2's
    # k = 160): 1 / 182 = 0.0054945... -> 0.005495
    assert slo["max_error_rate_after_recovery"] == {"target": 0.01, "measured": 0.005495, "from": "t_recovered",
                                                    "ok": True}
    assert results["verdict"] is True


def test_each_bound_exceeded_fails_the_verdict() -> None:
    rows = {"ledger_present": {"rows": ACKED - LOST}}
    tight = playbook(slo={"rto_max": "5.5s", "rpo_max_writes": 2, "max_error_rate_after_recovery": 0.005})
    results, _ = analyse(Ctx(tight, recorder(), Probe(probe()), [kill()]), rows)
    # the first client back (4.0625 s) is within 5.5 s; the last one (5.59375 s) is not
    assert results["slo"]["rto_max"] == {"target": 5.5, "measured": 5.59375, "ok": False,
                                         "judges": "rto_all_clients_s"}
    assert results["slo"]["rpo_max_writes"] == {"target": 2, "measured": 3, "ok": False}
    assert results["slo"]["max_error_rate_after_recovery"]["ok"] is False  # 0.005495 > 0.005
    assert results["checks"]["rpo"]["valid"] is False  # 3 lost over a bound of 2
    assert results["verdict"] is False
    exact = playbook(slo={"rto_max": "5.59375s", "rpo_max_writes": 3, "max_error_rate_after_recovery": 0.005495})
    results, _ = analyse(Ctx(exact, recorder(), Probe(probe()), [kill()]), rows)
    assert [s["ok"] for s in results["slo"].values()] == [True, True, True]  # a bound met exactly passes


def test_aborted_drill_is_aborted_whatever_the_checks_say() -> None:
    results, _ = analyse(Ctx(playbook(), recorder(), Probe(probe()), [kill()], aborted="interrupted"),
                         {"ledger_present": {"rows": ACKED}})
    assert results["verdict"] == "aborted"


def test_no_writer_after_the_drill_makes_rpo_unknown_not_passed() -> None:
    results, _ = analyse(Ctx(playbook(slo={}), recorder(), Probe(probe()), [kill()]),
                         {"writer_error": "no writer after the drill: timeout"})
    assert results["checks"]["rpo"] == {"valid": "unknown", "error": "no writer after the drill: timeout"}
    assert results["verdict"] == "unknown"


def test_a_switchover_action_is_a_disturbance_and_closes_the_faults_window() -> None:
    """A switchover issued at 1020 s: analysed from the instant it was sent; the kill's window ends
    there, and the switchover's runs to the end of the run."""
    action = {"kind": "switchover", "member": "pg2", "t_sent": 1020.0, "t_scheduled": 1020.0, "step": 1, "ok": True}
    pb = playbook(steps=[*PLAYBOOK["steps"], {"at": "20s", "action": {"kind": "switchover"}}], slo={})
    results, marks = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()], actions=[action]),
                             {"ledger_present": {"rows": ACKED}})
    kill_fa, switch_fa = results["faults"]
    assert (kill_fa["id"], kill_fa["window_end"]) == ("f", 1020.0)
    assert (switch_fa["id"], switch_fa["kind"], switch_fa["t_fault"]) == ("action0", "switchover", 1020.0)
    assert switch_fa["window_end"] == 1030.0
    rows = results["checks"]["expected_outcome"]["steps"]
    assert [(r.get("fault"), r.get("action"), r["expected"]) for r in rows] == [
        ("f", None, "failover"), ("action0", None, "failover"), (None, "switchover", "succeeded")]
    assert marks[0] == {"t": 1010.0, "mark": "t_fault", "fault": "f"}


def test_expectations_fail_on_a_failed_action_or_another_outcome() -> None:
    pb = playbook()
    rows = expectations(pb, [{"step": 0, "id": "f", "outcome": "no_failover", "outcome_text": "x"}],
                        [{"kind": "rejoin", "step": 1, "ok": False, "answer": "E" * 400}])
    assert rows["valid"] is False
    assert rows["steps"][0]["ok"] is False and rows["steps"][1]["text"] == "E" * 300
    assert expectations(pb, [{"step": None, "id": "g"}], [])["steps"] == []


def test_error_rate_and_recovery_start() -> None:
    assert error_rate({"ok": 7, "fail": 2, "info": 1}) == 0.3
    assert error_rate({"ok": 0, "fail": 0, "info": 0}) == 0.0
    assert error_rate({"ok": 2, "fail": 0, "info": 1}) == 0.333333
    assert recovery_start([]) == (None, "")
    assert recovery_start([{"t_recovered": 5.0}, {"t_recovered": 7.0}]) == (7.0, "t_recovered")
    # throughput never back: the moment every client wrote again (T_fault + the slowest client)
    start, why = recovery_start([{"t_recovered": None, "t_fault": 10.0, "rto_all_clients_s": 3.5}])
    assert start == 13.5 and why.startswith("every client writing again")
    assert recovery_start([{"t_recovered": None, "t_fault": 10.0, "rto_all_clients_s": None}]) == (
        None, "a client never wrote again")


def test_timeline_csv_rows(tmp_path: Path) -> None:
    rec = recorder()
    path = tmp_path / "timeline.csv"
    rec.write_timeline_csv(str(path), t0=T0, extra={"role_pg1": ["x"] * len(rec.to_frame()), "short": [1]})
    rows = list(csv.DictReader(path.open()))
    assert "short" not in rows[0]  # a column of the wrong length is left out
    by_rel = {r["t_rel_s"]: r for r in rows}
    # interval k = 81 starts at 8081 x 0.125 = 1010.125 (t_rel 10.125): worker 1 fails, worker 2's
    # last ok (1010.21875): one ok, one error -> 1 / 0.125 s = 8 errors/s
    row = by_rel["10.125"]
    assert (row["ok"], row["errors_per_s"], row["role_pg1"]) == ("1", "8.000", "x")
    assert rows[0]["t_rel_s"] == "0.000" and by_rel["2.000"]["ok"] == "2"
    assert t1(81) < 1010.25 and t2(81) < 1010.25


class FakeDriver:
    """Members answer a fixed (rows, seq_sum, writable) per read, or raise."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers

    def q(self, sql: str) -> str:
        return sql

    def connect_member(self, member: Any) -> str:
        seq = self.answers[member.host]
        answer = seq.pop(0) if len(seq) > 1 else seq[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def query(self, conn: Any, sql: str, params: tuple) -> list[tuple[int, int]]:
        return [conn[:2]]

    def role(self, conn: Any) -> str:
        return "primary" if conn[2] else "replica"


def digest(drv: FakeDriver) -> Any:
    """The ledger's per-member digest, read through the fake members."""
    return Ledger(drv, WorkloadParams(), "run").member_digest  # type: ignore[arg-type]


def cluster() -> Cluster:
    return Cluster.model_validate({"name": "pg", "engine": "postgres", "user": "u",
                                   "members": [{"host": "pg1"}, {"host": "pg2"}, {"host": "pg3"}]})


def test_convergence_waits_for_a_lagging_member_then_judges_the_old_primary() -> None:
    drv = FakeDriver({"pg1": [(10, 55, False)], "pg2": [(10, 55, True)],
                      "pg3": [(9, 45, False), (10, 55, False)]})  # pg3 one row behind on the first read
    got = gather_convergence(drv, cluster(), digest(drv), within=1.5, clock=FakeClock())
    assert got["members"]["pg3"] == {"rows": 10, "seq_sum": 55, "role": "replica"}
    assert got["waited_s"] == 0.5  # one 0.5 s pause between the two reads
    v = convergence_verdict(got, "pg1", {"manager": "patroni"})
    assert v["valid"] is True
    assert v["old_primary"] == {"host": "pg1", "role_now": "replica", "rejoined": True, "diverged": False,
                                "rewind": "unknown: not observable through patroni's interface (see the member's "
                                          "manager log)"}


def test_convergence_stops_waiting_for_a_member_ahead_of_the_one_writer() -> None:
    """The old primary kept 2 rows the new writer never got (12 > 10): rows are only ever added and
    the load stopped, so no read within the 30 s bound could differ: one read, a reason."""
    drv = FakeDriver({"pg1": [(12, 99, False)], "pg2": [(10, 55, True)], "pg3": [(10, 55, False)]})
    got = gather_convergence(drv, cluster(), digest(drv), within=30.0, rows_only_added=True, clock=FakeClock())
    assert got["waited_s"] == 0.0
    assert got["stopped_early"].startswith("pg1 holds more of this run's rows than the one writer")
    assert convergence_verdict(got, "pg1", {"manager": "patroni"})["old_primary"]["diverged"] is True


@pytest.mark.parametrize("answers, rows_only_added, multi_writer", [
    ({"pg1": [(12, 99, False)], "pg2": [(10, 55, True)], "pg3": [(10, 55, False)]}, False, False),  # rows updated
    ({"pg1": [(12, 99, True)], "pg2": [(10, 55, True)], "pg3": [(10, 55, False)]}, True, True),  # Galera: may apply
    ({"pg1": [(12, 99, True)], "pg2": [(10, 55, True)], "pg3": [(10, 55, False)]}, True, False),  # two writers
    ({"pg1": [(8, 36, False)], "pg2": [(10, 55, True)], "pg3": [(10, 55, False)]}, True, False),  # behind: may catch up
    ({"pg1": [(12, 99, False)], "pg2": [ConnectionError("down")], "pg3": [(10, 55, False)]}, True, False),  # no writer
])
def test_convergence_waits_its_bound_where_the_rows_could_still_change(
        answers: dict[str, list[Any]], rows_only_added: bool, multi_writer: bool) -> None:
    drv = FakeDriver(answers)
    got = gather_convergence(drv, cluster(), digest(drv), within=1.2, rows_only_added=rows_only_added,
                             multi_writer=multi_writer, clock=FakeClock())
    assert got["waited_s"] == 1.2 and "stopped_early" not in got  # reads at 0, 0.5, 1.0 and 1.5 s: the bound


def test_convergence_reports_divergence_and_a_member_down() -> None:
    drv = FakeDriver({"pg1": [(12, 99, False)], "pg2": [(10, 55, True)], "pg3": [ConnectionError("refused\nmore")]})
    got = gather_convergence(drv, cluster(), digest(drv), within=0.0)
    assert got["members"]["pg3"] == {"error": "refused"}
    v = convergence_verdict(got, "pg1", {"manager": "none"})
    assert v["valid"] is False
    assert v["old_primary"]["rejoined"] is False and v["old_primary"]["diverged"] is True
    assert v["old_primary"]["rewind"] == "not applicable: no HA manager rejoins nodes in this cluster"
    assert convergence_verdict({"valid": "unknown", "error": "x"}, "pg1", {}) == {"valid": "unknown", "error": "x"}
    nobody = convergence_verdict({"members": {"pg1": {"error": "x"}}}, "pg1", {})
    assert nobody["valid"] == "unknown" and nobody["old_primary"]["rejoined"] is False
    assert rewind_note("repmgr", "primary") == "not needed: the old primary is the writer again"
    back = convergence_verdict({"members": {"pg1": {"rows": 3, "seq_sum": 6, "role": "primary"},
                                            "pg2": {"rows": 3, "seq_sum": 6, "role": "replica"}}}, "pg1", {})
    assert back["old_primary"]["rejoined"] is True and back["old_primary"]["diverged"] is False


def test_a_member_left_behind_is_named_with_its_own_log_lines() -> None:
    members = {"pg1": {"rows": 120, "seq_sum": 7260, "role": "primary"},
               "pg2": {"rows": 120, "seq_sum": 7260, "role": "replica"},
               "pg3": {"rows": 87, "seq_sum": 3828, "role": "replica"},
               "pg4": {"error": "connection refused"}}
    said = {"pg3": ["postgres: FATAL:  highest timeline 6 of the primary is behind recovery timeline 7"]}
    v = convergence_verdict({"members": members}, "pg1", {"manager": "patroni"}, said)
    assert v["valid"] is False
    assert [b["host"] for b in v["not_converged"]] == ["pg3", "pg4"]
    assert v["not_converged"][0] == {
        "host": "pg3", "rows": 87, "writer_rows": 120, "server_said": said["pg3"],
        "text": "pg3 (replica) holds 87 rows of the writer's 120; its log said: postgres: FATAL:  highest "
                "timeline 6 of the primary is behind recovery timeline 7"}
    assert v["text"] == v["not_converged"][0]["text"] + "; pg4 did not answer: connection refused"
    assert "not_converged" not in convergence_verdict({"members": {k: members[k] for k in ("pg1", "pg2")}},
                                                      "pg1", {}, said)


def test_through_analyse_a_member_behind_quotes_its_logs_and_the_figures_stand(analysed: tuple) -> None:
    """The run's kept logs reach the convergence verdict, and nothing else changes (the loop over
    them once reused the recorder's name and broke every figure after it)."""
    convergence = {"members": {"pg1": {"rows": 10, "seq_sum": 55, "role": "replica"},
                               "pg2": {"rows": 12, "seq_sum": 78, "role": "primary"}}}
    logs = [{"host": "pg1", "label": "postgres", "complaints": ["FATAL:  highest timeline 6 of the primary is behind "
                                                                 "recovery timeline 7"]},
            {"host": "pg2", "label": "patroni", "complaints": []}]
    ctx = Ctx(playbook(checks=["rpo", "split_brain", "replica_convergence"]), recorder(), Probe(probe()), [kill()],
              logs=logs)
    results, _ = analyse(ctx, {"ledger_present": {"rows": ACKED - LOST}, "convergence": convergence})
    conv = results["checks"]["replica_convergence"]
    assert conv["valid"] is False and conv["not_converged"][0]["server_said"] == [
        "postgres: FATAL:  highest timeline 6 of the primary is behind recovery timeline 7"]
    assert conv["text"].startswith("pg1 (replica) holds 10 rows of the writer's 12; its log said: postgres: FATAL:")
    plain, _ = analysed
    assert results["rpo"] == plain["rpo"] and results["faults"] == plain["faults"]


class TruthDriver(FakeDriver):
    """A writer whose connect can fail; members as FakeDriver."""

    def __init__(self, answers: dict[str, list[Any]], writer_error: Exception | None = None) -> None:
        super().__init__(answers)
        self.writer_error = writer_error
        self.closed: list[Any] = []
        self.tunings: list[dict[str, Any]] = []
        self.causal: list[Any] = []

    def causal_reads(self, conn: Any) -> None:
        self.causal.append(conn)

    def tuned(self, **changes: Any) -> TruthDriver:
        self.tunings.append(changes)
        return self

    def connect_writer(self) -> str:
        if self.writer_error is not None:
            raise self.writer_error
        return "writer"

    @staticmethod
    def close_quietly(conn: Any) -> None:
        pass


class FakeLedger(Ledger):
    """The ledger's own truth readers and digest, over rows that the writer holds here."""

    def __init__(self) -> None:
        super().__init__(FakeDriver({}), WorkloadParams(), "run")  # type: ignore[arg-type]

    def present(self, conn: Any) -> set[tuple[int, int]]:
        assert conn == "writer"
        return {(1, 1), (1, 2)}


class FakeBank(Bank):
    def __init__(self) -> None:
        super().__init__(FakeDriver({}), WorkloadParams(accounts=100), "run")  # type: ignore[arg-type]

    def total(self, conn: Any) -> tuple[int, int]:
        return 100, 99_990


def truth_ctx(checks: list[str], workload: str = "ledger") -> Any:
    pb = playbook(checks=checks, load={**PLAYBOOK["load"], "workload": workload}, slo={})
    return SimpleNamespace(playbook=pb, cluster=cluster(), inventory=None, run_id="run")


def truth_of(inputs: Any, load: Any) -> dict[str, Any]:
    """gather_truth with a hand-made drill's inputs (the module's driver_for as patched)."""
    from chaoskit.analysis import drill as drill_mod

    return drill_mod.gather_truth(inputs, inputs.run_id, load)


def test_gather_truth_reads_rows_bank_and_convergence(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.analysis import drill as drill_mod

    runner = SimpleNamespace(workload=FakeLedger(), before=None)
    made: list[dict] = []

    def driver_for(cluster: Any, inventory: Any, **kw: Any) -> TruthDriver:
        d = TruthDriver({"pg1": [(2, 3, True)], "pg2": [(2, 3, False)], "pg3": [(2, 3, False)]})
        made.append(d.tunings)
        return d

    monkeypatch.setattr(drill_mod, "driver_for", driver_for)
    truth = truth_of(truth_ctx(["rpo", "replica_convergence"]), runner)
    assert truth["ledger_present"] == {"rows": {(1, 1), (1, 2)}}
    assert truth["convergence"]["members"]["pg1"] == {"rows": 2, "seq_sum": 3, "role": "primary"}
    assert "bank" not in truth and "writer_error" not in truth
    # read with the load's connect timeout and a long op timeout: the cluster has just recovered
    assert made == [[{"connect_timeout": 1.0, "op_timeout": 60.0}]]
    truth = truth_of(truth_ctx(["bank"], workload="bank"), SimpleNamespace(workload=FakeBank(), before=None))
    assert truth == {"bank": {"accounts": 100, "total": 99_990, "expected": 100_000}}
    # convergence is the ledger workload's: a bank playbook that asks for it is refused
    with pytest.raises(ValidationError, match=r"replica_convergence check needs load\.workload: ledger"):
        truth_ctx(["bank", "replica_convergence"], "bank")


def test_gather_truth_without_a_writer_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.analysis import drill as drill_mod

    monkeypatch.setattr(drill_mod, "driver_for", lambda *a, **k: TruthDriver(
        {"pg1": [(1, 1, True)], "pg2": [(1, 1, False)], "pg3": [(1, 1, False)]}, ConnectionError("no writer\nx")))
    truth = truth_of(truth_ctx(["rpo", "replica_convergence"]), SimpleNamespace(workload=FakeLedger(), before=None))
    assert truth["writer_error"] == "no writer after the drill: no writer\nx"
    assert "ledger_present" not in truth and truth["convergence"]["members"]["pg2"]["role"] == "replica"


def test_lost_updates_and_phantom_updates_by_hand() -> None:
    from chaoskit.workload.durability import lost_update_check

    before = {1: 10, 2: 5, 3: 0, 4: 7}
    # row 1: 3 acknowledged, 1 unknown: 13 or 14 are right; row 2: 2 acknowledged; row 3 never updated;
    # row 4: 1 acknowledged
    updates = {1: [3, 1], 2: [2, 0], 4: [1, 0]}
    ok = lost_update_check(updates, before, {1: 14, 2: 7, 3: 0, 4: 8}, max_lost=0)
    assert (ok["valid"], ok["lost_acknowledged"], ok["phantoms"], ok["acknowledged"], ok["indeterminate"]) == (
        True, 0, 0, 6, 1)
    # row 1 at 11 (2 acknowledged increments gone), row 2 at 8 (one more than acknowledged + unknown),
    # row 3 at 1 (never updated: a phantom), row 4 gone (its 1 acknowledged increment lost)
    bad = lost_update_check(updates, before, {1: 11, 2: 8, 3: 1}, max_lost=5)
    assert (bad["lost_acknowledged"], bad["rows_with_lost_updates"], bad["phantoms"]) == (3, 2, 2)
    assert bad["lost_sample"] == [[1, 13, 11], [4, 8, -1]] and bad["valid"] is False  # phantoms always fail
    assert bad["text"] == "3 acknowledged updates lost on 2 rows" and bad["rows_checked"] == 4
    assert lost_update_check(updates, before, {1: 12, 2: 7, 3: 0, 4: 8}, max_lost=1)["valid"] is True
    assert lost_update_check(updates, before, {1: 12, 2: 7, 3: 0, 4: 8}, max_lost=0)["valid"] is False


def test_recorder_counts_row_updates_across_processes() -> None:
    from chaoskit.recorder import FAIL, INFO, Recorder

    kid, parent = Recorder(0.0, keep_ops=True), Recorder(0.0)
    for t, row, outcome in ((1.0, 7, OK), (1.1, 7, OK), (1.2, 7, INFO), (1.3, 8, FAIL), (1.4, 8, OK)):
        kid.record(1, "write", t - 0.01, t, outcome, None if outcome == OK else "timeout", key=row, keyed=VERSION)
    parent.merge(kid.drain(2.0))
    kid.record(1, "write", 2.5, 2.6, OK, key=7, keyed=VERSION)
    parent.merge(kid.drain(3.0, final=True))
    assert parent.row_updates == {7: [3, 1], 8: [1, 0]}  # a failed update counts for nothing
    assert [op[8] for op in kid.history.kept] == []  # the child ships its ops; the parent keeps windows


def test_gather_truth_reads_versions_for_the_update_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.analysis import drill as drill_mod

    class Versions(Update):
        def snapshot(self, conn: Any) -> dict[int, int]:
            return {1: 5}

    monkeypatch.setattr(drill_mod, "driver_for", lambda *a, **k: TruthDriver({}))
    runner = SimpleNamespace(workload=Versions(FakeDriver({}), WorkloadParams(), "run"), before={1: 3})
    truth = truth_of(truth_ctx(["rpo"], workload="update"), runner)
    assert truth == {"versions": {"before": {1: 3}, "after": {1: 5}}}


def test_without_a_manager_there_is_no_detection() -> None:
    for preflight in ({"ha": {"manager": "none"}}, {"ha": {}}, {}):
        results, marks = analyse(Ctx(playbook(slo={}), recorder(), Probe(probe()), [kill()], preflight=preflight),
                                 {"ledger_present": {"rows": ACKED}})
        (fa,) = results["faults"]
        assert fa["t_detect"] is None and fa["detect_signal"] is None, preflight
        assert "no HA manager in this cluster (ha: none): no detection signal exists, t_detect is null" in fa["notes"]
        assert [m["mark"] for m in marks] == ["t_fault", "t_promoted", "t_first_ok", "t_recovered"]


def test_a_switchover_is_analysed_with_its_member_schedule_and_step() -> None:
    action = {"kind": "switchover", "member": "pg2", "t_sent": 1020.0, "t_scheduled": 1019.99, "step": 1, "ok": True}
    pb = playbook(steps=[*PLAYBOOK["steps"], {"at": "20s", "action": {"kind": "switchover"}}], slo={})
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()], actions=[action]),
                         {"ledger_present": {"rows": ACKED}})
    sw = results["faults"][1]
    assert (sw["target_host"], sw["t_scheduled"], sw["step"], sw["t_fault"]) == ("pg2", 1019.99, 1, 1020.0)
    assert "catchup" not in results["faults"][0]  # a fault on the primary has no standby catch-up


def test_a_fault_on_a_standby_reports_its_catch_up() -> None:
    """A kill of pg2 (a replica until 1013.5) at 1004.0, reverted at 1006.0. The primary saw pg2 at
    120 bytes of lag during the baseline (1002-1004; 900 bytes at 1001.5 is warm-up), not listed at
    1006.0, catching up at 1006.5 (9,000 bytes), streaming at 1007.0 (400) and 1007.5 (100: back
    at its level). The kill's window ends at the next fault (the primary's kill at 1010).
    It came back 10,535,424 bytes behind: pg2 last replayed 0/50001F8 (1003.9) before the kill, and
    the primary's WAL was at 0/5A0C3F8 in the sample that lists pg2 again (1006.5); 0x5A0C3F8 -
    0x50001F8 = 0xA0C200 = 10 MiB + 49,664. The primary's positions at 1006.0 (pg2 not listed yet)
    and 1007.0 are not the one."""
    log = probe()
    log.replication += [(1001.5, {"pg2": ("streaming", 900, 0.1)}), (1003.0, {"pg2": ("streaming", 120, 0.0)}),
                        (1006.0, {}), (1006.5, {"pg2": ("catchup", 9000, None)}),
                        (1007.0, {"pg2": ("streaming", 400, 0.2)}), (1007.5, {"pg2": ("streaming", 100, 0.0)})]
    log.positions += [(1003.0, "pg2", "0/5000100"), (1003.0, "pg1", "0/5000200"), (1003.9, "pg2", "0/50001F8"),
                      (1006.0, "pg1", "0/5900000"), (1006.5, "pg1", "0/5A0C3F8"), (1007.0, "pg1", "0/5B00000"),
                      (1007.0, "pg2", "0/5A00000")]
    standby = InjectedFault(id="s", kind="kill", host="pg2", target="pg2", spec={}, t_scheduled=1004.0,
                            t_staged=1002.5, t_sent=1004.0, t_effect=1004.0, t_effect_host=1004.0,
                            t_apply_start=1004.0, t_applied=1004.0, offset_s=0.0, offset_uncertainty_s=0.0,
                            t_reverted=1006.0, step=0)
    pb = playbook(steps=[{"at": "4s", "fault": {"kind": "kill", "target": "pg2", "processes": ["postgres"]}},
                         {"at": "10s", "fault": {"kind": "kill", "target": "role:primary"}}],
                  baseline="4s", slo={})
    results, _ = analyse(Ctx(pb, recorder(), Probe(log), [standby, kill(step=1)], actions=[{"kind": "rejoin",
                         "member": "pg2", "rewound": True, "rebuilt": False, "t_sent": 1009.0, "ok": True}]),
                         {"ledger_present": {"rows": ACKED}})
    cu = results["faults"][0]["catchup"]
    assert cu == {"member": "pg2", "t_back": 1006.0, "streaming_s": 1.0, "caught_up_s": 1.5, "peak_lag_bytes": 9000,
                  "peak_replay_delay_s": 0.2, "rewound": True, "rebuilt": False, "baseline_lag_bytes": 120,
                  "missed_bytes": 10_535_424, "notes": [], "t_streaming": 1007.0, "t_caught_up": 1007.5}


def test_wal_positions_read_as_byte_offsets() -> None:
    """An LSN is two 32-bit halves in hex: 16/B374D848 = 22 * 2**32 + 3,010,779,208; across the
    4 GiB boundary 0/FFFFF000 -> 1/00001000 is 0x1000 + 0x1000 = 8,192 bytes. A GTID set or a
    MariaDB GTID is not an LSN."""
    from chaoskit.analysis.catchup import lsn_bytes

    assert lsn_bytes("16/B374D848") == 97_500_059_720
    assert lsn_bytes("1/00001000") - lsn_bytes("0/FFFFF000") == 8_192
    assert lsn_bytes("0-1-1234") is None and lsn_bytes("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5") is None


def test_mysql_catch_up_has_no_byte_figure_for_missed_data() -> None:
    """MySQL replicas report their own state and GTID positions: a catch-up, but no missed_bytes."""
    from chaoskit.analysis.catchup import standby_catchup
    from chaoskit.topology.probe import ProbeLog

    log = ProbeLog(replication=[(1003.0, {"db2": ("streaming", 0, 0.0)}), (1006.5, {"db2": ("streaming", 0, 0.0)})],
                   positions=[(1003.0, "db2", "0-1-100"), (1006.5, "db1", "0-1-180"), (1006.5, "db2", "0-1-180")])
    cu = standby_catchup(log, "db2", 1004.0, 1006.0, 1010.0, baseline=(1002.0, 1004.0), actions=[])
    assert cu["caught_up_s"] == 0.5 and cu["missed_bytes"] is None
    assert "positions are not byte offsets (GTID sets): no missed_bytes" in cu["notes"]


def test_the_baseline_leaves_the_warm_up_out() -> None:
    """Only worker 1 writes during the first 5 s (8/s), both after (16/s). Warm-up 5 s, baseline to
    8 s: rolling values ending in [1006, 1008] are all 16. Counting the warm-up would take the 8/s
    values of 1001-1005 in too (33 values at 8 against 17 at 16: a median of 8)."""
    from chaoskit.recorder import Recorder

    rec = Recorder(T0, interval=0.125)
    for k in range(240):
        rec.record(1, "write", t1(k) - 0.01, t1(k), OK, key=k + 1, keyed=SEQUENCE)
        if t2(k) >= 1005.0:
            rec.record(2, "write", t2(k) - 0.01, t2(k), OK, key=k + 1, keyed=SEQUENCE)
    rec.finish()
    pb = playbook(load={**PLAYBOOK["load"], "warmup": "5s"}, slo={}, checks=[])
    results, _ = analyse(Ctx(pb, rec, Probe(probe()), []), {})
    assert results["baseline_tps"] == 16.0


def test_worst_of_the_groups() -> None:
    from chaoskit.analysis.drill import _worst

    assert _worst([]) == 0.0 and _worst([2.0, 3.5, 1.0]) == 3.5 and _worst([2.0, None]) is None


def test_lost_update_record_in_full() -> None:
    from chaoskit.workload.durability import lost_update_check

    r = lost_update_check({5: [2, 0]}, {1: 10}, {1: 10, 5: 2}, max_lost=0)  # row 5 was not there before: from 0
    assert r == {"valid": True, "workload": "update", "acknowledged": 2, "lost_acknowledged": 0,
                 "rows_with_lost_updates": 0, "indeterminate": 0, "phantoms": 0, "rows_checked": 2,
                 "sum_before": 10, "sum_after": 12, "lost_sample": [], "text": "0 acknowledged updates lost on 0 rows"}
    many = lost_update_check({row: [1, 0] for row in range(25)}, {}, {}, max_lost=None)
    assert many["lost_acknowledged"] == 25 and len(many["lost_sample"]) == 20 and many["valid"] is True


class Writer:
    closed = 0

    def close(self) -> None:
        Writer.closed += 1


def test_gather_truth_reads_through_the_writer_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.analysis import drill as drill_mod

    seen: list[tuple] = []
    writer = Writer()

    class D(TruthDriver):
        def connect_writer(self) -> Any:
            return writer

        def query(self, conn: Any, sql: str, params: tuple) -> list[tuple[int, int]]:
            assert params == ("run",)  # this run's rows only
            return super().query(conn, sql, params)

    made: list[D] = []

    def driver_for(cluster: Any, inventory: Any, **kw: Any) -> D:
        seen.append((cluster.name, inventory))
        made.append(D({"pg1": [(1, 1, True)], "pg2": [(1, 1, False)], "pg3": [(1, 1, False)]}))
        return made[-1]

    class Rows(Ledger):
        def present(self, conn: Any) -> set:
            assert conn is writer
            return set()

    class Versions(Update):
        def snapshot(self, conn: Any) -> dict[int, int]:
            assert conn is writer
            return {1: 4}

    monkeypatch.setattr(drill_mod, "driver_for", driver_for)
    ctx = truth_ctx(["rpo", "replica_convergence"])
    ctx.inventory = "the-inventory"
    Writer.closed = 0
    # the ledger's digest is read on each member through the drill's connections, with this run's id
    ledger = Rows(D({}), WorkloadParams(), "run")  # type: ignore[arg-type]
    truth = truth_of(ctx, SimpleNamespace(workload=ledger, before=None))
    assert seen == [("pg", "the-inventory")] and Writer.closed == 1
    assert made[0].causal == [writer]  # the truth is read causally (a rejoined Galera node may still apply)
    assert truth["ledger_present"] == {"rows": set()} and truth["convergence"]["members"]["pg1"]["rows"] == 1
    # the update workload without the rpo check reads nothing, and opens no writer
    update = SimpleNamespace(workload=Versions(D({}), WorkloadParams(), "run"), before={1: 3})  # type: ignore[arg-type]
    Writer.closed = 0
    assert truth_of(truth_ctx(["split_brain"], workload="update"), update) == {} and Writer.closed == 0
    truth = truth_of(truth_ctx(["rpo"], workload="update"), update)
    assert truth == {"versions": {"before": {1: 3}, "after": {1: 4}}}


def test_convergence_verdict_edges() -> None:
    both = {"pg1": {"rows": 3, "seq_sum": 6, "role": "replica"}, "pg2": {"rows": 3, "seq_sum": 6, "role": "replica"}}
    v = convergence_verdict({"members": both}, "pgX", {"manager": "patroni"})  # not a member: nothing said of it
    assert "old_primary" not in v and v["valid"] is True
    v = convergence_verdict({"members": both}, "pg1", {"manager": "patroni"})  # nobody is the writer now
    assert v["old_primary"]["rejoined"] is False and v["old_primary"]["role_now"] == "replica"
    back = {"pg1": {"rows": 3, "seq_sum": 6, "role": "primary"}, "pg2": {"rows": 3, "seq_sum": 6, "role": "replica"}}
    v = convergence_verdict({"members": back}, "pg1", {"manager": "patroni"})
    assert v["old_primary"]["rewind"] == "not needed: the old primary is the writer again"


class ClosingDriver(FakeDriver):
    """As FakeDriver, with connections that count their closing and a check of the query."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        super().__init__(answers)
        self.closed = 0

    def connect_member(self, member: Any) -> Any:
        answer = super().connect_member(member)
        driver = self

        class Conn(tuple):
            def close(self) -> None:
                driver.closed += 1

        return Conn(answer)

    def query(self, conn: Any, sql: str, params: tuple) -> list[tuple[int, int]]:
        assert "from chaoskit_ledger where run_id" in sql.lower() and params == ("run",)
        return [tuple(conn[:2])]


def test_gather_convergence_closes_what_it_opens_and_names_errors() -> None:
    drv = ClosingDriver({"pg1": [(2, 3, True)], "pg2": [(2, 3, False)], "pg3": [ConnectionError("")]})
    got = gather_convergence(drv, cluster(), digest(drv), within=0.0)
    assert got["members"]["pg3"] == {"error": "ConnectionError"}  # no message: the exception's type
    assert drv.closed == 2 and got["waited_s"] == 0.0
    drv = ClosingDriver({"pg1": [(2, 3, True)], "pg2": [(2, 3, False)], "pg3": [RuntimeError("x" * 300)]})
    assert gather_convergence(drv, cluster(), digest(drv), within=0.0)["members"]["pg3"] == {"error": "x" * 200}
    drv = ClosingDriver({"pg1": [(2, 3, True)], "pg2": [(2, 3, False)], "pg3": [(1, 1, False), (2, 3, False)]})
    got = gather_convergence(drv, cluster(), digest(drv), within=3.0, clock=FakeClock())
    assert got["waited_s"] == 0.5  # one 0.5 s pause


def test_expectation_rows_for_actions_in_full() -> None:
    pb = playbook()
    rows = expectations(pb, [], [{"kind": "switchover", "step": 1, "ok": True, "answer": "done"},
                                 {"kind": "rejoin", "step": 2, "ok": False, "answer": None}])
    assert rows == {"valid": False, "steps": [
        {"step": 1, "action": "switchover", "expected": "succeeded", "outcome": "succeeded", "ok": True, "text": None},
        {"step": 2, "action": "rejoin", "expected": "succeeded", "outcome": "failed", "ok": False, "text": ""}]}


def test_error_rate_slo_over_the_whole_run_when_nothing_stopped() -> None:
    """A fault that stopped no write (a pause of the replica pg2 at 1001 for 1 s, the run's window
    ending at 1001.5): the error-rate target is judged over the whole run: 77 failed or unknown of
    480 ops = 0.160417."""
    standby = InjectedFault(id="s", kind="pause", host="pg2", target="pg2", spec={}, t_scheduled=1001.0,
                            t_staged=1000.0, t_sent=1001.0, t_effect=1001.0, t_effect_host=1001.0,
                            t_apply_start=1001.0, t_applied=1001.0, offset_s=0.0, offset_uncertainty_s=0.0,
                            t_reverted=1002.0, step=0)
    rec = recorder()
    pb = playbook(slo={"max_error_rate_after_recovery": 0.5})
    results, _ = analyse(Ctx(pb, rec, Probe(probe()), [standby], ended=1001.5), {"ledger_present": {"rows": ACKED}})
    # window: the fault to the run's end (1001.5): no gap opened in it
    assert results["faults"][0]["outage"] is False
    # not ok: worker 1 k = 80 (info), 81..111 (31), 140, 141 = 34; worker 2 k = 82 (info), 83..123 (41), 160 = 43
    assert results["slo"]["max_error_rate_after_recovery"] == {
        "target": 0.5, "measured": 0.160417, "from": "whole run (no outage)", "ok": True}


def test_bank_update_and_convergence_checks_through_analyse() -> None:
    from chaoskit.recorder import Recorder

    # bank: the total drifted by -10
    pb = playbook(load={**PLAYBOOK["load"], "workload": "bank"}, checks=["bank"], slo={})
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]),
                         {"bank": {"accounts": 100, "total": 99_990, "expected": 100_000}})
    assert results["checks"]["bank"] == {"valid": False, "drift": -10, "accounts": 100, "total": 99_990,
                                         "expected": 100_000}
    assert results["verdict"] is False
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]), {"writer_error": "no writer: x"})
    assert results["checks"]["bank"] == {"valid": "unknown", "error": "no writer: x"}
    # update: rows 1 and 2 incremented; row 1 lost one of its two acknowledged increments
    rec = Recorder(T0, interval=0.125)
    for t, row in ((1001.0, 1), (1001.5, 1), (1002.0, 2)):
        rec.record(1, "write", t - 0.01, t, OK, key=row, keyed=VERSION)
    rec.finish()
    pb = playbook(load={**PLAYBOOK["load"], "workload": "update"}, checks=["rpo"], slo={"rpo_max_writes": 0})
    results, _ = analyse(Ctx(pb, rec, Probe(probe()), [kill()]),
                         {"versions": {"before": {1: 5, 2: 0}, "after": {1: 6, 2: 1}}})
    assert results["rpo"] == results["checks"]["rpo"]
    assert (results["rpo"]["lost_acknowledged"], results["rpo"]["acknowledged"], results["rpo"]["valid"]) == (1, 3,
                                                                                                             False)
    assert results["slo"]["rpo_max_writes"] == {"target": 0, "measured": 1, "ok": False}
    results, _ = analyse(Ctx(pb, rec, Probe(probe()), [kill()]), {"writer_error": "no writer: y"})
    assert results["checks"]["rpo"] == {"valid": "unknown", "error": "no writer: y"}
    # convergence: judged against the primary before the drill and the manager's name
    pb = playbook(slo={}, checks=["replica_convergence"])
    members = {"pg1": {"rows": 3, "seq_sum": 6, "role": "replica"}, "pg2": {"rows": 3, "seq_sum": 6, "role": "primary"}}
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]),
                         {"convergence": {"members": members, "waited_s": 0.5}})
    assert results["checks"]["replica_convergence"] == {
        "valid": True, "members": members, "waited_s": 0.5,
        "old_primary": {"host": "pg1", "role_now": "replica", "rejoined": True, "diverged": False,
                        "rewind": "unknown: not observable through patroni's interface (see the member's manager "
                                  "log)"}}


def test_a_check_without_a_verdict_makes_the_drill_undecided() -> None:
    pb = playbook(slo={}, checks=["replica_convergence"])
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]), {"convergence": {"error": "x"}})
    assert results["checks"]["replica_convergence"] == {"error": "x"} and results["verdict"] == "unknown"


def test_a_check_asked_for_is_never_dropped() -> None:
    """Every check of the playbook has a verdict: one whose truth was never read is unknown (and
    the drill undecided), with the writer's error where there was one."""
    pb = playbook(slo={}, checks=["rpo", "split_brain", "replica_convergence"])
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]), {"ledger_present": {"rows": ACKED - LOST}})
    assert results["checks"]["replica_convergence"] == {
        "valid": "unknown", "error": "nothing was read for the replica_convergence check"}
    assert results["verdict"] == "unknown" and set(results["checks"]) >= {"rpo", "split_brain"}
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]), {"writer_error": "no writer: z"})
    assert results["checks"]["replica_convergence"] == {"valid": "unknown", "error": "no writer: z"}
    assert results["checks"]["rpo"] == {"valid": "unknown", "error": "no writer: z"}


def test_each_window_ends_at_the_next_disturbance() -> None:
    standby = InjectedFault(id="s", kind="pause", host="pg2", target="pg2", spec={}, t_scheduled=1004.0,
                            t_staged=1002.5, t_sent=1004.0, t_effect=1004.0, t_effect_host=1004.0,
                            t_apply_start=1004.0, t_applied=1004.0, offset_s=0.0, offset_uncertainty_s=0.0,
                            t_reverted=1005.0, step=0)
    action = {"kind": "switchover", "member": "pg2", "t_sent": 1020.0, "t_scheduled": 1020.0, "step": 2, "ok": True}
    pb = playbook(steps=[{"at": "4s", "fault": {"kind": "pause", "target": "pg2", "processes": ["postgres"]}},
                         {"at": "10s", "fault": {"kind": "kill", "target": "role:primary"}},
                         {"at": "20s", "action": {"kind": "switchover"}}], baseline="4s", slo={})
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill(step=1), standby], actions=[action]),
                         {"ledger_present": {"rows": ACKED}})
    # disturbances in time order, whatever order they were recorded in
    assert [(f["id"], f["window_end"]) for f in results["faults"]] == [("s", 1010.0), ("f", 1020.0),
                                                                         ("action0", 1030.0)]


def test_every_workload_check_is_an_object_it_declares_and_an_advisory_one_never_fails_the_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.workload.checks import BankTotal, Check
    from chaoskit.workload.workloads import WORKLOADS

    for name, cls in WORKLOADS.items():
        declared = [c.name for c in cls.data_checks]
        assert len(set(declared)) == len(declared) and set(declared) <= set(cls.checks), name
        assert all(issubclass(c, Check) and c.severity in ("fail", "advisory") for c in cls.data_checks), name
    pb = playbook(load={**PLAYBOOK["load"], "workload": "bank"}, checks=["bank"], slo={})
    drifted = {"bank": {"accounts": 100, "total": 99_990, "expected": 100_000}}
    monkeypatch.setattr(BankTotal, "severity", "advisory")
    results, _ = analyse(Ctx(pb, recorder(), Probe(probe()), [kill()]), drifted)
    assert results["checks"]["bank"]["valid"] is False and results["verdict"] is True  # said, not failing
