"""The load runner over load sources: the close rule on a fake clock, and the runner driven by the
scripted sources of chaoskit/testing (delays, a hole, a lost source, a clock offset)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chaoskit.recorder import Recorder
from chaoskit.testing.fake_pg import FakePgDriver, fake_inventory
from chaoskit.testing.source import FakeSource
from chaoskit.workload.durability import rpo_check
from chaoskit.workload.runner import LoadRunner
from chaoskit.workload.source import SILENT_S, Watermarks
from chaoskit.workload.spec import LoadSpec

ALIVE = {"a": True, "b": True}


# -- the close rule ---------------------------------------------------------------------------
def test_an_interval_closes_when_every_live_source_has_passed_it() -> None:
    marks = Watermarks(["a", "b"], now=100.0)
    assert marks.close_before(ALIVE) is None  # nobody delivered yet
    marks.delivered("a", 50, 100.2)
    assert marks.close_before(ALIVE) is None  # b has delivered nothing yet
    marks.delivered("b", 47, 100.3)
    assert marks.close_before(ALIVE) == 47
    marks.delivered("b", 52, 100.4)
    assert marks.close_before(ALIVE) == 50
    marks.delivered("a", 1 << 62, 100.5, final=True)  # a is done: it holds nothing back
    assert marks.close_before(ALIVE) == 52 and marks.finals() == 1


def test_a_silent_source_is_left_out_after_two_seconds_and_counted_again_when_it_speaks() -> None:
    marks = Watermarks(["a", "b"], now=100.0)
    marks.delivered("a", 10, 100.1)
    marks.delivered("b", 10, 100.1)
    marks.delivered("a", 40, 102.0)
    assert marks.newly_silent(102.0, ALIVE) == [] and marks.close_before(ALIVE) == 10  # b: 1.9 s quiet
    assert marks.newly_silent(100.1 + SILENT_S + 0.01, ALIVE) == ["b"]
    assert marks.newly_silent(103.0, ALIVE) == []  # said once
    assert marks.close_before(ALIVE) == 40  # b no longer blinds the rule
    marks.delivered("a", 60, 104.0)
    assert marks.close_before(ALIVE) == 60
    assert marks.delivered("b", 30, 104.6) == pytest.approx(4.5)  # it was quiet 4.5 s
    assert marks.close_before(ALIVE) == 30  # and holds back again from its own mark
    assert marks.delivered("b", 61, 104.8) is None


def test_a_source_that_ended_without_its_final_holds_nothing_back_and_is_said_lost_once() -> None:
    marks = Watermarks(["a", "b"], now=100.0)
    marks.delivered("a", 10, 100.1)
    marks.delivered("b", 8, 100.1)
    gone = {"a": True, "b": False}
    assert marks.close_before(gone) == 10
    assert marks.newly_lost(100.2, gone) == []  # its final may still be on its way
    assert marks.newly_lost(100.2 + SILENT_S + 0.01, gone) == ["b"]
    assert marks.newly_lost(110.0, gone) == [] and marks.unfinished() == ["a"]


# -- the runner over fake sources -------------------------------------------------------------
def runner(sources: list[FakeSource], events: list[dict[str, Any]]) -> LoadRunner:
    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    spec = LoadSpec(workload="ledger", workers=len(sources), op_timeout=1.0)
    return LoadRunner(cluster, inv, spec, Recorder(base=sources[0].recorder.base), driver=FakePgDriver([]),
                      on_event=events.append, sources=list(sources))


def wait_for(what: Any, timeout: float = 30.0) -> None:
    end = time.time() + timeout
    while not what():
        assert time.time() < end, "the condition never came true"
        time.sleep(0.02)


def acknowledged(rec: Recorder) -> dict[int, list[tuple[int, int]]]:
    return {w: r for w, r in rec.ledger_acknowledged().items() if r}


def test_every_write_of_a_late_and_a_skewed_source_is_recorded_on_the_control_clock() -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    late = FakeSource("late", 1, base=base, delay=0.3)
    skewed = FakeSource("skewed", 2, base=base, skew_s=5.0, uncertainty_s=0.002)
    lr = runner([late, skewed], events)
    t0 = lr.start()
    wait_for(lambda: late.generated >= 30 and skewed.generated >= 30)
    lr.stop()
    rec = lr.recorder
    assert rec.totals()["ok"] == late.generated + skewed.generated == late.delivered + skewed.delivered
    assert acknowledged(rec) == {1: [(1, late.generated)], 2: [(1, skewed.generated)]}
    # ops stamped on the control clock: within the load's window, not 5 s ahead
    for worker in (1, 2):
        for seq in (1, late.generated if worker == 1 else skewed.generated):
            _, t = rec.ledger_outcome(worker, seq)
            assert t is not None and t0 - 0.01 <= t <= lr.t_end + 0.01, (worker, seq)
    [said] = [e for e in events if e["kind"] == "load_sources"]
    assert said["sources"] == [{"source": "skewed", "clock_offset_s": 5.0, "clock_uncertainty_s": 0.002,
                                "where": "fake"}]
    assert not [e for e in events if e["kind"] == "load_source_lost"]


def test_a_silent_source_does_not_blind_the_close_rule_and_its_late_batches_fold_in() -> None:
    events: list[dict[str, Any]] = []
    resume = threading.Event()
    base = time.time()
    steady = FakeSource("steady", 1, base=base)
    holed = FakeSource("holed", 2, base=base, hold_after=0.3, resume=resume)
    lr = runner([steady, holed], events)
    lr.start()
    wait_for(lambda: any(e["kind"] == "load_source_silent" and e["source"] == "holed" for e in events))
    held_at = holed.last_watermark
    assert held_at is not None
    # the steady source's intervals close past the silent one's last delivery
    wait_for(lambda: (lr.recorder.closed_until() or 0) > (held_at + 5) * lr.recorder.interval)
    resume.set()
    wait_for(lambda: any(e["kind"] == "load_source_back" and e["source"] == "holed" for e in events))
    lr.stop()
    assert lr.recorder.totals()["ok"] == steady.generated + holed.generated
    assert acknowledged(lr.recorder) == {1: [(1, steady.generated)], 2: [(1, holed.generated)]}
    [back] = [e for e in events if e["kind"] == "load_source_back" and e["source"] == "holed"]
    assert back["source"] == "holed" and back["silent_for_s"] > SILENT_S
    [folded] = [e for e in events if e["kind"] == "load_late_folded"]
    assert folded["intervals"]["holed"] >= 5  # at least those closed past it while it held them
    assert [e["kind"] for e in events if e.get("source") == "holed"] == ["load_source_silent", "load_source_back"]


def test_a_lost_source_keeps_what_it_delivered_and_is_said_lost() -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    steady = FakeSource("steady", 1, base=base)
    lost = FakeSource("lost", 2, base=base, lost_after=0.3)
    lr = runner([steady, lost], events)
    lr.start()
    wait_for(lambda: not lost.alive())
    gone_at = lost.last_watermark or 0
    wait_for(lambda: (lr.recorder.closed_until() or 0) > (gone_at + 5) * lr.recorder.interval)
    lr.stop()
    assert lr.recorder.totals()["ok"] == steady.generated + lost.delivered
    assert 0 < lost.delivered <= lost.generated and lr.undelivered is None
    lost_said = [e for e in events if e["kind"] == "load_source_lost"]
    assert [(e["source"], e["why"]) for e in lost_said] == [("lost", "cut off (scripted)")]



def test_a_final_still_on_its_way_after_the_source_ended_is_waited_for() -> None:
    """A worker process exits right after it put its final batch; on a busy host the pump hands it
    over seconds later. The collector waits for it: every op is recorded, nothing is said lost."""
    events: list[dict[str, Any]] = []
    base = time.time()
    slow = FakeSource("slow", 1, base=base, final_delay=1.5)
    lr = runner([slow], events)
    lr.start()
    wait_for(lambda: slow.generated >= 30)
    lr.stop()
    assert lr.recorder.totals()["ok"] == slow.generated and lr.undelivered is None
    assert acknowledged(lr.recorder) == {1: [(1, slow.generated)]}
    assert not [e for e in events if e["kind"] in ("load_source_lost", "load_undelivered")]


class StallingInbox(__import__("queue").Queue):
    """An inbox whose empty waits take 1.2 s (a starved collector thread) a few times."""

    def __init__(self, stalls: int) -> None:
        super().__init__()
        self.stalls = stalls

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        import queue
        if self.stalls > 0 and self.empty():
            self.stalls -= 1
            time.sleep(1.2)
            raise queue.Empty
        return super().get(block, timeout)


def test_a_collector_starved_past_a_second_does_not_end_while_sources_run() -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    steady = FakeSource("steady", 1, base=base, tick=0.5)
    lr = runner([steady], events)
    inbox = lr._inbox = StallingInbox(stalls=4)
    lr.start()
    wait_for(lambda: inbox.stalls == 0)
    generated = steady.generated
    wait_for(lambda: steady.generated >= generated + 2 * steady.per_tick)  # batches after the stalls
    lr.stop()
    assert lr.recorder.totals()["ok"] == steady.generated and lr.undelivered is None
    assert not [e for e in events if e["kind"] in ("load_source_lost", "load_undelivered")]

# -- results that never arrived are unknown to the RPO check, never phantoms --------------------
def _everything_written(*sources: FakeSource) -> set[tuple[int, int]]:
    """What the database would hold: every write each source acknowledged, delivered or not."""
    return {(s.worker, seq) for s in sources for seq in range(1, s.generated + 1)}


def test_a_lost_sources_undelivered_rows_are_unknown_not_phantoms() -> None:
    base = time.time()
    steady = FakeSource("steady", 1, base=base)
    lost = FakeSource("lost", 2, base=base, lost_after=0.3)
    lr = runner([steady, lost], [])
    lr.start()
    wait_for(lambda: not lost.alive())
    lr.stop()
    # every ledger entry it drained was delivered; the database also holds the 5 writes it made
    # after that (committed, their results never sent)
    assert acknowledged(lr.recorder)[2] == [(1, lost.generated)]
    after = {(2, lost.generated + k) for k in range(1, 6)}
    rpo = rpo_check(lr.recorder, _everything_written(steady, lost) | after, None, 0)
    assert (rpo["phantoms"], rpo["lost_acknowledged"], rpo["undelivered"], rpo["undelivered_workers"]) == (0, 0, 5, 1)
    assert rpo["valid"] == "unknown" and "1 worker(s)' results did not all reach the controller" in rpo["text"]
    # the steady source alone is judged in full
    assert rpo_check(lr.recorder, _everything_written(steady), None, 0, workers={1})["valid"] is True
    # a row of the lost worker that no op wrote (seq 0) is still a phantom
    bad = rpo_check(lr.recorder, _everything_written(steady, lost) | after | {(2, 0)}, None, 0)
    assert bad["phantoms"] == 1 and bad["valid"] is False


def test_a_batch_lost_on_its_way_is_a_hole_the_rpo_check_says() -> None:
    base = time.time()
    source = FakeSource("src", 1, base=base, per_tick=3, drop_batch=4)
    lr = runner([source], [])
    lr.start()
    wait_for(lambda: source.generated >= 30)
    lr.stop()
    # batch 4 held the writes of tick 4: seqs 10..12 (3 a tick)
    assert lr.recorder.ledger_undelivered() == {(1, 10), (1, 11), (1, 12)}
    rpo = rpo_check(lr.recorder, _everything_written(source), None, 0)
    assert (rpo["phantoms"], rpo["undelivered"], rpo["valid"]) == (0, 3, "unknown")
    assert rpo["acknowledged"] == source.generated - 3


def test_a_batch_that_cannot_be_merged_is_said_and_the_load_goes_on() -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    source = FakeSource("src", 1, base=base, per_tick=3, spoil_batch=2)
    lr = runner([source], events)
    lr.start()
    wait_for(lambda: source.generated >= 30)
    lr.stop()
    [failed] = [e for e in events if e["kind"] == "load_delivery_failed"]
    assert failed["error"].startswith("ValueError")
    # batch 2 (seqs 4..6) is unknown; everything after it arrived
    assert lr.recorder.ledger_undelivered() == {(1, 4), (1, 5), (1, 6)}
    assert acknowledged(lr.recorder)[1][-1][1] == source.generated
    rpo = rpo_check(lr.recorder, _everything_written(source), None, 0)
    assert rpo["phantoms"] == 0 and rpo["valid"] == "unknown"


def test_the_pump_says_when_the_workers_queue_itself_ends() -> None:
    """The words of every worker process come through one queue: when it fails (its pipe gone),
    nothing more can arrive, and the collector is told so instead of the pump ending unheard."""
    import multiprocessing
    import queue

    from chaoskit.workload.runner import SharedFlag
    from chaoskit.workload.source import LocalPlant

    class Broken:
        def get(self, timeout: float) -> None:
            raise OSError(9, "Bad file descriptor")

    plant = LocalPlant(multiprocessing.get_context("spawn"), SharedFlag)
    plant.queue = Broken()
    inbox: queue.Queue = queue.Queue()
    plant.pump_into(inbox)
    got = inbox.get(timeout=10)
    assert (got.source, got.kind) == ("", "unreadable")
    assert got.payload == "the workers' queue ended (OSError: [Errno 9] Bad file descriptor)"
    assert plant._pump is not None
    plant._pump.join(10)
    assert not plant._pump.is_alive()
