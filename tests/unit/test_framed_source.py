"""The load runner over agents that spool their deliveries (`FramedSource`), driven by the scripted
sources of chaoskit/testing through real spool files and the real codec: frames applied once,
a loader cut off from the control node folded in late and said, an agent that died said lost with
what it delivered kept, an agent whose controller is gone stopped by its lease."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from chaoskit.recorder import Recorder
from chaoskit.testing.fake_pg import FakePgDriver, fake_inventory
from chaoskit.testing.loader import SpooledFake
from chaoskit.testing.source import FakeSource
from chaoskit.workload import framed
from chaoskit.workload.framed import FramedSource
from chaoskit.workload.runner import LoadRunner
from chaoskit.workload.spec import LoadSpec
from chaoskit.workload.spool import Frame, SpoolReader
from chaoskit.workload.wire import decode_delivery


def runner(sources: list[FramedSource], events: list[dict[str, Any]], base: float) -> LoadRunner:
    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    spec = LoadSpec(workload="ledger", workers=len(sources), op_timeout=1.0)
    return LoadRunner(cluster, inv, spec, Recorder(base=base), driver=FakePgDriver([]), on_event=events.append,
                      sources=list(sources))


def wait_for(what: Any, timeout: float = 30.0) -> None:
    end = time.time() + timeout
    while not what():
        assert time.time() < end, "the condition never came true"
        time.sleep(0.02)


def spooled(path: Path) -> tuple[list[str], int]:
    """What the agent itself spooled: its deliveries' kinds, and the ledger writes its batches carry."""
    kinds, writes = [], 0
    for f in SpoolReader(path).read():
        kind, _, payload = decode_delivery(f.payload)
        kinds.append(kind)
        if kind in ("batch", "final"):
            writes += sum(len(raw) // 4 for _, _, raw in payload.ledger)  # type: ignore[union-attr]
    return kinds, writes


def framed_source(tmp_path: Path, agent: FakeSource, **kw: Any) -> tuple[FramedSource, SpooledFake]:
    lease = kw.pop("lease_s", framed.LEASE_S)
    lost_after = kw.pop("lost_after_s", None)
    loader = SpooledFake(agent, tmp_path / f"{agent.name}.frames", **kw)
    return FramedSource(loader, agent.workers, lease_s=lease, lost_after_s=lost_after), loader


def test_every_spooled_write_is_applied_once_on_the_control_clock(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    a, la = framed_source(tmp_path, FakeSource("a", 1, base=base), lease_s=6.0)
    b, lb = framed_source(tmp_path, FakeSource("b", 2, base=base, skew_s=3.0, uncertainty_s=0.004), lease_s=6.0)
    lr = runner([a, b], events, base)
    t0 = lr.start()
    # renewed every third of its 6 s lease (an agent stops by itself only when its controller stalls longer)
    wait_for(lambda: la.agent.generated >= 60 and lb.agent.generated >= 60 and la.renewals and lb.renewals)
    lr.stop()
    rec = lr.recorder
    for src, loader in ((a, la), (b, lb)):
        kinds, writes = spooled(loader.spool)
        assert kinds[0] == "ready" and kinds[-1] == "final" and kinds.count("final") == 1
        # the controller applied exactly what the agent spooled, each frame once
        assert writes == loader.agent.generated and src.applied == len(kinds) and src.read_again == 0
        assert rec.ledger_acknowledged()[loader.agent.worker] == [(1, writes)]
        assert not loader.lease_ended
        assert loader.collected_marks == 1  # its final read: its spool may go once old
    assert rec.totals()["ok"] == la.agent.generated + lb.agent.generated
    _, t = rec.ledger_outcome(2, lb.agent.generated)
    assert t is not None and t0 - 0.01 <= t <= lr.t_end + 0.01  # stamped on the control clock, not 3 s ahead
    said = [e["kind"] for e in events]
    assert "loader_lost" not in said and "delivered_late" not in said and "load_source_lost" not in said
    assert not rec.ledger_undelivered()


def test_a_loader_cut_off_from_the_control_node_keeps_spooling_and_is_folded_in_late(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    steady, _ = framed_source(tmp_path, FakeSource("steady", 1, base=base))
    cut, lc = framed_source(tmp_path, FakeSource("cut", 2, base=base), cut_after=0.3, cut_for=4.0)
    lr = runner([steady, cut], events, base)
    lr.start()
    wait_for(lambda: any(e["kind"] == "load_source_back" and e["source"] == "cut" for e in events))
    lr.stop()
    _, writes = spooled(lc.spool)
    assert writes == lc.agent.generated
    assert lr.recorder.ledger_acknowledged()[2] == [(1, writes)]  # nothing of the cut lost
    assert not lr.recorder.ledger_undelivered()
    [late] = [e for e in events if e["kind"] == "delivered_late"]
    # frames spooled during the 4 s cut were applied after it: late by more than LATE_S
    assert late["source"] == "cut" and late["frames"] >= 1 and late["max_late_s"] > framed.LATE_S
    kinds = [e["kind"] for e in events if e.get("source") == "cut"]
    assert kinds[:2] == ["load_source_silent", "load_source_back"] and "loader_lost" not in kinds


def test_an_agent_that_died_is_lost_and_what_it_spooled_stays(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    steady, _ = framed_source(tmp_path, FakeSource("steady", 1, base=base))
    dead, ld = framed_source(tmp_path, FakeSource("dead", 2, base=base, lost_after=0.4))
    lr = runner([steady, dead], events, base)
    lr.start()
    wait_for(lambda: any(e["kind"] == "loader_lost" for e in events))
    lr.stop()
    kinds, writes = spooled(ld.spool)
    assert "final" not in kinds and writes > 0
    assert ld.collected_marks == 0  # no final: its spool stays on its host
    assert lr.recorder.ledger_acknowledged()[2] == [(1, writes)]  # what it delivered is kept
    [lost] = [e for e in events if e["kind"] == "loader_lost"]
    assert lost["why"] == "its agent ended without its final batch" and lost["frames"] == len(kinds)
    assert [e["source"] for e in events if e["kind"] == "load_source_lost"] == ["dead"]
    # past what it spooled its worker's results are unknown (never phantoms), the steady one's not
    assert lr.recorder.ledger_undelivered().ranges(2)[0][0] == writes + 1
    assert not lr.recorder.ledger_undelivered().ranges(1)


def test_an_agent_whose_controller_is_gone_stops_at_its_lease(tmp_path: Path) -> None:
    base = time.time()
    src, loader = framed_source(tmp_path, FakeSource("orphan", 1, base=base), lease_s=2.0)
    lr = runner([src], [], base)
    lr.start()
    wait_for(lambda: loader.agent.generated >= 10)
    src._killed.set()  # the controller's reader is gone: nobody renews the lease
    wait_for(lambda: not loader.agent.alive())
    assert loader.lease_ended
    kinds, _ = spooled(loader.spool)
    assert kinds[-1] == "final"  # it ended its load properly: its final is in the spool
    lr._abort()


def test_frames_read_again_after_a_reattach_are_applied_once(tmp_path: Path) -> None:
    class Reattaching(SpooledFake):
        def fetch(self, after: int) -> list[Frame]:  # a fresh reader each time, from two frames back
            self.reader = SpoolReader(self.spool)
            return super().fetch(max(0, after - 2))

    events: list[dict[str, Any]] = []
    base = time.time()
    agent = FakeSource("again", 1, base=base)
    loader = Reattaching(agent, tmp_path / "again.frames")
    src = FramedSource(loader, agent.workers)
    lr = runner([src], events, base)
    lr.start()
    wait_for(lambda: agent.generated >= 40)
    lr.stop()
    _, writes = spooled(loader.spool)
    assert src.read_again > 0
    assert lr.recorder.ledger_acknowledged()[1] == [(1, writes)] and lr.recorder.totals()["ok"] == writes


def test_a_frame_that_is_not_a_delivery_is_said_and_its_writes_are_undelivered(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    base = time.time()
    src, loader = framed_source(tmp_path, FakeSource("spoilt", 1, base=base, spoil_batch=3))
    lr = runner([src], events, base)
    lr.start()
    wait_for(lambda: loader.agent.generated >= 30)
    lr.stop()
    [bad] = [e for e in events if e["kind"] == "load_delivery_unreadable"]
    assert bad["source"] == "spoilt" and bad["frame"] == 4 and "ledger" in bad["error"]  # frame 1 is ready
    assert src.unreadable == 1
    undelivered = lr.recorder.ledger_undelivered().ranges(1)
    assert undelivered and undelivered[0][1] >= undelivered[0][0]  # the spoilt batch's writes: unknown


def test_a_loaders_clock_is_measured_again_while_it_loads_and_the_agent_told(tmp_path: Path,
                                                                              monkeypatch: Any) -> None:
    """Worked by hand. Measured +0.8 ms +/- 0.5 ms before the start; the first re-measurement
    fails (unreachable: tried again soon, nothing told); then +1.1 ms +/- 0.4 ms (change 0.3 ms,
    stamps since the start off by at most 0.3 + 0.5 + 0.4 = 1.2 ms); then +200 ms +/- 0.3 ms, a
    stepped clock (change 198.9 ms > 100 ms; error 198.9 + 0.4 + 0.3 = 199.6 ms). The agent is
    told each offset once, in order; the worst error is the source's."""
    from chaoskit.inventory.clock import ClockOffset

    monkeypatch.setattr(framed, "CLOCK_EVERY_S", 0.3)
    monkeypatch.setattr(framed, "CLOCK_RETRY_S", 0.1)
    events: list[dict[str, Any]] = []
    base = time.time()
    measures: list[ClockOffset | Exception] = [
        ConnectionError("cut (scripted)"), ClockOffset(0.0011, 0.0004, 0.0008, 7), ClockOffset(0.2, 0.0003, 0.0006, 7)]
    src, loader = framed_source(tmp_path, FakeSource("zx", 1, base=base, offset_s=0.0008, uncertainty_s=0.0005),
                                measures=measures)
    lr = runner([src], events, base)
    lr.start()
    wait_for(lambda: not loader.measures and len([e for e in events if e["kind"] == "loader_clock"]) == 2)
    lr.stop()
    assert loader.clock_set == [0.0011, 0.2]
    said = [{k: e[k] for k in ("group", "offset_s", "uncertainty_s", "change_s", "error_s", "stepped")}
            for e in events if e["kind"] == "loader_clock"]
    assert said == [
        {"group": "zone-x", "offset_s": 0.0011, "uncertainty_s": 0.0004, "change_s": 0.0003, "error_s": 0.0012,
         "stepped": False},
        {"group": "zone-x", "offset_s": 0.2, "uncertainty_s": 0.0003, "change_s": 0.1989, "error_s": 0.1996,
         "stepped": True}]
    assert src.clock_error_s == pytest.approx(0.1996) and src.clock_measures == 2
    ended = src.describe()
    assert ended["clock_error_s"] == 0.1996 and ended["clock_offset_s"] == 0.2


def test_an_agent_with_nothing_new_is_asked_whether_it_runs_at_most_once_a_second(tmp_path: Path) -> None:
    # a remote ask is a process on the loader host: between an agent's sparse frames the reader
    # polls its spool every 0.1 s, and must not ask each time the spool had nothing new
    class Counting(SpooledFake):
        asks = 0
        empty = 0

        def running(self) -> bool | None:
            self.asks += 1
            return super().running()

        def fetch(self, after: int) -> list[Frame]:
            frames = super().fetch(after)
            self.empty += not frames
            return frames

    base = time.time()
    agent = FakeSource("sparse", 1, base=base, tick=0.5)
    loader = Counting(agent, tmp_path / "sparse.frames")
    src = FramedSource(loader, agent.workers)
    lr = runner([src], [], base)
    began = time.monotonic()
    lr.start()
    wait_for(lambda: loader.empty >= 15)
    asks, elapsed = loader.asks, time.monotonic() - began
    lr.stop()
    assert asks <= elapsed / framed.ASK_RUNNING_EVERY_S + 1
