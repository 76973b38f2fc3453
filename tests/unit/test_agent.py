"""The load agent's own parts that need no database: its order round-trips, its control files are
numbers or nothing, its lease ends it, and the loader ends only the process that wrote the pid
file (a pid reused by another process is left alone)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaoskit.lifeline import process_start_time
from chaoskit.testing.fake_pg import fake_inventory
from chaoskit.workload import agent
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.spool import SpoolReader, SpoolWriter
from chaoskit.workload.wire import decode_delivery


def test_an_order_comes_back_as_it_was_given() -> None:
    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    group = ClientGroup("b", "pool", 2, statement_timeout=3.0, first_worker=3)
    spec = LoadSpec(workload="ledger", workers=4, rate=200.0, groups=(ClientGroup("a", workers=2), group))
    order = agent.AgentOrder.of(cluster.model_dump_json(), inv.model_dump_json(), spec, group, [3, 4], 1000.5, 100.0)
    back = agent.AgentOrder.model_validate_json(order.model_dump_json())
    assert back.spec() == spec and back.group() == group and back.worker_ids == [3, 4]
    with pytest.raises(ValueError, match="extra"):
        agent.AgentOrder.model_validate_json(order.model_dump_json()[:-1] + ',"shell":"id"}')


@pytest.mark.parametrize(("text", "value"), [
    ("1796500000.25", 1796500000.25), (" 12 \n", 12.0), ("nan", None), ("inf", None), ("1; rm -rf /", None),
    ("$(id)", None), ("", None)])
def test_a_control_file_is_a_number_or_nothing(tmp_path: Path, text: str, value: float | None) -> None:
    (tmp_path / "lease").write_text(text)
    assert agent.read_instant(tmp_path / "lease") == value
    assert agent.read_instant(tmp_path / "absent") is None


def test_the_lease_ends_the_load_and_go_gives_the_start(tmp_path: Path) -> None:
    control = agent._Control(tmp_path, log=open(tmp_path / "log", "w"))  # noqa: SIM115
    agent.write_instant(tmp_path / "lease", time.time() + 0.5)
    watcher = threading.Thread(target=control.watch, daemon=True)
    watcher.start()
    agent.write_instant(tmp_path / "go", 1234.5)
    assert control.go.wait(5) and control.start_at.value == 1234.5 and not control.stop.is_set()
    assert control.stop.wait(10) and control.lease_ended  # never renewed: stopped at its end
    watcher.join(5)
    assert "the lease ended" in (tmp_path / "log").read_text()


def test_a_lease_that_is_not_a_number_ends_the_agent(tmp_path: Path) -> None:
    control = agent._Control(tmp_path, log=open(tmp_path / "log", "w"))  # noqa: SIM115
    (tmp_path / "lease").write_text("tomorrow")
    control.watch()
    assert control.stop.is_set() and control.lease_ended and control.go.is_set()
    assert "not a number" in (tmp_path / "log").read_text()


def test_the_stop_file_ends_the_load(tmp_path: Path) -> None:
    control = agent._Control(tmp_path, log=open(tmp_path / "log", "w"))  # noqa: SIM115
    agent.write_instant(tmp_path / "lease", time.time() + 60)
    (tmp_path / "stop").touch()
    control.watch()
    assert control.stop.is_set() and not control.lease_ended


def test_the_worker_loops_words_become_frames(tmp_path: Path) -> None:
    from chaoskit.recorder import Batch

    with SpoolWriter(tmp_path / "s") as w:
        out = agent._Spooled(w)
        out.put(("ready", 42))
        out.put(("batch", 42, Batch(watermark=7)))
        out.put(("final", 42, Batch(watermark=1 << 62)))
    got = [decode_delivery(f.payload) for f in SpoolReader(tmp_path / "s").read()]
    assert [(k, getattr(p, "watermark", None)) for k, _, p in got] == [("ready", None), ("batch", 7),
                                                                        ("final", 1 << 62)]


def test_the_loader_kills_only_the_process_that_wrote_the_pid_file(tmp_path: Path) -> None:
    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    spec = LoadSpec(workload="ledger", workers=1)
    order = agent.AgentOrder.of(cluster.model_dump_json(), inv.model_dump_json(), spec, ClientGroup("a", workers=1),
                                [1], 0.0, None)
    loader = agent.ProcessLoader("a/1", tmp_path / "a-1", order)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        loader.dir.mkdir()
        (loader.dir / agent.PID).write_text(f"{other.pid}\n1\n")  # its pid, another start time: not ours
        assert loader.pid() is None
        loader.kill()
        assert other.poll() is None  # left alone
        (loader.dir / agent.PID).write_text(f"{other.pid}\n{process_start_time(other.pid)}\n")
        assert loader.pid() == other.pid
        loader.kill()
        assert other.wait(10) == -9
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_the_agent_stamps_with_the_offset_it_is_told_first_at_once_then_slewed(tmp_path: Path) -> None:
    """The `offset` file before the start (+5 s: its host's clock ahead) is applied at once, so the
    lease, read on the control clock, is not over although the host's own clock is a second past
    it; the offset written later (+5.05 s) is taken in (slewed: `test_stamp`) by the watch."""
    from chaoskit.workload.stamp import SLEW_S, StampClock

    clock = StampClock()
    control = agent._Control(tmp_path, log=open(tmp_path / "log", "w"), clock=clock)  # noqa: SIM115
    agent.write_instant(tmp_path / agent.OFFSET, 5.0)
    control.take_clock()
    assert clock.offset() == 5.0
    assert abs(clock.now() - (time.time() - 5.0)) < 0.01
    agent.write_instant(tmp_path / agent.LEASE, time.time() - 1.0)  # past on the host's clock, not on the control's
    (tmp_path / agent.OFFSET).write_text("$(id)")  # not a number: the offset stays as it was
    control.take_clock()
    assert clock.offset() == 5.0
    agent.write_instant(tmp_path / agent.OFFSET, 5.05)
    watcher = threading.Thread(target=control.watch, daemon=True)
    watcher.start()
    end = time.monotonic() + SLEW_S + 2.0
    while clock.offset() != 5.05 and time.monotonic() < end:
        assert 5.0 <= clock.offset() <= 5.05
        time.sleep(0.01)
    assert clock.offset() == 5.05
    assert not control.lease_ended  # the control clock is still 4 s before the lease
    control.stop.set()
    watcher.join(5)
    assert "clock offset +5.000000 s" in (tmp_path / "log").read_text()
    assert "clock offset +5.050000 s" in (tmp_path / "log").read_text()


def test_a_tool_groups_order_gives_its_settings_back_as_their_model() -> None:
    from chaoskit.workload.engines.pgbench import Settings

    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    group = ClientGroup("pgb", workers=3, tool="pgbench", settings=Settings(scale=3), first_worker=2)
    spec = LoadSpec(workload="ledger", workers=4, groups=(ClientGroup("a", workers=1), group))
    order = agent.AgentOrder.of(cluster.model_dump_json(), inv.model_dump_json(), spec, group, [2, 3, 4], 1.0, None)
    back = agent.AgentOrder.model_validate_json(order.model_dump_json()).group()
    assert back == group and isinstance(back.settings, Settings) and back.settings.scale == 3
