"""The load is the instrument: acknowledged writes are durable, the open loop holds its rate,
workers survive a crash. (Every built-in workload and a user's SQL run clean on the PostgreSQL and
MariaDB clusters of test_ha_managers and test_mha: tests/integration/cleanload.py.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from agentfiles import agent_pids, pid_alive, spooled
from cleanload import PARAMS, ledger_acked_and_present, run_load

from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.recorder import INFO, Recorder
from chaoskit.workload.kinds.ledger import Ledger
from chaoskit.workload.runner import LoadRunner, LoadSpec


def test_open_loop_holds_its_rate(lab: Inventory) -> None:
    spec = LoadSpec(workload="update", workers=8, rate=400, params=PARAMS)
    runner, rec = run_load(lab, "pg", spec, 8)
    assert runner.t_start is not None
    w = rec.window(runner.t_start + 1, runner.t_start + 7)
    assert w["tps"] == pytest.approx(400, rel=0.05), w
    assert w["missed"] == 0 and w["fail"] == 0


def _mariadb_process(lab: Inventory) -> tuple[str, str, str]:
    member = lab.clusters["mariadb"].members[0]
    proc = member.processes["mariadb"]
    assert proc.start
    return member.host, proc.pid_file, proc.start


def test_worker_survives_kill_and_restart(lab: Inventory, pool: RemotePool) -> None:
    host, pid_file, start = _mariadb_process(lab)
    primary = lab.clusters["mariadb"]
    single = primary.model_copy(update={"endpoints": (primary.endpoints[0],)})
    lab_single = lab.model_copy(update={"clusters": {**lab.clusters, "mariadb": single}})
    remote = pool.get(host)
    marks: dict[str, float] = {}

    def crash_and_restart(runner: LoadRunner) -> None:
        time.sleep(2.5)
        marks["kill"] = time.time()
        remote.run(f"kill -9 $(head -1 {pid_file})", sudo=True)
        time.sleep(2.0)
        marks["restart"] = time.time()
        remote.run(start, sudo=True)

    spec = LoadSpec(workload="ledger", workers=3, params=PARAMS, op_timeout=3)
    runner, rec = run_load(lab_single, "mariadb", spec, 12, during=crash_and_restart)
    classes = {e[4] for e in rec.errors}
    assert classes and classes <= {"connect_refused", "connection_lost", "timeout"}, classes
    assert "connect_refused" in classes
    assert all(e[0] >= marks["kill"] for e in rec.errors)
    workers_ok_after = {g.worker for g in rec.gaps if g.first_ok_after and g.first_ok_after > marks["restart"]}
    assert workers_ok_after == {1, 2, 3}, rec.gaps  # every worker came back by itself
    assert rec.window(time.time() - 3, time.time())["ok"] >= 0
    tail = rec.to_frame()
    assert tail[tail["t"] > marks["restart"] + 3]["ok"].sum() > 50
    # durability: every acknowledged ledger write survived the crash
    acked, present = ledger_acked_and_present(runner, rec)
    assert acked <= present


def test_frozen_server_yields_errors_not_a_hang(lab: Inventory, pool: RemotePool) -> None:
    host, pid_file, _ = _mariadb_process(lab)
    remote = pool.get(host)
    primary = lab.clusters["mariadb"]
    single = primary.model_copy(update={"endpoints": (primary.endpoints[0],)})
    lab_single = lab.model_copy(update={"clusters": {**lab.clusters, "mariadb": single}})
    stopped = threading.Event()

    def freeze(runner: LoadRunner) -> None:
        time.sleep(1.5)
        remote.run(f"kill -STOP $(head -1 {pid_file})", sudo=True)
        stopped.set()
        time.sleep(4)
        remote.run(f"kill -CONT $(head -1 {pid_file})", sudo=True)

    spec = LoadSpec(workload="update", workers=2, params=PARAMS, op_timeout=1.5, connect_timeout=1)
    try:
        _, rec = run_load(lab_single, "mariadb", spec, 9, during=freeze)
    finally:
        remote.run(f"kill -CONT $(head -1 {pid_file})", sudo=True)
    assert stopped.is_set()
    assert {e[4] for e in rec.errors} & {"timeout", "connection_lost"}, rec.errors[:3]
    gaps = [g for g in rec.gaps if g.first_ok_after]
    assert gaps and all(g.first_ok_after - g.first_err < 6 for g in gaps)


def test_driver_reaches_writer_after_standby_only_endpoint(lab: Inventory) -> None:
    cluster = lab.clusters["mariadb"]
    reversed_eps = cluster.model_copy(update={"endpoints": tuple(reversed(cluster.endpoints))})
    driver = driver_for(reversed_eps, lab)
    conn = driver.connect_writer()  # first endpoint is the read-only replica: skipped
    try:
        assert driver.is_writable(conn)
    finally:
        conn.close()


# -- PostgreSQL through the event loop (the engine every PostgreSQL load uses by default) ----------
def _pg_single(lab: Inventory, pool: RemotePool) -> tuple[object, str, str]:
    member = lab.clusters["pg-single"].members[0]
    proc = member.processes["postgres"]
    assert proc.start
    return pool.get(member.host), proc.pid_file, proc.start


def _postmaster_and_children(pid_file: str) -> str:
    return f"pm=$(head -1 {pid_file}); kids=$(ps -o pid= --ppid $pm | tr '\\n' ' ')"


def _ensure_running(remote: object, pid_file: str, start: str) -> None:
    remote.run(f"kill -CONT $(head -1 {pid_file}) $(ps -o pid= --ppid $(head -1 {pid_file})) 2>/dev/null; "  # type: ignore[attr-defined]
               f"kill -0 $(head -1 {pid_file} 2>/dev/null) 2>/dev/null || {start}", sudo=True, check=False)


def test_pg_loop_survives_kill_and_restart(lab: Inventory, pool: RemotePool) -> None:
    remote, pid_file, start = _pg_single(lab, pool)
    marks: dict[str, float] = {}

    def crash_and_restart(runner: LoadRunner) -> None:
        time.sleep(2.5)
        marks["kill"] = time.time()
        # kill -9 the postmaster, wait for its backends to notice and exit, then start it again
        remote.run(f"{_postmaster_and_children(pid_file)}; kill -9 $pm; for i in $(seq 100); do "  # type: ignore[attr-defined]
                   "alive=0; for k in $kids; do kill -0 $k 2>/dev/null && alive=1; done; "
                   "[ $alive = 0 ] && break; sleep 0.05; done", sudo=True)
        time.sleep(1.5)
        marks["restart"] = time.time()
        remote.run(start, sudo=True)  # type: ignore[attr-defined]

    spec = LoadSpec(workload="ledger", workers=6, params=PARAMS, op_timeout=3)
    assert spec.uses_loop("postgres")
    try:
        runner, rec = run_load(lab, "pg-single", spec, 12, during=crash_and_restart)
    finally:
        _ensure_running(remote, pid_file, start)
    classes = {e[4] for e in rec.errors}
    assert classes and classes <= {"connect_refused", "connection_lost", "timeout"}, classes
    assert {"connect_refused", "connection_lost"} <= classes, classes
    assert all(e[0] >= marks["kill"] for e in rec.errors)
    workers_ok_after = {g.worker for g in rec.gaps if g.first_ok_after and g.first_ok_after > marks["restart"]}
    assert workers_ok_after == set(range(1, 7)), rec.gaps  # every worker came back by itself
    tail = rec.to_frame()
    assert tail[tail["t"] > marks["restart"] + 3]["ok"].sum() > 50
    acked, present = ledger_acked_and_present(runner, rec)
    assert acked and acked <= present, f"{len(acked - present)} acknowledged rows missing"
    assert present <= acked | set(rec.ledger_keys(INFO)), "phantom rows"


def test_pg_loop_frozen_server_yields_timeouts_not_a_hang(lab: Inventory, pool: RemotePool) -> None:
    remote, pid_file, start = _pg_single(lab, pool)
    marks: dict[str, float] = {}

    def freeze(runner: LoadRunner) -> None:
        time.sleep(1.5)
        marks["stop"] = time.time()
        remote.run(f"{_postmaster_and_children(pid_file)}; kill -STOP $pm $kids", sudo=True)  # type: ignore[attr-defined]
        time.sleep(4)
        marks["cont"] = time.time()
        remote.run(f"{_postmaster_and_children(pid_file)}; kill -CONT $pm $kids", sudo=True)  # type: ignore[attr-defined]

    spec = LoadSpec(workload="update", workers=4, params=PARAMS, op_timeout=1.5, connect_timeout=1)
    try:
        _, rec = run_load(lab, "pg-single", spec, 10, during=freeze)
    finally:
        _ensure_running(remote, pid_file, start)
    errors = rec.errors
    assert errors and {e[4] for e in errors} <= {"timeout", "connection_lost", "connect_refused"}, errors[:3]
    # the ops in flight when the server froze end at the client deadline (op_timeout + 0.25 s), as timeouts
    first = min(e[0] for e in errors)
    assert marks["stop"] + 1.5 <= first <= marks["stop"] + 1.75 + 0.5, (first - marks["stop"], errors[:3])
    assert errors[0][4] == "timeout" and errors[0][3] == INFO  # an update in flight: outcome unknown
    gaps = [g for g in rec.gaps if g.first_ok_after]
    assert {g.worker for g in gaps} == {1, 2, 3, 4}
    assert all(g.first_ok_after - marks["cont"] < 3 for g in gaps), gaps


def test_load_agents_spool_every_result_and_the_recorder_holds_exactly_that(lab: Inventory, tmp_path: Path) -> None:
    """The ledger for 8 s through load agents (a detached process per share, spooling its
    deliveries): what the recorder holds equals what the agents spooled, every acknowledged row is
    on the writer and no row is there that no write was acknowledged or left indeterminate for; the
    agents are gone after the stop."""
    from chaoskit.workload.agent import agent_sources

    spec = LoadSpec(workload="ledger", workers=4, params=PARAMS)
    recorder = Recorder(base=time.time())
    events: list[dict] = []
    runner = LoadRunner(lab.clusters["pg"], lab, spec, recorder, on_event=events.append,
                        make_sources=agent_sources(tmp_path / "agents"))
    runner.setup()
    runner.run_for(8)
    kinds, spooled_acks = spooled(tmp_path / "agents")
    shares = len(runner.sources)
    assert kinds.count("ready") == kinds.count("final") == shares, kinds
    totals = recorder.totals()
    assert totals["fail"] == 0 and totals["info"] == 0, recorder.errors[:5]
    assert totals["ok"] > 200 and totals["write_ok"] == spooled_acks
    acked, present = ledger_acked_and_present(runner, recorder)
    assert len(acked) == spooled_acks and acked <= present and present <= acked | set(recorder.ledger_keys(INFO))
    assert not recorder.ledger_undelivered()
    assert not [e for e in events if e["kind"] in ("loader_lost", "load_source_lost")], events
    assert not [p for p in agent_pids(tmp_path / "agents") if pid_alive(p)]


def test_load_agents_on_a_clock_10_s_ahead_stamp_on_the_control_clock(lab: Inventory, tmp_path: Path) -> None:
    """Agents whose clock runs 10 s ahead (their python's time.time, faked per process the way a
    loader host's clock would be off), told that offset as a loader host's measured offset is
    told: they start at the control instant and stamp on the control clock. Every ledger row's
    client time, read back from the writer, and every ack time the recorder holds lie between the
    start and the stop plus what an agent may still finish after it (its stop poll, an op in
    flight up to its client deadline, a second): uncorrected they would be 10 s later; with the
    sign wrong, 10 s earlier than the start."""
    import sys

    from chaoskit.workload.agent import POLL_S, agent_sources
    from chaoskit.workload.outcomes import client_deadline

    ahead = 10.0
    fake = tmp_path / "ahead"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(f"import time\n_real = time.time\ntime.time = lambda: _real() + {ahead!r}\n")
    python = tmp_path / "python-ahead"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    make = agent_sources(tmp_path / "agents", python=str(python))

    def told(runner: LoadRunner) -> list:
        sources = make(runner)
        for s in sources:  # as check() sets a loader host's measured offset
            s.loader.clock_offset_s = s.clock_offset_s = ahead  # type: ignore[attr-defined]
        return sources

    spec = LoadSpec(workload="ledger", workers=2, params=PARAMS)
    recorder = Recorder(base=time.time())
    runner = LoadRunner(lab.clusters["pg"], lab, spec, recorder, make_sources=told)
    runner.setup()
    runner.run_for(4)
    assert runner.t_start is not None and runner.t_end is not None
    after_stop = runner.t_end + POLL_S + client_deadline(spec.op_timeout) + 1.0
    assert after_stop < runner.t_end + ahead
    conn = runner.driver.connect_writer()
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT count(*), min(client_ts), max(client_ts) FROM {Ledger.TABLE} WHERE run_id = %s",
                    (spec.run_id,))
        rows, first, last = cur.fetchone()
    finally:
        Driver.close_quietly(conn)
    assert rows > 20
    assert runner.t_start - 0.01 <= first and last <= after_stop, (runner.t_start, first, last, runner.t_end)
    for w, ranges in recorder.ledger_acknowledged().items():
        for seq in (ranges[0][0], ranges[-1][1]):
            _, t = recorder.ledger_outcome(w, seq)
            assert t is not None and runner.t_start - 0.01 <= t <= after_stop, (w, seq, t)
    logs = " ".join(p.read_text() for p in (tmp_path / "agents").glob("*/agent.log"))
    assert logs.count("clock offset +10.000000 s") == len(runner.sources), logs[-2000:]


CONTROLLER = """
import sys, time
from pathlib import Path
from chaoskit.inventory.loader import load_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.agent import agent_sources
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.workloads import WorkloadParams
inv = load_inventory(Path(sys.argv[1]))
spec = LoadSpec(workload="ledger", workers=2, params=WorkloadParams(table_rows=2_000))
runner = LoadRunner(inv.clusters["pg"], inv, spec, Recorder(base=time.time()),
                    make_sources=agent_sources(Path(sys.argv[2]), float(sys.argv[3])))
runner.setup()
runner.start()
print("started", flush=True)
time.sleep(600)
"""


def test_load_agents_whose_controller_was_killed_stop_at_their_lease(lab: Inventory, tmp_path: Path) -> None:
    """The controller SIGKILLed while its agents load: nobody renews their 4 s lease, and each one
    stops by itself, its final batch spooled, within the lease and its own stop (the op deadline
    of 2.25 s and a second): the load never outlives its controller by more than that."""
    import os
    import signal
    import subprocess
    import sys

    lease = 4.0
    agents = tmp_path / "agents"
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, lab.source, str(agents), str(lease)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert ctl.stdout is not None and ctl.stdout.readline().strip() == "started"
        time.sleep(1.0)  # loading: every agent renewed at least once
        pids = agent_pids(agents)
        assert pids and all(pid_alive(p) for p in pids)
        ctl.send_signal(signal.SIGKILL)
        killed = time.time()
        ctl.wait(10)
        bound = lease + 2.25 + 1.0 + 2.0  # the lease, the op deadline, the drain, the pid's reaping
        while any(pid_alive(p) for p in pids) and time.time() < killed + bound + 30:
            time.sleep(0.1)
        assert not [p for p in pids if pid_alive(p)]
        assert time.time() - killed <= bound, time.time() - killed
        kinds, _ = spooled(agents)
        assert kinds.count("final") == len(pids)
        logs = " ".join(p.read_text() for p in agents.glob("*/agent.log"))
        assert logs.count('"lease_ended": true') == len(pids), logs[-2000:]
    finally:
        if ctl.poll() is None:
            ctl.kill()
        for p in agent_pids(agents):  # only ours, by their pid files
            if pid_alive(p):
                os.kill(p[0], signal.SIGKILL)
