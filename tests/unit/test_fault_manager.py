"""FaultManager's heal paths without a lab.

With `ScriptedRemote` (no root needed): what is sent to a host and in which order (stage, trigger,
revert), every time the manager reports (hand-computed from the scripted host times and a fixed
clock offset), and what happens when a host fails or vanishes at each step: a revert that fails
verification, an unreachable host during the heal, a stage interrupted by Ctrl-C after the host had
journaled it, an exception inside `with FaultManager(...)`, a preflight refusal (nothing sent), and
`recover` leaving a live controller's fault alone unless forced.

With `LocalRemote` (root, as on a host): the real host scripts against a local `sleep` process in a
private journal root: a pause healed by the controller, by the host's dead-man when the controller
is gone, and by `recover`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from chaoskit.errors import HostUnreachable, PreflightError, RemoteCommandError
from chaoskit.faults import manager as manager_mod
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.registry import REGISTRY
from chaoskit.faults.spec import parse_fault
from chaoskit.faults.ttl import DEADMAN_MARGIN_S
from chaoskit.inventory import load_inventory
from chaoskit.inventory.capabilities import Capabilities
from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.lifeline import process_start_time
from chaoskit.testing.clock import FakeClock
from chaoskit.testing.remote import (
    HANG,
    LocalRemote,
    Reply,
    ScriptedRemote,
    fault_id_of,
    is_revert,
    is_stage,
    is_trigger,
)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the journal is root's (0700): run as root, as on a host")
EVERYTHING = Capabilities(have=frozenset().union(*(k.needs for k in REGISTRY.values())) | {"nft"})


def inventory(tmp_path: Path, pid_file: str = "/run/x/db.pid") -> Inventory:
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(f"""
        hosts:
          h1: {{address: 127.0.0.1}}
          h2: {{address: 127.0.0.1}}
        clusters:
          c:
            engine: postgres
            user: postgres
            members:
              - {{host: h1, processes: {{db: {{pid_file: {pid_file}, comm: sleep}}}}}}
              - {{host: h2, processes: {{db: {{pid_file: {pid_file}, comm: sleep}}}}}}
        """).lstrip("\n"))
    return load_inventory(p)


# -- a scripted host ---------------------------------------------------------------------------
def scripted_host(name: str, applied: str = "applied 100.000 100.500 100.600",
                  reverted: Reply | BaseException | object = Reply(stdout="reverted 121.250 controller"),
                  clock: FakeClock | None = None, calls: list[str] | None = None) -> ScriptedRemote:
    r = ScriptedRemote(name, default=None, clock=(clock or FakeClock()).time,
                       calls=calls if calls is not None else [])
    r.on(is_stage, Reply(stdout=f"staged /var/lib/chaoskit/faults/{name} bash"))
    r.on(is_trigger, Reply(stdout=applied))
    r.on(is_revert, reverted)
    return r


def manager(inv: Inventory, remotes: dict[str, ScriptedRemote], clock: FakeClock | None = None) -> FaultManager:
    fm = FaultManager(inv, RemotePool(inv, factory=remotes.__getitem__), roles=lambda c: ({}, set()),
                      clock=(clock or FakeClock()).time)
    for host in remotes:  # no probing: the host's answers to these are not what is under test
        fm.capabilities[host] = EVERYTHING
        fm.offsets[host] = ClockOffset(offset_s=2.0, uncertainty_s=0.001, rtt_s=0.002, samples=7)
    return fm


def pause(target: str = "h1", duration: float | None = 10.0) -> object:
    return parse_fault({"kind": "pause", "target": target, "cluster": "c", "duration": duration})


def test_stage_trigger_revert_in_order_with_host_times_on_the_control_clock(tmp_path: Path) -> None:
    clock = FakeClock(start=1000.0)
    h1 = scripted_host("h1", clock=clock)
    with manager(inventory(tmp_path), {"h1": h1}, clock) as fm:
        [staged] = fm.stage(pause())  # type: ignore[arg-type]
        assert staged.t_staged == 1000.0 and staged.journal_dir == "/var/lib/chaoskit/faults/h1"
        assert staged.shell == "bash" and fm.pending == []
        clock.advance(1.5)
        fault = fm.trigger(staged)
        assert fm.staged == [] and fm.injected == [fault]
    # the trigger is one exec of the shell the staging reported, on the journal it reported
    assert [is_stage(h1.calls[0]), is_trigger(h1.calls[1]), is_revert(h1.calls[2])] == [True, True, True]
    assert len(h1.calls) == 3
    assert h1.calls[1].startswith(f"bash /var/lib/chaoskit/faults/h1/{staged.id}.inject")
    assert {fault_id_of(c) for c in h1.calls} == {staged.id}
    # host times minus the offset (+2.0 s): 100.0 -> 98.0, 100.5 -> 98.5, 100.6 -> 98.6, 121.25 -> 119.25
    assert fault.t_sent == 1001.5
    assert (fault.t_apply_start, fault.t_effect, fault.t_applied) == pytest.approx((98.0, 98.5, 98.6), abs=1e-9)
    assert fault.t_effect_host == 100.5
    assert fault.planned_end == pytest.approx(108.5, abs=1e-9)  # effect + 10 s duration
    assert fault.t_reverted == pytest.approx(119.25, abs=1e-9)
    assert (fault.reverted_by, fault.revert_verified, fault.revert_error) == ("controller", True, None)


def test_the_staged_journal_carries_the_planned_end_and_ttl(tmp_path: Path) -> None:
    """The dead-man's two deadlines travel in the staging script: the outer TTL in ms and the
    planned end (duration + margin) in ms."""
    h1 = scripted_host("h1")
    fm = manager(inventory(tmp_path), {"h1": h1})
    spec = parse_fault({"kind": "pause", "target": "h1", "cluster": "c", "duration": 10.0, "ttl": 45.0})
    fm.stage(spec)  # type: ignore[arg-type]
    stage = h1.calls[0]
    assert "+ 45000 ))" in stage  # ttl 45 s
    env_b64 = re.findall(r"^w env ([A-Za-z0-9+/=]+)$", stage, re.M)
    assert env_b64, "the fault's data travels base64-encoded"
    env = base64.b64decode(env_b64[0]).decode()
    assert f"PLANNED_MS={int((10.0 + DEADMAN_MARGIN_S) * 1000)}" in env  # 12000
    fm.revert_all()


def test_a_revert_that_fails_verification_is_reported_not_hidden(tmp_path: Path) -> None:
    h1 = scripted_host("h1", reverted=Reply(exited=1, stderr="fault x is still in effect after its revert"))
    fm = manager(inventory(tmp_path), {"h1": h1})
    [fault] = fm.inject(pause())  # type: ignore[arg-type]
    failed = fm.revert_all()
    assert failed == [fault]
    assert fault.revert_verified is False and fault.t_reverted is None and fault.reverted_by is None
    assert fault.revert_error == "still in effect after its revert: fault x is still in effect after its revert"
    h1.rules[2].reply = Reply(exited=5, stderr="")  # unknown state: never reported as reverted
    fault.revert_error = None
    assert fm.revert_all() == [fault] and fault.revert_error == "state unknown"


def test_an_unreachable_host_during_the_heal_does_not_stop_the_others(tmp_path: Path) -> None:
    both: list[str] = []  # one log for the two hosts: the order across hosts
    h1 = scripted_host("h1", reverted=HostUnreachable("h1", "connection reset"), calls=both)
    h2 = scripted_host("h2", calls=both)
    fm = manager(inventory(tmp_path), {"h1": h1, "h2": h2})
    [f1] = fm.inject(pause("h1"))  # type: ignore[arg-type]
    [f2] = fm.inject(pause("h2"))  # type: ignore[arg-type]
    failed = fm.revert_all()  # never raises
    assert failed == [f1]
    assert f1.revert_error == "h1: unreachable: connection reset"
    assert f2.revert_verified and f2.reverted_by == "controller"
    # newest first: h2's fault (injected second) was reverted before h1's was tried
    reverts = [fault_id_of(c) for c in both if is_revert(c)]
    assert reverts == [f2.id, f1.id]
    # h1 back: the heal's retry verifies its fault, and the first attempt's error is not left beside that
    h1.rules[2].reply = Reply(stdout="reverted 121.250 controller")
    assert fm.revert_all() == []
    assert (f1.revert_verified, f1.reverted_by, f1.revert_error) == (True, "controller", None)


def test_ctrl_c_during_staging_still_reverts_what_the_host_journaled(tmp_path: Path) -> None:
    """The interrupt lands after the host wrote its journal entry but before our record of it: the
    (id, host) pair is pending, and the heal reverts it by id."""
    h1 = scripted_host("h1")
    h1.rules[0].reply = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt), manager(inventory(tmp_path), {"h1": h1}) as fm:
        fm.inject(pause())  # type: ignore[arg-type]
    assert fm.pending == [] and fm.injected == [] and fm.staged == []
    stage, revert = h1.calls
    assert is_stage(stage) and is_revert(revert) and fault_id_of(stage) == fault_id_of(revert)


def test_a_pending_revert_that_fails_stays_pending(tmp_path: Path) -> None:
    h1 = scripted_host("h1", reverted=Reply(exited=5, stderr="lock held"))
    h1.rules[0].reply = KeyboardInterrupt()
    fm = manager(inventory(tmp_path), {"h1": h1})
    with pytest.raises(KeyboardInterrupt):
        fm.inject(pause())  # type: ignore[arg-type]
    fm.revert_all()
    assert len(fm.pending) == 1  # the dead-man and `recover` remain; nothing claims it healed


def test_an_exception_inside_the_manager_heals_on_the_way_out(tmp_path: Path) -> None:
    h1 = scripted_host("h1")
    with pytest.raises(RuntimeError, match="boom"), manager(inventory(tmp_path), {"h1": h1}) as fm:
        [fault] = fm.inject(pause())  # type: ignore[arg-type]
        raise RuntimeError("boom")
    assert fault.revert_verified and is_revert(h1.calls[-1])


def test_a_staged_fault_never_triggered_is_unjournaled(tmp_path: Path) -> None:
    h1 = scripted_host("h1")
    with manager(inventory(tmp_path), {"h1": h1}) as fm:
        [staged] = fm.stage(pause())  # type: ignore[arg-type]
    assert fm.staged == [] and fm.injected == []
    assert is_revert(h1.calls[-1]) and fault_id_of(h1.calls[-1]) == staged.id


def test_a_failed_trigger_is_named_and_not_kept(tmp_path: Path) -> None:
    """The trigger script reverts on the host when applying fails; the manager forgets the fault
    and raises naming the step and the fault."""
    h1 = scripted_host("h1")
    h1.rules[1].reply = Reply(exited=3, stderr="pid 4242 is not sleep")
    fm = manager(inventory(tmp_path), {"h1": h1})
    [staged] = fm.stage(pause())  # type: ignore[arg-type]
    with pytest.raises(RemoteCommandError) as err:
        fm.trigger(staged)
    assert err.value.host == "h1" and err.value.command == f"inject pause ({staged.id})"
    assert fm.staged == [] and fm.injected == []


def test_a_hung_host_is_released_when_the_pool_closes(tmp_path: Path) -> None:
    import threading

    h1 = scripted_host("h1")
    h1.rules[1].reply = HANG
    fm = manager(inventory(tmp_path), {"h1": h1})
    [staged] = fm.stage(pause())  # type: ignore[arg-type]
    errors: list[BaseException] = []

    def trigger() -> None:
        try:
            fm.trigger(staged)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=trigger)
    t.start()
    time.sleep(0.1)
    assert t.is_alive()
    fm.pool.close()
    t.join(5)
    assert not t.is_alive() and isinstance(errors[0], HostUnreachable)


def test_preflight_refuses_before_anything_is_sent(tmp_path: Path) -> None:
    h1 = scripted_host("h1")
    fm = manager(inventory(tmp_path), {"h1": h1})
    fm.capabilities["h1"] = Capabilities(have=EVERYTHING.have - {"iptables", "nft"})
    spec = parse_fault({"kind": "partition", "target": "h1", "cluster": "c", "peers": ["h2"]})
    with pytest.raises(PreflightError, match=r"^h1: a partition fault needs .*iptables"):
        fm.stage(spec)  # type: ignore[arg-type]
    fm.capabilities["h1"] = Capabilities(have=EVERYTHING.have - {"netem"}, netem_reason="Specified qdisc kind "
                                         "is unknown")
    with pytest.raises(PreflightError, match="no sch_netem"):
        fm.stage(parse_fault({"kind": "netem", "target": "h1", "cluster": "c", "delay_ms": 50}))  # type: ignore[arg-type]
    assert h1.calls == [] and fm.pending == [] and fm.staged == []


def listing(*entries: tuple[str, dict]) -> str:
    return "".join(f"{fid}\t9999999\t1000\t0\tactive\t{json.dumps(meta)}\n" for fid, meta in entries)


def test_recover_leaves_a_running_controllers_fault_alone_unless_forced(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])  # stands in for another drill's controller on this machine
    try:
        alive = {"host": socket.gethostname(), "user": "root", "pid": other.pid,
                 "start": process_start_time(other.pid)}
        dead = {**alive, "pid": other.pid, "start": (alive["start"] or 0) + 1}  # same pid, other process
        h1 = ScriptedRemote("h1", default=None)
        h1.on(lambda c: '"$J"/*.json' in c, Reply(stdout=listing(("aaaaaaaaaaaa", {"controller": alive}),
                                                                  ("bbbbbbbbbbbb", {"controller": dead}))))
        h1.on('.revert" recover', Reply(stdout="reverted 5.0 recover"))
        fm = manager(inventory(tmp_path), {"h1": h1})
        fm.pool.absent = frozenset({"h2"})
        report = fm.recover()
        assert report["h1"]["aaaaaaaaaaaa"].startswith(f"skipped: its controller (pid {other.pid}) still runs")
        assert report["h1"]["bbbbbbbbbbbb"] == "reverted"
        assert [fault_id_of(c) for c in h1.calls if ".revert" in c] == ["bbbbbbbbbbbb"]
        report = fm.recover(force=True)
        assert report["h1"] == {"aaaaaaaaaaaa": "reverted", "bbbbbbbbbbbb": "reverted"}
    finally:
        other.kill()
        other.wait()


def test_recover_of_some_hosts_never_asks_the_others(tmp_path: Path) -> None:
    """Another session's drill runs on the other hosts (its journal listed by nobody here)."""
    h1 = ScriptedRemote("h1", default=None)
    h1.on(lambda c: '"$J"/*.json' in c, Reply(stdout=listing(("cccccccccccc", {}))))
    h1.on('.revert" recover', Reply(stdout="reverted 5.0 recover"))
    h2 = ScriptedRemote("h2", default=None)
    fm = manager(inventory(tmp_path), {"h1": h1, "h2": h2})
    assert fm.recover(hosts=["h1"]) == {"h1": {"cccccccccccc": "reverted"}}
    assert h2.calls == []


