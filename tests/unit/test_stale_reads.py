"""The stale-reads judgement on a hand-written history: every figure below is worked out by hand
from the history in the comments, never by the code under test."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaoskit.db.base import Driver
from chaoskit.errors import InputError
from chaoskit.inventory.loader import load_inventory
from chaoskit.inventory.models import Cluster
from chaoskit.playbook.loader import load_playbook
from chaoskit.recorder import FAIL, INFO, OK, Batch
from chaoskit.stats import nearest_rank
from chaoskit.testing.fake_pg import FakePgDriver
from chaoskit.txnlog import TxnLog
from chaoskit.workload import wire
from chaoskit.workload.checks import Judging
from chaoskit.workload.kinds.stale_reads import StaleReadCheck, StaleReads, judge_reads, lost_writes
from chaoskit.workload.workloads import BEGIN, COMMIT, WORKLOADS, OpContext, WorkloadParams

ROOT = Path(__file__).resolve().parents[2]
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")

T_FAULT, T_RECOVERED = 10.0, 20.0


def s(reg: int, value: int) -> tuple[str, int, int]:
    return ("set", reg, value)


def g(reg: int, value: int) -> tuple[str, int, int]:
    return ("get", reg, value)


# writers 1 and 2 set their registers; readers 5 and 6 read both (paired 5->1, 6->2)
HISTORY: list[tuple[int, float, float, str, tuple[tuple[Any, ...], ...]]] = [
    (1, 1.0, 1.1, OK, (s(1, 100),)),
    (1, 2.0, 2.1, OK, (s(1, 200),)),
    (1, 11.0, 11.2, INFO, (s(1, 300),)),  # outcome unknown
    (1, 12.0, 12.1, OK, (s(1, 400),)),
    (2, 1.5, 1.6, OK, (s(2, 150),)),
    (2, 3.0, 3.05, FAIL, (s(2, 250),)),  # failed: never there
    (2, 21.0, 21.1, OK, (s(2, 350),)),
    # R8: sees 100 before anyone wrote it (W1 invoked at 1.0): phantom
    (6, 0.5, 0.6, OK, (g(1, 100),)),
    # R1: before. missed 1:200 (acked 2.1): 1 write, 0.4 s; its writer 1's own write: read-your-writes
    (5, 2.5, 2.6, OK, (g(1, 100), g(2, 150))),
    # R2: before, fresh
    (5, 3.0, 3.1, OK, (g(1, 200), g(2, 150))),
    # R3: before, sees 2:250, the failed write: phantom
    (6, 4.0, 4.1, OK, (g(1, 200), g(2, 250))),
    # R4: during. misses 1:200 and 1:400 (acked 2.1, 12.1): 2 writes, 12.5 - 2.1 = 10.4 s; reader 5
    # had seen 1:200: back by one write (200), monotonic; its writer 1: read-your-writes
    (5, 12.5, 12.6, OK, (g(1, 100), g(2, 150))),
    # R5: during. 1:300 is the unknown write (invoked 11.0): legal; misses 1:400: 1 write, 0.9 s;
    # reader 6's earlier 2:250 was a phantom, so 2:150 is not going back
    (6, 13.0, 13.1, OK, (g(1, 300), g(2, 150))),
    # R6: after, fresh
    (5, 22.0, 22.1, OK, (g(1, 400), g(2, 350))),
    # R7: failed
    (6, 23.0, 23.05, FAIL, ()),
]


def test_every_figure_of_a_hand_written_history() -> None:
    got = judge_reads(HISTORY, T_FAULT, T_RECOVERED)
    assert (got["reads"], got["failed_reads"], got["readers"], got["writers"]) == (7, 1, [5, 6], [1, 2])
    assert got["pairs"] == {"5": 1, "6": 2}
    before, during, after = (got["phases"][p] for p in ("before", "during", "after"))
    # before: R8, R1, R2, R3 -> staleness in writes [0, 1, 0, 0], seconds [0, 0.4, 0, 0]
    assert (before["reads"], before["stale_reads"]) == (4, 1)
    assert before["staleness_writes"] == {"median": 0, "p99": 1, "max": 1}
    assert before["staleness_s"] == {"median": 0.0, "p99": 0.4, "max": 0.4}
    assert (before["monotonic_read_violations"], before["read_your_writes_violations"], before["phantom_reads"]) \
        == (0, 1, 2)
    # during: R4 (2 writes, 10.4 s), R5 (1 write, 0.9 s)
    assert (during["reads"], during["stale_reads"]) == (2, 2)
    assert during["staleness_writes"] == {"median": 1, "p99": 2, "max": 2}
    assert during["staleness_s"]["median"] == pytest.approx(0.9) and during["staleness_s"]["max"] == pytest.approx(10.4)
    assert (during["monotonic_read_violations"], during["read_your_writes_violations"], during["phantom_reads"]) \
        == (1, 1, 0)
    # after: R6, fresh
    assert (after["reads"], after["stale_reads"], after["staleness_writes"]["max"]) == (1, 0, 0)
    # the whole run: writes [0,0,0,0,1,1,2] (nearest rank: median the 4th, p99 the 7th)
    assert got["staleness_writes"] == {"median": 0, "p99": 2, "max": 2}
    assert got["staleness_s"]["median"] == 0.0 and got["staleness_s"]["max"] == pytest.approx(10.4)
    assert (got["stale_reads"], got["monotonic_read_violations"], got["read_your_writes_violations"],
            got["phantom_reads"]) == (3, 1, 2, 2)
    [mono] = got["examples"]["monotonic"]
    assert mono == {"client": 5, "start_s": 2.5, "end_s": 2.6, "back_writes": 1, "registers": [1]}
    assert [(e["client"], e["start_s"], e["saw"]) for e in got["examples"]["phantom"]] == [
        (6, -9.5, [{"register": 1, "value": 100}]), (6, -6.0, [{"register": 2, "value": 250}])]
    ryw = [(e["client"], e["saw"], e["acknowledged"]) for e in got["examples"]["ryw"]]
    assert ryw == [(5, 100, 200), (5, 100, 400)]


def test_one_groups_readers_alone() -> None:
    got = judge_reads(HISTORY, T_FAULT, T_RECOVERED, workers={6})
    # reader 6: R8, R3 (before), R5 (during), R7 failed
    assert (got["reads"], got["failed_reads"], got["readers"], got["pairs"]) == (3, 1, [6], {"6": 2})
    assert got["phases"]["during"]["staleness_writes"] == {"median": 1, "p99": 1, "max": 1}
    assert "after" not in got["phases"] and got["phantom_reads"] == 2
    writers = judge_reads(HISTORY, T_FAULT, T_RECOVERED, workers={1, 2})  # a group that only writes
    assert (writers["reads"], writers["failed_reads"], writers["readers"], writers["pairs"]) == (0, 0, [], {})


def test_without_a_fault_every_read_is_before_it() -> None:
    got = judge_reads(HISTORY, None, None)
    assert list(got["phases"]) == ["before"] and got["phases"]["before"]["reads"] == 7


ALL = {(1, 100), (1, 200), (1, 400), (2, 150), (2, 350)}  # the five acknowledged writes


def test_lost_writes_against_the_log_after_recovery() -> None:
    assert lost_writes(HISTORY, ALL) == {"acknowledged_writes": 5, "lost_acknowledged": 0, "lost_by_register": {},
                                         "phantom_writes": 0, "phantom_sample": []}
    assert lost_writes(HISTORY, ALL | {(1, 300)})["phantom_writes"] == 0  # the unknown write: there or not
    got = lost_writes(HISTORY, ALL - {(1, 400), (1, 200)})
    assert (got["lost_acknowledged"], got["lost_by_register"]) == (2, {"1": 2})
    got = lost_writes(HISTORY, ALL | {(2, 250), (3, 7)})  # the failed write's row, and one nobody wrote
    assert (got["phantom_writes"], got["phantom_sample"]) == (2, [[2, 250], [3, 7]])


def test_the_check_fails_on_phantoms_and_loss_and_not_on_staleness() -> None:
    log = TxnLog()
    log.add(HISTORY)
    rec = SimpleNamespace(txns=log, ledger_undelivered=lambda: SimpleNamespace(workers=lambda: []))
    j = Judging(rec, T_FAULT, None, 2, None, T_RECOVERED)  # type: ignore[arg-type]
    bad = StaleReadCheck.judge({"written": sorted(ALL)}, j)
    assert bad["valid"] is False and bad["phantom_reads"] == 2 and bad["lost_acknowledged"] == 0
    clean = [t for t in HISTORY if not (t[0] == 6 and t[1] in (0.5, 4.0))]  # R8 and R3 gone
    log2 = TxnLog()
    log2.add(clean)
    rec2 = SimpleNamespace(txns=log2, ledger_undelivered=lambda: SimpleNamespace(workers=lambda: []))
    ok = StaleReadCheck.judge({"written": sorted(ALL)}, Judging(rec2, T_FAULT, None, 2, None,  # type: ignore[arg-type]
                                                                T_RECOVERED))
    assert ok["valid"] is True and ok["stale_reads"] == 3 and ok["monotonic_read_violations"] == 1
    assert "3 stale" in ok["text"] and "0 of 5 acknowledged writes lost" in ok["text"]
    # a reader whose writer's results never arrived: its values are not phantoms
    rec3 = SimpleNamespace(txns=log, ledger_undelivered=lambda: SimpleNamespace(workers=lambda: [1, 2]))
    assert StaleReadCheck.judge({"written": sorted(ALL)}, Judging(rec3, T_FAULT, None, 2, None,  # type: ignore[arg-type]
                                                                  T_RECOVERED))["phantom_reads"] == 0
    lost = StaleReadCheck.judge({"written": sorted(ALL - {(2, 350)})}, Judging(rec2, T_FAULT, None, 2, None,  # type: ignore[arg-type]
                                                                               T_RECOVERED))
    assert lost["valid"] is False and lost["lost_acknowledged"] == 1
    assert "1 of 5 acknowledged writes lost" in lost["text"]


def test_nearest_rank_and_a_phase_without_reads() -> None:
    assert judge_reads([], None, None)["phases"]["before"]["staleness_s"] == {"median": None, "p99": None, "max": None}
    assert nearest_rank(sorted([3.0, 1.0, 2.0]), 50) == 2.0  # ceil(1.5) = the 2nd
    assert nearest_rank([float(x) for x in range(1, 101)], 99) == 99.0
    assert nearest_rank([float(x) for x in range(1, 201)], 99) == 198.0


def test_a_read_route_and_what_may_run_on_it() -> None:
    base = {"name": "r", "engine": "postgres", "user": "u", "members": ["h1"], "read_route": True}
    assert Cluster.model_validate({**base, "dsn": "host=a,b target_session_attrs=prefer-standby"}).read_route
    with pytest.raises(ValueError, match="target_session_attrs=read-write, the writer"):
        Cluster.model_validate({**base, "dsn": "host=a,b target_session_attrs=read-write"})
    # DM: members in order (the first that answers), or a service name whose dm_svc.conf sends
    # clients to a standby; one that sends them to the primary is the writer's route
    dm = {**base, "engine": "dameng", "port": 5236}
    assert Cluster.model_validate(dm).read_route
    for mode in (2, 3):
        assert Cluster.model_validate({**dm, "dsn": "DMR", "dm_svc": {"login_mode": mode}}).read_route
    for mode in (0, 1):
        with pytest.raises(ValueError, match=f"login_mode {mode} sends clients to the primary"):
            Cluster.model_validate({**dm, "dsn": "DMR", "dm_svc": {"login_mode": mode}})
    assert WORKLOADS["stale-reads"].route_refusal(1, 1) is None
    assert "needs a group that reads" in (WORKLOADS["stale-reads"].route_refusal(0, 2) or "")
    assert "writes, and a read route" in (WORKLOADS["ledger"].route_refusal(1, 1) or "")
    assert WORKLOADS["ledger"].route_refusal(0, 3) is None
    assert WORKLOADS["read"].route_refusal(2, 1) is None  # it only reads (its table set up through the writer)


def test_sets_and_gets_cross_the_agents_wire_as_numbers() -> None:
    sent = Batch(txns=[(5, 1.0, 1.1, OK, (g(1, 100), g(2, 150))), (1, 2.0, 2.1, INFO, (s(1, 200),))])
    assert wire.decode(wire.encode(sent)).txns == sent.txns
    bent = Batch(txns=[(5, 1.0, 1.1, OK, (("get", 1, (100,)),))])  # a register's get carries one value
    with pytest.raises(wire.WireError, match="a register's set and get carry a value"):
        wire.decode(wire.encode(bent))


def _steps(workload: Any, worker: int, rows: list[Any]) -> tuple[list[Any], OpContext]:
    ctx = OpContext(worker=worker, rng=random.Random(1), run_id="r")
    gen, sent, answer = workload.steps(ctx), [], None
    try:
        while True:
            stmt = gen.send(answer)
            sent.append(stmt)
            answer = rows if getattr(stmt, "rows", False) else None
    except StopIteration as done:
        assert done.value == ctx.kind
    return sent, ctx


def test_a_writer_sets_its_register_and_logs_the_write_in_one_transaction_and_a_reader_reads_them_all() -> None:
    writer_driver = FakePgDriver([])
    w = StaleReads(writer_driver, WorkloadParams(), "r")
    w.prepare()
    first, ctx1 = _steps(w, 3, [])
    _, ctx2 = _steps(w, 3, [])
    assert first[0] is BEGIN and first[-1] is COMMIT and ctx1.phase == "commit" and ctx1.kind == "write"
    log, upsert = first[1], first[2]
    assert "INSERT INTO chaoskit_register_log" in log.sql and "ON CONFLICT (w) DO UPDATE" in upsert.sql
    [(f, reg, v1)] = ctx1.txn or []
    [(_, _, v2)] = ctx2.txn or []
    assert (f, reg) == ("set", 3) and log.params == upsert.params == (3, v1) and v2 > v1  # its values only grow
    # DM has no upsert: a MERGE, qmark parameters in the same order (register, value)
    dm: Any = type("Dm", (), {"family": "dameng", "placeholder": "?", "q": Driver.q,
                               "cluster": writer_driver.cluster})()
    wd = StaleReads(dm, WorkloadParams(), "r")
    wd.prepare()
    dm_sent, dm_ctx = _steps(wd, 3, [])
    dm_log, dm_set = dm_sent[1], dm_sent[2]
    assert dm_set.sql.startswith("MERGE INTO chaoskit_registers t USING (SELECT CAST(? AS INT) AS w, CAST(? AS BIGINT)")
    assert "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT (w, v) VALUES (s.w, s.v)" in dm_set.sql
    assert dm_log.sql == "INSERT INTO chaoskit_register_log (w, v) VALUES (?, ?)"
    assert dm_set.params == dm_log.params == (3, (dm_ctx.txn or [])[0][2])
    reader_driver = FakePgDriver([])
    reader_driver.cluster = reader_driver.cluster.model_copy(update={"read_route": True})
    r = StaleReads(reader_driver, WorkloadParams(), "r")
    r.prepare()
    sent, ctx = _steps(r, 7, [(3, v1), (4, 17)])
    assert [s.sql for s in sent] == ["SELECT w, v FROM chaoskit_registers"] and ctx.kind == "read"
    assert ctx.txn == [("get", 3, v1), ("get", 4, 17)] and ctx.phase == "pre"


def _playbook(tmp_path: Path, groups: str) -> Path:
    text = (ROOT / "playbooks" / "pg-read-route-failover.yaml").read_text()
    start = text.index("  groups:\n")
    end = text.index("probes:")
    path = tmp_path / "p.yaml"
    path.write_text(text[:start] + groups + text[end:])
    return path


@pytest.mark.parametrize(("groups", "field", "said"), [
    ("  groups: [{name: w, workers: 2}]\n", "load.groups", "needs a group that reads through a read route"),
    ("  groups: [{name: r, workers: 2, route: pg-read}]\n", "load.groups", "and one that writes"),
    ("  groups: [{name: w, workers: 2}, {name: r, workers: 2, route: pg-read, tool: pgbench}]\n",
     "p.yaml:17: load.groups[1].route", "route 'pg-read' is a read route: pgbench writes"),
])
def test_a_playbook_without_both_routes_is_refused_on_one_line(tmp_path: Path, groups: str, field: str,
                                                                said: str) -> None:
    with pytest.raises(InputError) as caught:
        load_playbook(_playbook(tmp_path, groups), LAB)
    line = str(caught.value)
    assert said in line and field in line and "\n" not in line


def test_a_writing_workload_through_a_read_route_and_a_read_route_as_the_drills_cluster_are_refused(
        tmp_path: Path) -> None:
    text = (ROOT / "playbooks" / "pg-read-route-failover.yaml").read_text()
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text(text.replace("workload: stale-reads", "workload: ledger").replace("checks: [stale_reads, ",
                                                                                         "checks: [rpo, "))
    with pytest.raises(InputError, match="the ledger workload writes, and a read route"):
        load_playbook(ledger, LAB)
    on_route = tmp_path / "route.yaml"
    on_route.write_text(text.replace("cluster: pg\n", "cluster: pg-read\n"))
    with pytest.raises(InputError, match=r"is a read route .* a drill's cluster is the writer's"):
        load_playbook(on_route, LAB)
    assert load_playbook(ROOT / "playbooks" / "mha-read-route-failover.yaml", LAB).playbook.load.workload_name == \
        "stale-reads"


def test_clients_of_one_process_interleaved_each_log_and_set_the_value_they_recorded() -> None:
    w = StaleReads(FakePgDriver([]), WorkloadParams(), "r")
    w.prepare()
    a, b = OpContext(worker=1, rng=random.Random(1), run_id="r"), OpContext(worker=2, rng=random.Random(2), run_id="r")
    ga, gb = w.steps(a), w.steps(b)
    assert next(ga) is BEGIN and next(gb) is BEGIN  # the loop runs one client's statement, then another's
    sent = {1: [ga.send(None), ga.send(None)], 2: [gb.send(None), gb.send(None)]}
    for worker, ctx in ((1, a), (2, b)):
        [(_, reg, value)] = ctx.txn or []
        assert reg == worker and [s.params for s in sent[worker]] == [(worker, value)] * 2


def test_the_report_has_the_table_by_group_and_phase_and_the_first_examples(tmp_path: Path) -> None:
    from chaoskit.report.rundir import RunDirectory
    from chaoskit.report.writer import render

    log = TxnLog()
    log.add(HISTORY)
    rec = SimpleNamespace(txns=log, ledger_undelivered=lambda: SimpleNamespace(workers=lambda: []))
    j = Judging(rec, T_FAULT, None, 2, None, T_RECOVERED)  # type: ignore[arg-type]
    check = StaleReadCheck.judge({"written": sorted(ALL)}, j)
    group = StaleReadCheck.judge_group(None, j, {5, 6}, None, {})
    rd = RunDirectory.create(tmp_path, "drill", 1_800_000_000.0)
    rd.close()
    rd.write_json("run.json", {
        "schema_version": 3, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
            "name": "drill", "description": "", "load": {"workload": "stale-reads", "workers": 4}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": "ops@host", "run_id": "r", "started": 1_800_000_000.0,
        "ended": 1_800_000_060.0, "aborted": None, "ha": {}, "server": {}, "roles_before": [],
        "faults_injected": [], "actions": [],
        "results": {"verdict": False, "faults": [], "checks": {"stale_reads": check}, "slo": {},
                    "groups": {"writers": {"profile": "deadline", "workers": [1, 2]},
                               "replica-reads": {"profile": "deadline", "workers": [5, 6], "stale_reads": group}}}})
    render(rd.path, signed=False)
    html = (rd.path / "report.html").read_text()
    assert "Reads through read routes" in html and "5&rarr;1, 6&rarr;2" in html
    # replica-reads during the fault: R4 and R5, both stale, 10.400 s at most, one went back
    assert "<tr><td>replica-reads</td><td>during</td><td>2</td><td>2</td>" in html
    assert "First reads that phantom: client 6 at -9.500 s (register 1 = 100)" in html
    assert "First reads that went back: client 5 at 2.500 s (1 writes back)" in html
