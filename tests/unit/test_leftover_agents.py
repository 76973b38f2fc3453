"""`chaoskit recover` ends the load agents a dead controller left on loader hosts
(`chaoskit.workload.leftovers`), with this machine as the loader host (`LocalRemote`) and stand-in
agents: processes with the pid files and controller files a real agent's directory has."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaoskit.lifeline import process_start_time
from chaoskit.testing.remote import LocalRemote
from chaoskit.workload import leftovers
from chaoskit.workload.agent import CONTROLLER, PID, STOP

# stops as an agent does: once `stop` appears in its directory
POLITE = "import os, sys, time\nwhile not os.path.exists(os.path.join(sys.argv[1], 'stop')): time.sleep(0.05)\n"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def agent_dir(spool: Path, name: str, procs: list[subprocess.Popen], polite: bool,
              controller: dict | None) -> tuple[Path, subprocess.Popen]:
    d = spool / "run-1" / name
    d.mkdir(parents=True)
    cmd = [sys.executable, "-c", POLITE, str(d)] if polite else ["sleep", "60"]
    p = subprocess.Popen(cmd)
    procs.append(p)
    (d / PID).write_text(f"{p.pid}\n{process_start_time(p.pid)}\n")
    if controller is not None:
        (d / CONTROLLER).write_text(json.dumps(controller))
    return d, p


def identity(p: subprocess.Popen) -> dict:
    return {"host": socket.gethostname(), "user": "root", "pid": p.pid, "start": process_start_time(p.pid)}


def gone(p: subprocess.Popen) -> bool:
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_recover_stops_agents_of_a_dead_controller_and_spares_a_live_ones(tmp_path: Path, procs: list,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leftovers, "STOP_WAIT_S", 1.0)
    spool = tmp_path / "spool"
    dead_ctl = subprocess.Popen(["true"])
    dead_ctl.wait()  # a controller that is gone: its pid no longer runs
    live_ctl = subprocess.Popen(["sleep", "60"])
    procs.append(live_ctl)
    polite_dir, polite = agent_dir(spool, "zone-a-1", procs, True, {**identity(live_ctl), "pid": dead_ctl.pid})
    stubborn_dir, stubborn = agent_dir(spool, "zone-a-3", procs, False, None)  # no controller file: ended
    spared_dir, spared = agent_dir(spool, "zone-b-5", procs, True, identity(live_ctl))
    ended_dir = spool / "run-0" / "zone-b-1"  # an agent that ended: its pid file names a process gone
    ended_dir.mkdir(parents=True)
    (ended_dir / PID).write_text(f"{dead_ctl.pid}\n1\n")
    remote = LocalRemote("ld-x")

    found, odd = leftovers.leftovers(remote, str(spool))
    assert odd == [] and sorted((a.directory, a.pid) for a in found) == sorted(
        [(str(polite_dir), polite.pid), (str(stubborn_dir), stubborn.pid), (str(spared_dir), spared.pid)])
    done = {a.directory: a.ended_by_recover(force=False) or leftovers.end(remote, a) for a in found}
    assert done[str(polite_dir)].startswith(f"ended (pid {polite.pid}: it stopped when asked")
    assert done[str(stubborn_dir)].startswith(f"killed (pid {stubborn.pid}: still running 1 s after")
    assert done[str(spared_dir)] == f"skipped: its controller (pid {live_ctl.pid}) still runs; --force ends it"
    assert gone(polite) and gone(stubborn) and spared.poll() is None
    assert (polite_dir / STOP).exists() and not (spared_dir / STOP).exists()
    assert polite_dir.is_dir() and (polite_dir / PID).exists()  # the directory (the spool's evidence) stays

    [again] = leftovers.leftovers(remote, str(spool))[0]
    assert again.directory == str(spared_dir) and again.ended_by_recover(force=True) is None
    assert leftovers.end(remote, again).startswith("ended") and gone(spared)


def test_a_directory_that_is_not_a_plain_path_is_said_and_never_touched(tmp_path: Path, procs: list,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where the host's shell runs: a canary that ran would appear here
    spool = tmp_path / "spool"
    canary = tmp_path / "CANARY"
    hostile, p = agent_dir(spool, "x'$(touch CANARY)'`touch CANARY`", procs, False, None)
    found, odd = leftovers.leftovers(LocalRemote("ld-x"), str(spool))
    assert found == [] and len(odd) == 1 and "not a plain path" in odd[0]
    assert not canary.exists() and not (hostile / STOP).exists() and p.poll() is None


def test_the_listing_is_read_as_data() -> None:
    """Lines the parser cannot read are said; an agent outside the spool is refused; the
    controller file is JSON or nothing."""
    import base64

    def b(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    out = "\n".join([f"agent 12 {b(json.dumps({'pid': 3}))} {b('/s/r/g-1')}", f"agent 13 - {b('/t/r/g-1')}",
                     f"agent x - {b('/s/r/g-2')}", f"agent 14 {b('not json')} {b('/s/r/g-3')}", "listed"])
    found, odd = leftovers.parse_listing("h", "/s", out)
    assert [(a.directory, a.pid, a.controller) for a in found] == [("/s/r/g-1", 12, {"pid": 3}),
                                                                  ("/s/r/g-3", 14, None)]
    assert odd == ["an agent directory outside the spool: '/t/r/g-1'",
                   f"an unreadable line 'agent x - {b('/s/r/g-2')}'"]
    assert leftovers.parse_listing("h", "/s", "agent 12 - x")[1][0].startswith("the listing did not finish")


def test_each_agent_is_ended_through_its_own_loader_host(tmp_path: Path, procs: list) -> None:
    """Two loader hosts sharing the spool's filesystem (as the lab's do): each lists both agents,
    and each agent is ended through the host it was started on, once."""
    from chaoskit.inventory import load_inventory
    from chaoskit.inventory.fanout import RemotePool

    spool = tmp_path / "spool"
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone_ctl = {"host": socket.gethostname(), "pid": dead.pid, "start": 1}
    a_dir, a = agent_dir(spool, "zone-a-1", procs, True, {**gone_ctl, "loader": "ld-a"})
    b_dir, b = agent_dir(spool, "zone-b-3", procs, True, {**gone_ctl, "loader": "ld-b"})
    inv_file = tmp_path / "inv.yaml"
    inv_file.write_text(f"""
hosts:
  db1: {{address: 10.9.0.11}}
  ld-a: {{address: 10.9.0.81}}
  ld-b: {{address: 10.9.0.82}}
clusters:
  c: {{engine: postgres, user: postgres, members: [{{host: db1}}]}}
loaders: {{hosts: [ld-a, ld-b], python: /usr/bin/python3, spool: {spool}}}
""")
    inv = load_inventory(inv_file)
    with RemotePool(inv, factory=LocalRemote) as pool:
        report = leftovers.recover_agents(inv, pool)
    assert list(report["ld-a"]) == [str(a_dir)] and list(report["ld-b"]) == [str(b_dir)], report
    assert all(what.startswith("ended") for done in report.values() for what in done.values())
    assert gone(a) and gone(b)