# -- this machine as the host (root) ---------------------------------------------------------------
@pytest.fixture
def sleeper(tmp_path: Path):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(["sleep", "120"])
    pid_file = tmp_path / "db.pid"
    pid_file.write_text(f"{proc.pid}\n")
    yield proc, str(pid_file)
    proc.kill()
    proc.wait()


def state(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    raise AssertionError(pid)


def stopped_within(pid: int, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while state(pid) != "T":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def local_manager(tmp_path: Path, pid_file: str) -> FaultManager:
    inv = inventory(tmp_path, pid_file)
    fm = FaultManager(inv, RemotePool(inv, factory=LocalRemote), roles=lambda c: ({}, set()),
                      journal_root=str(tmp_path / "journal"))
    return fm


@ROOT_ONLY
def test_local_pause_is_applied_and_healed_by_the_controller(tmp_path: Path, sleeper) -> None:  # type: ignore[no-untyped-def]
    proc, pid_file = sleeper
    with local_manager(tmp_path, pid_file) as fm:
        before = time.time()
        [fault] = fm.inject(pause(duration=30.0))  # type: ignore[arg-type]
        # SIGSTOP is delivered when the target next runs: on a loaded machine that is a moment later
        assert stopped_within(proc.pid, 2.0) and fm.is_active(fault) is True
        assert before - 0.5 <= fault.t_effect <= time.time() + 0.5  # this machine's clock, offset measured
        entries = fm.journaled(["h1"])["h1"]
        assert [e["id"] for e in entries] == [fault.id] and entries[0]["active"] is True  # type: ignore[index]
    assert state(proc.pid) in ("S", "R")
    assert fault.revert_verified and fault.reverted_by == "controller"
    done = (tmp_path / "journal" / "faults" / os.uname().nodename / "done" / fault.id).read_text().split()
    assert done[1] == "controller" and float(done[0]) == pytest.approx(fault.t_reverted, abs=0.5)
    assert fm.journaled(["h1"])["h1"] == []


@ROOT_ONLY
def test_local_pause_is_healed_by_the_deadman_when_the_controller_is_gone(tmp_path: Path, sleeper) -> None:  # type: ignore[no-untyped-def]
    """The controller 'dies' after the trigger (its manager is dropped without a revert): the host
    reverts at the planned end + margin on its own."""
    proc, pid_file = sleeper
    fm = local_manager(tmp_path, pid_file)
    [fault] = fm.inject(pause(duration=1.0))  # type: ignore[arg-type]
    assert stopped_within(proc.pid, 2.0)
    jdir = tmp_path / "journal" / "faults" / os.uname().nodename
    deadline = time.time() + 1.0 + DEADMAN_MARGIN_S + 5.0
    while not (jdir / "done" / fault.id).exists() and time.time() < deadline:
        time.sleep(0.1)
    t_host, by = (jdir / "done" / fault.id).read_text().split()
    assert by == "deadman" and state(proc.pid) in ("S", "R")
    # at the planned end + margin (host clock = this clock), within the dead-man's poll
    assert float(t_host) - fault.t_effect == pytest.approx(1.0 + DEADMAN_MARGIN_S, abs=0.6)
    fm.injected.clear()  # the dead controller's memory
    assert fm.journaled(["h1"])["h1"] == []


@ROOT_ONLY
def test_local_recover_reverts_from_the_journal_alone(tmp_path: Path, sleeper, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    proc, pid_file = sleeper
    ghost = subprocess.Popen(["sleep", "30"])  # the 'other' controller, still running
    try:
        monkeypatch.setattr(manager_mod, "controller_identity", lambda: {
            "host": socket.gethostname(), "user": "root", "pid": ghost.pid, "start": process_start_time(ghost.pid)})
        first = local_manager(tmp_path, pid_file)
        [fault] = first.inject(pause(duration=60.0))  # type: ignore[arg-type]
        assert stopped_within(proc.pid, 2.0)
        second = local_manager(tmp_path, pid_file)
        second.pool.absent = frozenset({"h2"})
        assert second.recover()["h1"][fault.id].startswith(f"skipped: its controller (pid {ghost.pid})")
        assert state(proc.pid) == "T"
        ghost.kill()
        ghost.wait()
        assert second.recover()["h1"] == {fault.id: "reverted"}
        assert state(proc.pid) in ("S", "R")
        # the first controller, back, finds the host's record: reverted by recover, at the host's time
        first.revert(fault)
        assert fault.revert_verified and fault.reverted_by == "recover"
    finally:
        ghost.kill()
        ghost.wait()


def test_a_disk_fault_on_a_backup_repository_host_acts_on_the_repository_directory() -> None:
    """bk1 is no cluster member: a disk fault there acts on the repository directory the cluster's
    backup.repository declares (a full repository); a host with neither is refused naming both."""
    from chaoskit.errors import InputError

    lab = load_inventory(Path(__file__).resolve().parents[2] / "inventories" / "lab.yaml")
    fm = FaultManager(lab)
    spec = parse_fault({"kind": "disk_full", "target": "bk1", "free": "0", "duration": "5s"})
    assert fm.facts(spec, "bk1").data_dir == lab.clusters["pg-dr"].backup.repository.path  # type: ignore[union-attr]
    assert fm.facts(spec, "bk1").data_dir == "/var/lib/chaoskit-lab/hosts/bk1/disk/repo"
    with pytest.raises(InputError, match=r"give the member data_dir, or the cluster's backup\.repository path"):
        fm.facts(spec.replace(target="rs1"), "rs1")
