"""The list-append workload without a server: the statements one transaction sends at each level
on each engine, what it records, the run's history as the anomalies check builds it (an element
whose transaction never arrived), the check's verdict against the engine's promise, and the
transactions kept in a spill file. Expected results are worked out by hand in the comments."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from chaoskit.db.base import Driver
from chaoskit.recorder import FAIL, INFO, OK, Recorder
from chaoskit.testing.fake_pg import FakePgDriver
from chaoskit.txnlog import TxnLog
from chaoskit.workload.checks import Judging
from chaoskit.workload.kinds.list_append import WORKER_BITS, Anomalies, ListAppend, history_of
from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, WorkloadParams


class _MyDriver:
    family = "mysql"

    @staticmethod
    def q(sql: str) -> str:
        return sql


class _DmDriver:
    """DM's parameter style (qmark) through the drivers' own rewrite."""

    family, placeholder = "dameng", "?"
    q = Driver.q


def _one_txn(workload: ListAppend, seed: int, reads: list[Any]) -> tuple[list[Any], OpContext]:
    """The statements of one transaction, each read answered from `reads` in turn."""
    ctx = OpContext(worker=5, rng=random.Random(seed), run_id="r")
    gen, sent, answer = workload.steps(ctx), [], None
    try:
        while True:
            stmt = gen.send(answer)
            sent.append(stmt)
            answer = reads.pop(0) if getattr(stmt, "rows", False) else None
    except StopIteration as done:
        assert done.value == ctx.kind
    return sent, ctx


@pytest.mark.parametrize("engine", ["postgres", "mysql", "dameng"])
def test_a_transaction_runs_at_its_level_and_records_what_it_did_and_read(engine: str) -> None:
    driver: Any = {"postgres": FakePgDriver([]), "mysql": _MyDriver(), "dameng": _DmDriver()}[engine]
    w = ListAppend(driver, WorkloadParams(isolation="serializable"), "r")
    w.prepare()
    # seed 3's plan (rng: ops count, then per op append-or-read and key), answered: every read finds
    # one row "4101,8197"
    sent, ctx = _one_txn(w, 3, [[("4101,8197",)]] * 4)
    level = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"
    # PostgreSQL and DM: the level is the transaction's first statement; InnoDB: said before it begins
    head = [level, BEGIN] if engine == "mysql" else [BEGIN, level]
    assert [s if s is BEGIN or s is COMMIT else s.sql for s in sent[:2]] == head and sent[-1] is COMMIT
    body = sent[2:-1]
    assert ctx.txn is not None and len(ctx.txn) == len(body) >= 1
    for stmt, op in zip(body, ctx.txn, strict=True):
        if op[0] == "append":
            key, value = stmt.params
            # a value is n * 4096 + the worker, and goes to the key the op names
            assert (op[1], str(op[2])) == (key, value) and op[2] % WORKER_BITS == 5
            assert {"postgres": "ON CONFLICT (k) DO UPDATE", "mysql": "ON DUPLICATE KEY UPDATE",
                    "dameng": "WHEN MATCHED THEN UPDATE SET t.v = t.v || ',' || s.v"}[engine] in stmt.sql
            # DM's statement takes qmark parameters, the key first, then the value
            assert engine != "dameng" or (stmt.sql.count("?"), "%s" in stmt.sql) == (2, False)
        else:
            assert op == ("r", stmt.params[0], (4101, 8197))
    assert ctx.kind == ("write" if any(op[0] == "append" for op in ctx.txn) else "read")
    assert ctx.phase == "commit"


def test_a_level_is_required_and_said_for_what_the_engine_promises() -> None:
    with pytest.raises(ValueError, match=r"needs load\.isolation"):
        ListAppend(FakePgDriver([]), WorkloadParams(), "r")
    assert "not oracle yet" in (ListAppend.engine_refusal("oracle", WorkloadParams(isolation="serializable")) or "")
    # DM offers read committed and serializable, and no repeatable read (dmPython's manual)
    assert "DM offers no repeatable read" in (
        ListAppend.level_refusal("dameng", WorkloadParams(isolation="repeatable read")) or "")
    with pytest.raises(ValueError, match="DM offers no repeatable read"):
        ListAppend(_DmDriver(), WorkloadParams(isolation="repeatable read"), "r")  # type: ignore[arg-type]
    for level, judged in (("read committed", "read-committed"), ("serializable", "serializable")):
        assert ListAppend.engine_refusal("dameng", WorkloadParams(isolation=level)) is None
        assert ListAppend.level_refusal("dameng", WorkloadParams(isolation=level)) is None
        assert ListAppend(_DmDriver(), WorkloadParams(isolation=level), "r").claim[0] == judged  # type: ignore[arg-type]
    assert ListAppend(FakePgDriver([]), WorkloadParams(isolation="repeatable read"), "r").claim[0] == \
        "snapshot-isolation"
    assert ListAppend(_MyDriver(), WorkloadParams(isolation="repeatable read"), "r").claim[0] == "read-committed"  # type: ignore[arg-type]


def _judging(rec: Recorder, t_fault: float | None = None) -> Judging:
    return Judging(rec, t_fault, None, 1, None)


def _truth(lists: dict[int, tuple[int, ...]], level: str = "serializable") -> dict[str, Any]:
    return {"lists": lists, "t_start": 100.0, "t_end": 100.1, "level": level, "claim": level}


def test_the_check_judges_the_run_and_its_final_read_against_the_claim() -> None:
    rec = Recorder(base=0.0)
    # worker 1 appended 4097 to key 1 and read key 2 as [8194] (worker 2's); worker 2 appended 8194
    # to key 2 and read key 1 as [4097]: each saw the other's write, T2 -wr-> T1 -wr-> T2 (G1c)
    rec.record(1, "write", 1.0, 1.5, OK, txn=(("append", 1, 4097), ("r", 2, (8194,))))
    rec.record(2, "write", 1.1, 1.6, OK, txn=(("append", 2, 8194), ("r", 1, (4097,))))
    rec.finish()
    got = Anomalies.judge(_truth({1: (4097,), 2: (8194,)}), _judging(rec, t_fault=1.0))
    assert got["valid"] is False and got["anomalies"] == {"G1c": 1} and got["transactions"] == 3
    assert got["text"] == ("1 anomaly that serializable forbids: G1c (T1 -wr(1)-> T2 -wr(2)-> T1) (3 transactions: "
                           "3 ok, 0 failed, 0 unknown)")
    [v] = got["violations"]
    assert v["cycle"] == "T1 -wr(1)-> T2 -wr(2)-> T1"
    assert [(t["id"], t["client"], t["start_s"], t["end_s"]) for t in v["transactions"]] == \
        [(1, 1, 0.0, 0.5), (2, 2, 0.1, 0.6)]


def test_an_anomaly_the_level_allows_is_said_and_passes() -> None:
    rec = Recorder(base=0.0)
    # both read key 1 empty and appended: a lost update (and with the final read [4097, 8194]:
    # T2 read [] missing T1's 4097, T1 -ww-> T2 and T2 -rw-> T1, a G-single), allowed at read committed
    rec.record(1, "write", 1.0, 1.5, OK, txn=(("r", 1, ()), ("append", 1, 4097)))
    rec.record(2, "write", 1.1, 1.6, OK, txn=(("r", 1, ()), ("append", 1, 8194)))
    rec.finish()
    got = Anomalies.judge(_truth({1: (4097, 8194)}, "read-committed"), _judging(rec))
    assert got["valid"] is True and got["anomalies"] == {"lost-update": 1, "G-single": 1}
    assert {a["kind"] for a in got["allowed"]} == {"lost-update", "G-single"} and not got["violations"]
    assert Anomalies.judge(_truth({1: (4097, 8194)}, "snapshot-isolation"), _judging(rec))["valid"] is False


def test_an_element_whose_transaction_never_arrived_is_an_indeterminate_append() -> None:
    rec = Recorder(base=0.0)
    rec.record(1, "write", 1.0, 1.5, OK, txn=(("append", 1, 4097),))
    rec.undelivered([3], "its loader was lost")
    rec.finish()
    # 3 * 4096... worker 3's value 12291 = 3 * 4096 + 3 is in the final read: its append is taken as
    # indeterminate (it happened), not as garbage; 9999 (9999 % 4096 = 1807, a worker that delivered
    # everything) is garbage
    h = history_of(rec, _truth({1: (4097, 12291, 9999)}))
    assert [(t.client, t.outcome, [(o.key, getattr(o, "value", None)) for o in t.ops]) for t in h[1:-1]] == \
        [(3, "info", [(1, 12291)])]
    got = Anomalies.judge(_truth({1: (4097, 12291, 9999)}), _judging(rec))
    assert got["anomalies"] == {"garbage-read": 1}
    # a batch that arrived after the end: its transactions are left out, its worker's appends unknown
    late = Recorder(base=0.0)
    late.record(4, "write", 1.0, 1.5, OK, txn=(("append", 1, 4100),))
    rec.merge(late.drain(2.0, final=True))
    assert rec.late_batches == 1 and rec.txns.count == 1
    h = history_of(rec, _truth({1: (4097, 12291, 4100)}))
    assert [(t.client, t.outcome) for t in h[1:-1]] == [(4, "info"), (3, "info")]  # by key, then value


def test_transactions_spill_to_a_file_and_read_back_in_order(tmp_path: Path) -> None:
    log = TxnLog(tmp_path)
    log.add([(1, 1.0, 2.0, OK, (("append", 1, 4097), ("r", 2, (1, 2))))])
    log.add([(2, 3.0, 4.0, INFO, (("append", 2, 8194),)), (2, 5.0, 6.0, FAIL, (("r", 1, None),))])
    assert (tmp_path / "txns.jsonl").exists() and log.count == 3
    assert list(log) == [(1, 1.0, 2.0, OK, (("append", 1, 4097), ("r", 2, (1, 2)))),
                         (2, 3.0, 4.0, INFO, (("append", 2, 8194),)), (2, 5.0, 6.0, FAIL, (("r", 1, None),))]
    log.close()


def test_dms_lists_are_varchar_since_dmpython_returns_text_as_a_lob() -> None:
    ran: list[str] = []

    class Dm(_DmDriver):
        table_suffix = ""

        def execute(self, conn: Any, sql: str, params: tuple = ()) -> int:
            ran.append(sql)
            return 0

    ListAppend(Dm(), WorkloadParams(isolation="read committed"), "r").setup(None)  # type: ignore[arg-type]
    assert ran == ["CREATE TABLE IF NOT EXISTS chaoskit_list_append (k BIGINT PRIMARY KEY, v VARCHAR(8188) NOT NULL)",
                   "DELETE FROM chaoskit_list_append"]


def test_the_read_committed_playbook_is_the_serializable_drill_at_read_committed() -> None:
    """pg-kill-primary-list-append-rc differs from the serializable drill (run shortened on the lab)
    only in its name, its description and its level: the lab test of one drills the other's steps."""
    import yaml

    ser, rc = (yaml.safe_load(Path(f"playbooks/pg-kill-primary-list-append{s}.yaml").read_text()) for s in ("", "-rc"))
    assert (ser["load"].pop("isolation"), rc["load"].pop("isolation")) == ("serializable", "read committed")
    for doc in (ser, rc):
        doc.pop("name"), doc.pop("description")
    assert ser == rc
