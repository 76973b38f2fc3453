"""A load agent on a loader host over SSH (`chaoskit.workload.ssh_loader`), here with this machine
as the host (`LocalRemote`: each command through `sh -c`, as over the SSH shell): the spool's tail
read in pieces gives every frame once, the control files arrive as the agent reads them, the agent
starts in a directory of its own and is signalled only while it is the process that wrote its pid
file, and a host with another chaoskit or a bad path is refused before anything starts."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import chaoskit
from chaoskit.lifeline import controller_identity
from chaoskit.testing.fake_pg import fake_inventory
from chaoskit.testing.remote import LocalRemote
from chaoskit.workload import agent, placement, ssh_loader
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.spool import SpoolWriter


def order() -> agent.AgentOrder:
    inv = fake_inventory()
    cluster = next(iter(inv.clusters.values()))
    return agent.AgentOrder.of(cluster.model_dump_json(), inv.model_dump_json(), LoadSpec(workload="ledger", workers=1),
                               ClientGroup("a", workers=1), [1], 0.0, None)


def stub_python(tmp_path: Path, version: str = chaoskit.__version__) -> Path:
    """A stand-in for the host's python: answers the version check, and as the agent writes its
    pid file (pid and start time, as the agent does) and sleeps."""
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text("#!/bin/sh\n"
                    f'if [ "$1" = "-c" ]; then printf "%s\\n3.11\\n" {version}; exit 0; fi\n'
                    'd="$3"; printf "%s\\n" "$@" > "$d/args"\n'
                    "st=$(awk '{ sub(/.*\\) /, \"\"); print $20 }' /proc/$$/stat)\n"
                    'printf "%s\\n%s\\n" $$ "$st" > "$d/agent.pid"\n'
                    "exec sleep 30\n")
    stub.chmod(0o755)
    return stub


def until(what: Callable[[], bool], bound_s: float = 30.0) -> bool:
    end = time.monotonic() + bound_s
    while not what():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def loader(tmp_path: Path, python: Path | None = None, name: str = "agent") -> ssh_loader.SshLoader:
    return ssh_loader.SshLoader("a/1@here", LocalRemote("here"), str(tmp_path / name), order(),
                                str(python or stub_python(tmp_path)), chaoskit.__version__, poll_s=0.0)


def test_the_spools_tail_is_read_in_pieces_every_frame_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh_loader, "TAIL_BYTES", 40)  # pieces shorter than some frames
    ld = loader(tmp_path)
    (tmp_path / "agent").mkdir()
    payloads = [b"r" * n for n in (3, 50, 0, 17, 90, 4)]
    writer = SpoolWriter(tmp_path / "agent" / agent.SPOOL)
    got: list[bytes] = []
    try:
        assert ld.fetch(0) == []
        for p in payloads[:3]:
            writer.append(p)
        for _ in range(20):
            got += [f.payload for f in ld.fetch(len(got))]
        for p in payloads[3:]:
            writer.append(p)
        for _ in range(20):
            got += [f.payload for f in ld.fetch(len(got))]
    finally:
        writer.close()
    assert got == payloads
    # asked again from further back (a controller that re-attached): read again from the start
    assert [f.seq for f in ld.fetch(0)][:1] == [1]


def test_the_agent_starts_in_a_directory_of_its_own_and_reads_what_it_is_told(tmp_path: Path) -> None:
    ld = loader(tmp_path)
    d = tmp_path / "agent"
    try:
        ld.clock_offset_s = -0.00125  # its host's clock measured 1.25 ms behind the control node's
        ld.start(1_796_000_000.25)
        assert until(lambda: ld.running() is True)
        assert (d / agent.OFFSET).read_text() == "-0.001250" and agent.read_instant(d / agent.OFFSET) == -0.00125
        assert agent.AgentOrder.model_validate_json((d / agent.ORDER).read_bytes()) == ld.order
        assert agent.read_instant(d / agent.LEASE) == 1_796_000_000.25
        assert (d / "args").read_text().split() == ["-m", "chaoskit.workload.agent", str(d)]
        assert oct((d / agent.ORDER).stat().st_mode & 0o777) == "0o600"
        # who started it, for `chaoskit recover` (which spares the agents of a controller still running)
        assert json.loads((d / agent.CONTROLLER).read_text()) == {**controller_identity(), "loader": "here"}
        ld.go(1_796_000_001.5)
        ld.renew(1_796_000_030.0)
        ld.set_clock(0.0021)  # measured again
        assert agent.read_instant(d / agent.OFFSET) == 0.0021
        ld.stop()
        assert agent.read_instant(d / agent.GO) == 1_796_000_001.5
        assert agent.read_instant(d / agent.LEASE) == 1_796_000_030.0 and (d / agent.STOP).exists()
        # a second agent never starts over this one's directory
        with pytest.raises(RuntimeError, match="already exists"):
            loader(tmp_path).start(1_796_000_000.0)
    finally:
        ld.kill()
    assert until(lambda: ld.running() is False)  # SIGKILL is delivered, then the process ends


def test_only_the_process_that_wrote_the_pid_file_is_signalled(tmp_path: Path) -> None:
    import subprocess

    ld = loader(tmp_path)
    d = tmp_path / "agent"
    d.mkdir()
    other = subprocess.Popen(["sleep", "30"])
    try:
        (d / agent.PID).write_text(f"{other.pid}\n1\n")  # its pid, another start time: not the agent
        assert ld.running() is False
        ld.kill()
        assert other.poll() is None
        (d / agent.PID).write_text(f"{other.pid}\n$(touch {tmp_path}/CANARY)\n")  # not a number: nothing run
        assert ld.running() is False and not (tmp_path / "CANARY").exists()
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()


def test_a_host_with_another_chaoskit_is_refused_with_both_versions(tmp_path: Path) -> None:
    ld = loader(tmp_path, stub_python(tmp_path, version="0.0.9"))
    said = r"runs chaoskit '0.0.9', the controller " + chaoskit.__version__
    with pytest.raises(ssh_loader.LoaderRefused, match=said):
        ld.check()
    assert not (tmp_path / "agent").exists()


def test_a_host_whose_python_cannot_import_chaoskit_is_refused(tmp_path: Path) -> None:
    ld = loader(tmp_path, Path("/bin/false"))
    with pytest.raises(ssh_loader.LoaderRefused, match="cannot import chaoskit"):
        ld.check()


def test_this_host_passes_the_check_with_its_clock(tmp_path: Path) -> None:
    ld = loader(tmp_path)
    ld.check()
    # one clock here: the offset is within the measurement's uncertainty and the shell's own delay
    assert ld.offset is not None and abs(ld.clock_offset_s) <= ld.clock_uncertainty_s + 0.005
    assert ld.clock_uncertainty_s <= ssh_loader.CLOCK_UNCERTAINTY_MAX_S
    again = ld.measure_clock()  # as every 30 s during the run
    assert abs(again.offset_s) <= again.uncertainty_s + 0.005 and again.samples == 7


def test_a_host_whose_clock_cannot_be_read_closely_is_refused_with_the_round_trip() -> None:
    """Worked by hand: a best round trip of 120 ms reads the clock to +/- 60 ms, over the 50 ms
    its clients' time figures need; one of 80 ms (+/- 40 ms) passes, whatever its offset (the
    agent stamps with the offset corrected)."""
    from chaoskit.inventory.clock import ClockOffset

    slow = ssh_loader.HostStatus("ld-x", "/usr/bin/python3", chaoskit.__version__, "3.11",
                                 ClockOffset(offset_s=3.5, uncertainty_s=0.06, rtt_s=0.12, samples=7))
    assert slow.refusal(chaoskit.__version__) == ("loader host ld-x: its clock could be read no closer than +/- "
                                                  "60.0 ms (round trip 120.0 ms); its clients' time figures need "
                                                  "it within 50 ms")
    ok = ssh_loader.HostStatus("ld-x", "/usr/bin/python3", chaoskit.__version__, "3.11",
                               ClockOffset(offset_s=3.5, uncertainty_s=0.04, rtt_s=0.08, samples=7))
    assert ok.refusal(chaoskit.__version__) is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_an_offset_that_is_not_a_number_never_reaches_the_host(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="not an offset"):
        loader(tmp_path).set_clock(bad)


@pytest.mark.parametrize("bad", ["relative/dir", "/tmp/a b", "/tmp/it's", "/tmp/$(id)", "/tmp/../etc", "/tmp/x\n"])
def test_a_directory_that_is_not_a_plain_absolute_path_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not an absolute path"):
        ssh_loader.SshLoader("a/1@here", LocalRemote("here"), bad, order(), "/usr/bin/python3", "0")


def test_a_run_id_that_could_leave_its_directory_is_refused() -> None:
    from chaoskit.inventory.fanout import RemotePool

    with pytest.raises(ValueError, match="not a run id"):
        placement.loader_agent_sources(RemotePool(fake_inventory()), {}, "../x")


def test_a_tool_group_needs_its_tool_on_the_loader_host(tmp_path: Path) -> None:
    ld = loader(tmp_path)
    ld.require(("sh", "/bin/sh"), "pg")  # on PATH, and by its absolute path
    ld.require((), "builtin")
    with pytest.raises(ssh_loader.LoaderRefused, match=r"loader host here: ck-no-such-tool is not installed there "
                                                        r"\(group pg runs it\)"):
        ld.require(("sh", "ck-no-such-tool"), "pg")
    for bad in ("-v", "a b", "x;id", "$(id)", "../../bin/sh", "it's"):
        with pytest.raises(ssh_loader.LoaderRefused, match="not a program name"):
            ld.require((bad,), "pg")


def test_a_start_removes_spools_collected_a_week_ago_and_keeps_any_never_collected(tmp_path: Path) -> None:
    import os
    import subprocess

    root = tmp_path / "spool"
    week_ago = time.time() - 8 * 86400
    for run, agent_dir, mark, old in (("r1", "a-1", True, True), ("r1", "b-5", True, True),
                                      ("r2", "a-1", False, True),  # never collected: it may hold the only copy
                                      ("r3", "a-1", True, False)):  # collected today
        d = root / run / agent_dir
        d.mkdir(parents=True)
        (d / "spool").write_bytes(b"frames")
        if mark:
            (d / ssh_loader.COLLECTED).touch()
            if old:
                os.utime(d / ssh_loader.COLLECTED, (week_ago, week_ago))
    new = ssh_loader.SshLoader("a/1@here", LocalRemote("here"), str(root / "r4" / "a-1"), order(),
                               str(stub_python(tmp_path)), chaoskit.__version__, poll_s=0.0)
    res = subprocess.run(["sh", "-c", new.prune_script()], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert sorted(str(p.relative_to(root)) for p in root.glob("*/*")) == ["r2/a-1", "r3/a-1"]  # r1 gone whole
    new.start(time.time() + 60)
    try:
        assert (root / "r4" / "a-1" / "agent.pid").exists()
        new.collected()
        assert (root / "r4" / "a-1" / ssh_loader.COLLECTED).exists()
    finally:
        new.kill()
