"""The list-append checker on hand-written histories: one per anomaly class and several without
any. Each expected anomaly, its transactions and its cycle are worked out by hand in the comment
above it (the dependency edges from the version orders), never taken from the checker."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chaoskit.elle.list_append import (
    Append,
    HistoryError,
    Read,
    Txn,
    check,
    forbidden_at,
)

SER = forbidden_at("serializable")


def a(key: int, value: int) -> Append:
    return Append(key, value)


def r(key: int, value: list[int] | None) -> Read:
    return Read(key, None if value is None else tuple(value))


def t(id_: int, *ops: Append | Read, client: int | None = None, start: float | None = None,
      end: float | None = None, outcome: str = "ok") -> Txn:
    """Transaction `id_`, by default on a client of its own over [id_, id_ + 0.5]."""
    s = float(id_) if start is None else start
    return Txn(id_, id_ if client is None else client, s, s + 0.5 if end is None else end, outcome,  # type: ignore[arg-type]
               tuple(ops))


def kinds(history: list[Txn], forbidden: frozenset[str] = SER, orders: tuple[str, ...] = ()) -> dict[str, int]:
    return check(history, forbidden, orders).counts  # type: ignore[arg-type]


def only(history: list[Txn], kind: str, orders: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    [found] = [x for x in check(history, SER, orders).anomalies if x.kind == kind]  # type: ignore[arg-type]
    return found


def test_histories_without_anomalies_have_none() -> None:
    serial = [t(1, a(1, 1)), t(2, r(1, [1]), a(1, 2)), t(3, r(1, [1, 2]), r(2, []))]
    assert kinds(serial, orders=("process", "realtime")) == {}
    # T2 began before T1 answered: reading x without T1's append is legal even in real time
    overlapping = [t(1, a(1, 1), start=0.0, end=1.0), t(2, r(1, []), start=0.5, end=0.7),
                   t(3, r(1, [1]), start=2.0, end=2.5)]
    assert kinds(overlapping, orders=("realtime",)) == {}
    # a transaction's reads after its own appends show them
    own = [t(1, a(1, 1), r(1, [1]), a(1, 2), r(1, [1, 2]))]
    assert kinds(own) == {}


def test_indeterminate_transactions_may_or_may_not_have_happened() -> None:
    # T1's append nobody read: left out (not lost: it was never acknowledged); T3's append T4 read:
    # it happened, and orders like a committed one (T4: wr from T3, no cycle)
    history = [t(1, a(1, 1), outcome="info"), t(2, r(1, [])), t(3, a(2, 5), outcome="info"), t(4, r(2, [5]))]
    got = check(history, SER)
    assert got.counts == {} and (got.txns, got.ok, got.failed, got.indeterminate) == (4, 2, 0, 2)


def test_g0_a_write_cycle() -> None:
    # x = key 1 ordered [1 (T1), 2 (T2)]: T1 -ww-> T2; y = key 2 ordered [3 (T2), 4 (T1)]: T2 -ww-> T1
    history = [t(1, a(1, 1), a(2, 4)), t(2, a(1, 2), a(2, 3)), t(3, r(1, [1, 2]), r(2, [3, 4]))]
    g0 = only(history, "G0")
    assert g0.txns == (1, 2)
    assert [(s.src, s.dst, s.kind, s.key) for s in g0.cycle] == [(1, 2, "ww", 1), (2, 1, "ww", 2)]
    assert kinds(history) == {"G0": 1}


def test_g1a_an_aborted_read() -> None:
    history = [t(1, a(1, 1), outcome="fail"), t(2, r(1, [1]))]
    assert only(history, "G1a").txns == (1, 2)
    assert kinds(history) == {"G1a": 1}


def test_g1b_an_intermediate_read_is_also_a_g_single() -> None:
    # T1 appended 1 then 2 to x; T2 read [1]: intermediate. Order [1, 2]: T1 -wr-> T2 (it ends at
    # T1's 1), T2 -rw-> T1 (it missed 2, appended next by T1): a cycle with one rw edge
    history = [t(1, a(1, 1), a(1, 2)), t(2, r(1, [1])), t(3, r(1, [1, 2]))]
    assert only(history, "G1b").txns == (1, 2)
    single = only(history, "G-single")
    assert [(s.src, s.dst, s.kind) for s in single.cycle] == [(2, 1, "rw"), (1, 2, "wr")]
    assert kinds(history) == {"G1b": 1, "G-single": 1}


def test_g1c_circular_information_flow() -> None:
    # T1 read y = [2] (T2's) and T2 read x = [1] (T1's): T2 -wr-> T1 and T1 -wr-> T2
    history = [t(1, a(1, 1), r(2, [2])), t(2, a(2, 2), r(1, [1]))]
    g1c = only(history, "G1c")
    assert [(s.src, s.dst, s.kind, s.key) for s in g1c.cycle] == [(1, 2, "wr", 1), (2, 1, "wr", 2)]
    assert kinds(history) == {"G1c": 1}


def test_g_single_read_skew() -> None:
    # T1 appended to x and y; T2 saw y's append (T1 -wr-> T2) but not x's (T2 -rw-> T1)
    history = [t(1, a(1, 1), a(2, 2)), t(2, r(1, []), r(2, [2])), t(3, r(1, [1]))]
    single = only(history, "G-single")
    assert single.txns == (2, 1) and [s.kind for s in single.cycle] == ["rw", "wr"]
    assert kinds(history) == {"G-single": 1}
    got = check(history, forbidden_at("read-committed"))
    assert not got.violations and [x.kind for x in got.allowed] == ["G-single"]
    assert [x.kind for x in check(history, forbidden_at("snapshot-isolation")).violations] == ["G-single"]


def test_g2_item_write_skew_is_allowed_by_snapshot_isolation_only_up_to_serializable() -> None:
    # T1 read x empty and appended to y; T2 read y empty and appended to x: x = [2] makes
    # T1 -rw-> T2, y = [1] makes T2 -rw-> T1; no cycle with fewer than two rw edges
    history = [t(1, r(1, []), a(2, 1)), t(2, r(2, []), a(1, 2)), t(3, r(1, [2]), r(2, [1]))]
    g2 = only(history, "G2-item")
    assert [(s.src, s.dst, s.kind) for s in g2.cycle] == [(1, 2, "rw"), (2, 1, "rw")]
    assert kinds(history) == {"G2-item": 1}
    assert not check(history, forbidden_at("snapshot-isolation")).violations
    assert [x.kind for x in check(history, SER).violations] == ["G2-item"]


def test_lost_update_two_appends_on_one_read_version() -> None:
    # T1 and T2 both read x = [] and appended: lost update; order [1, 2]: T1 -ww-> T2, and T2 -rw-> T1
    # (T2's read missed T1's 1): a G-single as well
    history = [t(1, r(1, []), a(1, 1)), t(2, r(1, []), a(1, 2)), t(3, r(1, [1, 2]))]
    assert only(history, "lost-update").txns == (1, 2)
    assert [(s.src, s.dst, s.kind) for s in only(history, "G-single").cycle] == [(2, 1, "rw"), (1, 2, "ww")]
    assert kinds(history) == {"lost-update": 1, "G-single": 1}
    assert not check(history, forbidden_at("read-committed")).violations


def test_incompatible_orders_duplicates_garbage_and_internal_reads() -> None:
    forked = [t(1, a(1, 1)), t(2, a(1, 2)), t(3, r(1, [1])), t(4, r(1, [2]))]
    assert only(forked, "incompatible-order").txns == (3, 4)
    assert kinds(forked) == {"incompatible-order": 1}  # and its reads make no edges
    assert kinds([t(1, a(1, 1)), t(2, r(1, [1, 1]))]) == {"duplicate-elements": 1}
    assert kinds([t(1, a(1, 1)), t(2, r(1, [1, 9]))]) == {"garbage-read": 1}
    assert kinds([t(1, a(1, 1), r(1, []))]) == {"internal": 1}  # its own append not shown
    assert kinds([t(1, r(1, []), a(1, 1), r(1, [1, 7]))]) == {"internal": 1, "garbage-read": 1}
    # between two reads of one transaction others' appends showed up: a non-repeatable read, which
    # read committed allows and snapshot levels forbid; with its own append between the reads (as
    # InnoDB's repeatable read does once it wrote the row), the same; what it read going missing
    # is internal at any level
    writers = [t(1, a(1, 2), start=0.0, end=0.5), t(2, a(1, 5), start=1.5, end=2.0)]  # T3 spans 1.0 to 3.0
    nonrep = [*writers, t(3, r(1, [2]), r(1, [2, 5]), start=1.0, end=3.0)]
    assert only(nonrep, "non-repeatable-read").txns == (3,)
    assert not check(nonrep, forbidden_at("read-committed")).violations
    assert [x.kind for x in check(nonrep, forbidden_at("snapshot-isolation")).violations] == ["non-repeatable-read"]
    # ... and since its append came after T2's 5, which its first read missed: T2 -ww-> T3 -rw-> T2
    assert kinds([*writers, t(3, r(1, [2]), a(1, 9), r(1, [2, 5, 9]), start=1.0, end=3.0)]) == \
        {"non-repeatable-read": 1, "G-single": 1}
    assert kinds([*writers, t(3, r(1, [2, 5]), r(1, [2]), start=1.0, end=3.0)])["internal"] == 1
    assert kinds([*writers, t(3, r(1, [2]), a(1, 9), r(1, [2, 9, 5]), start=1.0, end=3.0)])["internal"] == 1
    # every one of these fails a drill at any level
    for level in ("read-committed", "serializable"):
        assert check(forked, forbidden_at(level)).violations


def test_an_acknowledged_append_missing_from_a_later_read_is_lost() -> None:
    # T1 answered at 0.5; T3 began at 3.0 and read x without T1's 1 (T2's 2 is there): lost
    history = [t(1, a(1, 1), start=0.0, end=0.5), t(2, a(1, 2), start=1.0, end=1.5),
               t(3, r(1, [2]), start=3.0, end=3.5)]
    lost = only(history, "lost-append")
    assert lost.txns == (1, 3) and "begun 2.500 s after" in lost.explanation
    assert kinds(history) == {"lost-append": 1}
    # a read begun before the append was answered may miss it
    assert kinds([t(1, a(1, 1), start=0.0, end=2.0), t(2, r(1, []), start=1.0, end=1.5)]) == {}


def test_real_time_and_client_order_make_a_stale_read_a_cycle_when_asked() -> None:
    # T1 answered at 1.0, T2 began at 2.0 and read x without T1's 1 (a later read has it): without an
    # order that is legal (T2 serializes first); with real time T1 -rt-> T2 and T2 -rw-> T1
    history = [t(1, a(1, 1), client=1, start=0.0, end=1.0), t(2, r(1, []), client=1, start=2.0, end=3.0),
               t(3, r(1, [1]), client=2, start=4.0, end=5.0)]
    assert kinds(history) == {}
    rt = only(history, "G-single-realtime", orders=("realtime",))
    assert [(s.src, s.dst, s.kind) for s in rt.cycle] == [(2, 1, "rw"), (1, 2, "realtime")]
    proc = only(history, "G-single-process", orders=("process",))
    assert [(s.src, s.dst, s.kind) for s in proc.cycle] == [(2, 1, "rw"), (1, 2, "process")]
    assert "G-single-realtime" in forbidden_at("serializable", ["realtime"])
    # T2 (on key y) was begun before T1 answered and answered after it: both precede T3 in real
    # time (the frontier at T3's start holds both), so T1 -rt-> T3 and T3 -rw-> T1
    overlap = [t(1, a(1, 1), start=0.0, end=1.0), t(2, a(2, 2), start=0.5, end=1.5),
               t(3, r(1, []), start=2.0, end=3.0), t(4, r(1, [1]), r(2, [2]), start=4.0, end=5.0)]
    rt = only(overlap, "G-single-realtime", orders=("realtime",))
    assert [(s.src, s.dst, s.kind) for s in rt.cycle] == [(3, 1, "rw"), (1, 3, "realtime")]
    assert "G-single-realtime" not in forbidden_at("serializable")
    # after no answer its client went on blind: no client order from an indeterminate transaction
    blind = [t(1, a(1, 1), client=1, start=0.0, end=1.0, outcome="info"),
             t(2, r(1, []), client=1, start=2.0, end=3.0), t(3, r(1, [1]), client=2, start=4.0, end=5.0)]
    assert kinds(blind, orders=("process", "realtime")) == {}


def test_a_history_that_is_not_list_append_is_refused() -> None:
    with pytest.raises(HistoryError, match="value 1 appended to key 1 twice"):
        check([t(1, a(1, 1)), t(2, a(1, 1))], SER)
    with pytest.raises(HistoryError, match="transaction 1 is ok but its read of key 1 has no value"):
        check([t(1, r(1, None))], SER)
    with pytest.raises(ValueError, match="unknown isolation level 'snapshot'"):
        forbidden_at("snapshot")


def test_a_serial_execution_has_no_anomaly_in_any_order() -> None:
    """A database that runs one transaction at a time, simulated here: whatever it ran, every read
    is the state then, so no anomaly exists (the expected result is known by construction)."""
    rng = random.Random(7)
    state: dict[int, list[int]] = {}
    history, clock, value = [], 0.0, 0
    for tid in range(1, 2001):
        ops: list[Append | Read] = []
        for _ in range(rng.randint(1, 4)):
            key = rng.randint(1, 8)
            if rng.random() < 0.5:
                value += 1
                state.setdefault(key, []).append(value)
                ops.append(a(key, value))
            else:
                ops.append(r(key, list(state.get(key, []))))
        history.append(Txn(tid, rng.randint(1, 5), clock, clock + 0.001, "ok", tuple(ops)))
        clock += 0.002
    assert kinds(history, orders=("process", "realtime")) == {}


def test_the_elle_export_round_trips_and_jepsen_histories_read_in() -> None:
    from chaoskit.elle.edn import read_edn, to_edn

    history = [t(1, a(1, 1), r(2, []), client=3, start=100.0, end=100.25),
               t(2, r(1, [1]), a(2, 5), client=4, start=100.125, end=100.5),
               t(3, a(1, 2), client=3, start=100.5, end=101.0, outcome="info"),
               t(4, a(2, 6), r(1, None), client=3, start=101.5, end=102.0, outcome="fail")]
    text = to_edn(history)
    lines = text.splitlines()
    assert len(lines) == 8
    assert lines[0] == ("{:type :invoke, :f :txn, :value [[:append 1 1] [:r 2 nil]], :time 0, :process 3, "
                        ":index 0, :txn 1, :client 3}")
    assert ":type :ok, :f :txn, :value [[:r 1 [1]] [:append 2 5]], :time 500000000, :process 4" in text
    # after its indeterminate T3 client 3 goes on as a new process (5: one past the largest client)
    assert ":type :info, :f :txn, :value [[:append 1 2]], :time 1000000000, :process 3" in text
    assert ":type :invoke, :f :txn, :value [[:append 2 6] [:r 1 nil]], :time 1500000000, :process 5" in text
    back = sorted(read_edn(text), key=lambda x: x.id)
    assert back == [Txn(x.id, x.client, x.start - 100.0, x.end - 100.0, x.outcome, x.ops) for x in history]
    # Jepsen's own form (no :txn, :client): ids are the invocations' indexes, clients the processes;
    # T0 read y = [5] (T1's append) while T1 read x = [1] (T0's): T1 -wr-> T0 -wr-> T1, a G1c
    jepsen = """[{:type :invoke, :f :txn, :value [[:append 1 1] [:r 2 nil]], :process 0, :time 10, :index 0}
{:type :invoke, :f :txn, :value [[:append 2 5] [:r 1 nil]], :process 1, :time 20, :index 1}
{:type :ok, :f :txn, :value [[:append 1 1] [:r 2 [5]]], :process 0, :time 30, :index 2}
{:type :ok, :f :txn, :value [[:append 2 5] [:r 1 [1]]], :process 1, :time 40, :index 3}]"""
    txns = read_edn(jepsen)
    assert [(x.id, x.client, x.outcome) for x in txns] == [(0, 0, "ok"), (1, 1, "ok")]
    assert check(txns, SER).counts == {"G1c": 1}
    with pytest.raises(HistoryError, match="operation 2 \\(process 0\\): invoked while its previous"):
        read_edn("{:type :invoke, :process 0, :value []}\n{:type :invoke, :process 0, :value []}")


def test_the_command_judges_a_history_file_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from chaoskit.cli import app

    # T1 read y = [5] (T2's), T2 read x = [1] (T1's): G1c, forbidden at every level
    (tmp_path / "h.edn").write_text(
        "{:type :invoke, :f :txn, :value [[:append 1 1] [:r 2 nil]], :process 0, :time 10, :index 0}\n"
        "{:type :invoke, :f :txn, :value [[:append 2 5] [:r 1 nil]], :process 1, :time 20, :index 1}\n"
        "{:type :ok, :f :txn, :value [[:append 1 1] [:r 2 [5]]], :process 0, :time 30, :index 2}\n"
        "{:type :ok, :f :txn, :value [[:append 2 5] [:r 1 [1]]], :process 1, :time 40, :index 3}\n")
    res = CliRunner().invoke(app, ["anomalies", str(tmp_path / "h.edn"), "--isolation", "read-committed"])
    assert res.exit_code == 1 and "T0 -wr(1)-> T1 -wr(2)-> T0" in res.output and "1 anomaly read-committed forbids" \
        in res.output
    (tmp_path / "bad.edn").write_text("{:type :invoke, :f :txn, :value [], :process 0}\n"
                                      "{:type :ok, :f :txn, :value [[:append 1 \"x\"]], :process 0}\n")
    res = CliRunner().invoke(app, ["anomalies", str(tmp_path / "bad.edn")])
    assert res.exit_code == 2 and f"{tmp_path / 'bad.edn'}:2: operation 2 (process 0): not a list-append" \
        in res.output.replace("\n", "")


def test_a_client_that_begins_at_the_instant_it_was_answered_exports_in_order() -> None:
    from chaoskit.elle.edn import read_edn, to_edn

    # T2 begins when T1 is answered (the same instant), T3 begins and ends at one instant, and the
    # final read (client -1) is a process of its own
    history = [t(1, a(1, 1), client=2, start=10.0, end=10.5), t(2, r(1, [1]), client=2, start=10.5, end=11.0),
               t(3, a(1, 2), client=2, start=11.0, end=11.0, outcome="info"), t(4, r(1, [1, 2]), client=-1,
                                                                                    start=12.0, end=12.1)]
    text = to_edn(history)
    kinds_in_order = [(line.split(":type :")[1].split(",")[0], line.split(":txn ")[1].split(",")[0])
                      for line in text.splitlines()]
    assert kinds_in_order == [("invoke", "1"), ("ok", "1"), ("invoke", "2"), ("ok", "2"), ("invoke", "3"),
                              ("info", "3"), ("invoke", "4"), ("ok", "4")]
    # processes past the largest client (2): 3 for client 2 after its indeterminate T3, 4 for the final read
    assert ":process 4, " in text.splitlines()[-1]
    back = {x.id: x for x in read_edn(text)}
    assert back[3].end - back[3].start == pytest.approx(1e-9) and back[4].client == -1
