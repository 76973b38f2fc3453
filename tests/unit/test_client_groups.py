"""Client groups and profiles, per-group figures and SLOs, and history.jsonl.

The figures use test_figures.py's hand-written history (T0 = 1000, fault at F = 1010, interval
0.125 s) with worker 1 as the `deadline` group and worker 2 as the `pool` group; every expected
value is derived in the comments. history.jsonl is re-read with plain `json` and RTO and the lost
writes recomputed from it by code written here, independently of chaoskit's analysis."""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError
from test_figures import T0, F, outcome1, outcome2, probe, t1, t2

from chaoskit.analysis.drill import analyse as analyse_drill
from chaoskit.db.base import ClientProfile, ErrorClass
from chaoskit.faults.manager import InjectedFault
from chaoskit.history import OpHistory
from chaoskit.playbook.models import LoadConfig, Playbook
from chaoskit.playbook.record import DrillRecord
from chaoskit.recorder import FAIL, INFO, OK, SEQUENCE, Recorder
from chaoskit.workload.runner import _Worker
from chaoskit.workload.spec import ClientGroup, LoadSpec

GROUPS = {"deadline": {"profile": "deadline", "workers": [1]}, "pool": {"profile": "pool", "workers": [2]}}
ACKED = {(1, k + 1) for k in range(240) if outcome1(k) == OK} | {(2, k + 1) for k in range(240) if outcome2(k) == OK}
LOST = {(1, 79), (1, 80), (2, 82)}


def recorder(keep: bool = True) -> Recorder:
    """test_figures' history, with each op's node: pg1 before the fault, pg2 from 1013 s."""
    rec = Recorder(T0, interval=0.125, keep_ops=keep)
    for k in range(240):
        for w, t, outcome in ((1, t1(k), outcome1(k)), (2, t2(k), outcome2(k))):
            cls = None if outcome == OK else "connection_lost" if outcome == INFO else "connect_refused"
            rec.record(w, "write", t - 0.01, t, outcome, cls, key=k + 1, keyed=SEQUENCE,
                       node="pg1" if t < 1013 else "pg2")
    rec.keep_around(F)
    rec.finish()
    return rec


def playbook(**slo: Any) -> Playbook:
    return Playbook.model_validate({
        "name": "g", "cluster": "pg", "baseline": "8s", "duration": "30s",
        "load": {"workload": "ledger", "warmup": "2s", "groups": [{"profile": "deadline", "workers": 1},
                                                                  {"profile": "pool", "workers": 1}]},
        "steps": [{"at": "10s", "fault": {"kind": "kill", "target": "role:primary"}}],
        "recovery": {"within": "30s", "tps_fraction": 0.9, "hold": "3s"}, "checks": ["rpo"], "slo": slo})


@dataclass
class Ctx:
    playbook: Playbook
    recorder: Recorder
    probe: Any
    faults: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    preflight: dict = field(default_factory=lambda: {"ha": {"manager": "patroni"}})
    groups: dict = field(default_factory=lambda: GROUPS)
    t0: float = T0
    ended: float = 1030.0
    aborted: str | None = None


def analyse(ctx: Ctx, truth: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The drill's analysis of a hand-made run: its fields as the drill's record."""
    run = DrillRecord(started=ctx.t0, t0=ctx.t0, ended=ctx.ended, preflight=ctx.preflight, faults=ctx.faults,
                      actions=ctx.actions, groups=ctx.groups, aborted=ctx.aborted)
    return analyse_drill(ctx.playbook, run, ctx.recorder, ctx.probe.log, truth)


def kill() -> InjectedFault:
    return InjectedFault(id="f", kind="kill", host="pg1", target="role:primary", spec={}, t_scheduled=F,
                         t_staged=F - 1.5, t_sent=F, t_effect=F, t_effect_host=F, t_apply_start=F, t_applied=F,
                         offset_s=0.0, offset_uncertainty_s=0.0, step=0)


def run(pb: Playbook) -> dict:
    results, _ = analyse(Ctx(pb, recorder(), type("P", (), {"log": probe()})(), [kill()]),
                         {"ledger_present": {"rows": ACKED - LOST}})
    return results


def test_each_group_has_its_own_rto_write_gap_and_rpo() -> None:
    g = run(playbook())["groups"]
    # deadline = worker 1: last ok k = 79 (1009.9375), first ok again k = 112 (1014.0625)
    assert (g["deadline"]["rto_first_client_s"], g["deadline"]["write_gap_s"]) == (4.0625, 4.125)
    assert g["deadline"]["rto_all_clients_s"] == 4.0625  # one client: first back is all back
    # pool = worker 2: last ok k = 81 (1010.21875), first ok k = 124 (1015.59375)
    assert (g["pool"]["rto_all_clients_s"], g["pool"]["write_gap_s"]) == (5.59375, 5.375)
    assert g["pool"]["faults"][0]["per_client_rto_s"] == {"2": 5.59375}
    d, p = g["deadline"]["rpo"], g["pool"]["rpo"]
    # worker 1 lost seq 79, 80 (k = 78, 79: acked 1009.8125 -> 9812 ms, 1009.9375 -> 9937 ms after T0)
    assert (d["acknowledged"], d["lost_acknowledged"], d["lost_ack_window_rel_s"]) == (206, 2, [-0.188, -0.063])
    assert d["lost_by_node"] == {"pg1": 2}
    assert d["text"] == "2 lost, acknowledged between -0.188 s and -0.063 s of the fault, on pg1 (2)"
    # worker 2 lost seq 82 (k = 81, acked 1010.21875 -> 10218 ms: +0.218 s after the fault, on pg1)
    assert (p["acknowledged"], p["lost_acknowledged"], p["lost_ack_window_rel_s"]) == (197, 1, [0.218, 0.218])
    assert (p["indeterminate"], p["phantoms"]) == (1, 0)  # worker 2's info k = 82


def test_slos_judge_the_worst_group_unless_one_is_named() -> None:
    r = run(playbook(rto_max="5s", rpo_max_writes=1))
    # the first client back is at 4.0625 (deadline), all clients back at 5.59375 (pool's one client)
    assert (r["faults"][0]["rto_first_client_s"], r["faults"][0]["rto_all_clients_s"]) == (4.0625, 5.59375)
    assert r["slo"]["rto_max"] == {"target": 5.0, "measured": 5.59375, "ok": False, "judges": "rto_all_clients_s",
                                   "by_group": {"deadline": 4.0625, "pool": 5.59375}}
    assert r["slo"]["rpo_max_writes"] == {"target": 1, "measured": 2, "ok": False,
                                          "by_group": {"deadline": 2, "pool": 1}}
    assert r["groups"]["deadline"]["rpo"]["valid"] is False and r["groups"]["pool"]["rpo"]["valid"] is True
    r = run(playbook(rto_max="5s", rpo_max_writes=1, group="deadline"))
    assert r["slo"]["rto_max"]["measured"] == 4.0625 and r["slo"]["rto_max"]["ok"] is True
    assert r["slo"]["rpo_max_writes"]["by_group"] == {"deadline": 2}
    assert r["groups"]["pool"]["rpo"]["valid"] is True  # no bound for a group the SLO does not name


def test_history_jsonl_lets_anyone_recompute_rto_and_the_lost_writes() -> None:
    rec = recorder()
    buf = io.StringIO()
    n = rec.history.write(buf, run_id="r", groups={"deadline": [1], "pool": [2]},
                          faults=[{"id": "f", "t_fault": F, "target_host": "pg1"}], present=ACKED - LOST)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    header, ops = lines[0], lines[1:]
    assert header["format"] == "chaoskit-history/1" and header["windows"] == [[F - 30, F + 30]]
    # every op completing within [980, 1040] that was invoked before 1040: all 480 ops of the run
    assert n == len(ops) == 480 and header["ops"] == 480 and header["dropped"] == 0
    assert ops == sorted(ops, key=lambda o: (o["t_done"], o["worker"]))
    # recompute, as a reader would: per worker, the first error at/after the fault, then its next ok
    rto = {}
    for w in (1, 2):
        mine = [o for o in ops if o["worker"] == w]
        first_err = next(o for o in mine if o["t_done"] >= F and o["outcome"] != "ok")
        back = next(o for o in mine if o["t_done"] > first_err["t_done"] and o["outcome"] == "ok")
        rto[w] = back["t_done"] - F
    assert rto == {1: 4.0625, 2: 5.59375}
    lost = {(o["worker"], o["seq"]) for o in ops if o["outcome"] == "ok" and o["found"] is False}
    assert lost == LOST
    assert {o["node"] for o in ops if (o["worker"], o.get("seq")) in LOST and o["outcome"] == "ok"} == {"pg1"}
    assert ops[0]["group"] == "deadline" and {o["group"] for o in ops} == {"deadline", "pool"}


def test_op_history_keeps_only_the_windows_within_its_bound() -> None:
    h = OpHistory(window_s=2.0, recent_s=3.0, max_kept=5)
    ops = [(float(t), float(t) + 0.5, 1, "write", "ok", t, None, None) for t in range(20)]
    h.add(ops[:10])  # t_done up to 9.5: ops done before 6.5 leave the recent buffer, unkept
    h.keep_around(10.0)  # window [8, 12]
    h.add(ops[10:])  # done up to 19.5: ops done before 16.5 leave: those in [8, 12] are kept
    h.flush()
    # ops overlapping [8, 12]: invoked <= 12 and done >= 8 -> t = 8..12 (done 8.5..12.5): 5 ops
    assert [o.t_invoke for o in h.kept] == [8.0, 9.0, 10.0, 11.0, 12.0] and h.dropped == 0
    h2 = OpHistory(window_s=2.0, recent_s=3.0, max_kept=3)
    h2.keep_around(10.0)
    h2.add(ops)
    h2.flush()
    assert len(h2.kept) == 3 and h2.dropped == 2


def test_load_groups_in_the_playbook() -> None:
    cfg = LoadConfig.model_validate({"groups": [{"profile": "deadline", "workers": 3},
                                                {"name": "app", "profile": "pool", "workers": 2,
                                                 "statement_timeout": "30s", "validation": True},
                                                {"profile": "per-op", "workers": 1}]})
    spec = cfg.to_spec()
    assert cfg.workers == spec.workers == 6
    assert [(g.name, g.profile, list(g.worker_ids)) for g in spec.client_groups()] == [
        ("deadline", "deadline", [1, 2, 3]), ("app", "pool", [4, 5]), ("per-op", "per-op", [6])]
    assert spec.client_groups()[1].client_profile() == ClientProfile("pool", 30.0, True)
    assert LoadConfig(workers=5).to_spec().client_groups() == (ClientGroup("main", "deadline", 5),)
    for bad, message in [
        ({"workers": 3, "groups": [{"workers": 2}]}, "must be the sum of the groups' workers (2)"),
        ({"groups": [{"profile": "pool"}, {"profile": "pool"}]}, "two groups named 'pool'"),
        ({"groups": [{"profile": "deadline", "statement_timeout": "1s"}]}, "takes its timeout from load.op_timeout"),
        ({"groups": [{"profile": "per-op", "validation": True}]}, "validation is a pool's check"),
        ({"groups": []}, "at least one group"),
    ]:
        with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            LoadConfig.model_validate(bad)
    with pytest.raises(ValidationError, match=r"slo\.group 'app' is not a group of the load"):
        playbook(group="app")


class FakeDriver:
    """Each connection is a dict; `freeze` makes ops block until released or interrupted."""

    family = "fake"

    def __init__(self) -> None:
        self.connects = 0
        self.pings = 0
        self.interrupts = 0
        self.freeze = threading.Event()
        self.released = threading.Event()
        self.fail_ping = False

    def connect_writer(self) -> dict:
        self.connects += 1
        return {"n": self.connects, "dead": threading.Event()}

    def connect_client(self) -> dict:  # the load's clients connect here (the writer: not a read route)
        return self.connect_writer()

    def node_of(self, conn: dict) -> str:
        return f"node{conn['n']}"

    def ping(self, conn: dict) -> None:
        self.pings += 1
        if self.fail_ping:
            self.fail_ping = False
            raise ConnectionResetError("stale")

    def interrupt(self, conn: dict) -> None:
        self.interrupts += 1
        conn["dead"].set()

    def classify(self, exc: BaseException) -> ErrorClass:
        return ErrorClass.connection_lost

    @staticmethod
    def close_quietly(conn: Any) -> None:
        pass


class FakeWorkload:
    writes = True
    keyed = SEQUENCE

    def __init__(self, driver: FakeDriver) -> None:
        self.driver = driver

    def run(self, conn: dict, ctx: Any) -> str:
        ctx.committing()
        if self.driver.freeze.is_set():
            while not (conn["dead"].is_set() or self.driver.released.is_set()):
                time.sleep(0.005)
            if conn["dead"].is_set():
                raise ConnectionResetError("interrupted")
        ctx.key = (ctx.key or 0) + 1
        return "write"


def worker(profile: str, validate: bool = False) -> tuple[_Worker, FakeDriver, Recorder, threading.Event]:
    drv = FakeDriver()
    rec = Recorder(time.time(), keep_ops=True)
    stop = threading.Event()
    spec = LoadSpec(workload="ledger", workers=1)
    w = _Worker(1, drv, FakeWorkload(drv), spec, rec, stop, None, time.time(),  # type: ignore[arg-type]
                ClientGroup("g", profile, 1, validate=validate))
    return w, drv, rec, stop


def test_a_pool_client_waits_for_a_frozen_server_where_a_deadline_client_gives_up() -> None:
    for profile, interrupted in (("deadline", True), ("pool", False)):
        w, drv, rec, stop = worker(profile)
        drv.freeze.set()
        t = threading.Thread(target=w.run)
        t.start()
        time.sleep(0.05)
        w.watchdog_check(time.time() + 10, deadline=2.25)  # 10 s into a frozen op
        assert (drv.interrupts == 1) is interrupted, profile
        drv.released.set()  # the server wakes up: a pool's op completes, acknowledged late
        time.sleep(0.05)
        stop.set()
        t.join(5)
        outcomes = [op[4] for op in rec.ops]
        assert outcomes[0] == (INFO if interrupted else OK), profile
        # at the load's stop every profile's stuck op is interrupted (the drill is over)
        w2, drv2, _, stop2 = worker(profile)
        drv2.freeze.set()
        t2 = threading.Thread(target=w2.run)
        t2.start()
        time.sleep(0.05)
        stop2.set()
        w2.watchdog_check(time.time() + 10, deadline=2.25, stopping=True)
        t2.join(5)
        assert drv2.interrupts == 1 and not t2.is_alive()


def test_per_op_connects_for_every_op_and_a_pool_validates_on_checkout() -> None:
    w, drv, rec, _ = worker("per-op")
    for _ in range(3):
        assert w._checkout(time.time())
        w._one_op(time.time())
        w._drop()  # what run() does after each op of a per-op worker
    assert drv.connects == 3 and [op[6] for op in rec.ops] == ["node1", "node2", "node3"]
    w, drv, rec, _ = worker("pool", validate=True)
    for _ in range(3):
        assert w._checkout(time.time())
        w._one_op(time.time())
    assert (drv.connects, drv.pings) == (1, 2)  # one connection; validated before the 2nd and 3rd op
    drv.fail_ping = True  # a stale connection found on checkout: replaced before the op, no failure
    assert w._checkout(time.time())
    w._one_op(time.time())
    assert drv.connects == 2 and [op[4] for op in rec.ops] == [OK] * 4 and rec.ops[-1][6] == "node2"
    assert FAIL not in {op[4] for op in rec.ops}


def test_an_op_acknowledged_after_the_stall_bound_is_an_outage() -> None:
    """A pool client's write frozen for 20 s and then acknowledged: its gap runs from the moment it
    exceeded the bound (2.25 s, the deadline client's) to the acknowledgement."""
    rec = Recorder(100.0, interval=0.1, stall_s=2.25)
    rec.record(5, "write", 109.990, 109.995, OK, key=1, keyed=SEQUENCE)
    rec.record(5, "write", 109.996, 130.0, OK, key=2, keyed=SEQUENCE)  # frozen at 110.0, woke at 130.0
    rec.record(5, "write", 130.001, 130.002, OK, key=3, keyed=SEQUENCE)
    rec.record(5, "write", 130.003, 132.0, OK, key=4, keyed=SEQUENCE)  # 1.997 s: under the bound, no gap
    rec.finish()
    assert [(g.worker, g.last_ok_before, g.first_err, g.first_err_class, g.first_ok_after, g.errors)
            for g in rec.gaps] == [(5, 109.995, 109.996 + 2.25, "stall", 130.0, 0)]
    from chaoskit.analysis.failover import client_figures

    figures = client_figures(rec.gaps, 110.0)
    assert (figures["rto_first_client_s"], figures["write_gap_s"]) == (20.0, pytest.approx(20.005, abs=1e-9))
    # an op that fails after an error gap opened is not a stall of its own
    rec2 = Recorder(100.0, interval=0.1, stall_s=2.25)
    rec2.record(1, "write", 109.0, 109.1, OK)
    rec2.record(1, "write", 110.0, 110.1, FAIL, "connect_refused")
    rec2.record(1, "write", 110.2, 115.0, OK)
    rec2.finish()
    assert [(g.first_err, g.first_err_class, g.first_ok_after) for g in rec2.gaps] == [
        (110.1, "connect_refused", 115.0)]


def test_profiles_reach_each_driver_as_connection_settings(tmp_path: Any) -> None:
    """What each profile changes in the connection, per driver (the lab drills them for real:
    PostgreSQL and MariaDB; DM only here: no DM server exists in the lab)."""
    import textwrap

    from chaoskit.db.registry import driver_for
    from chaoskit.errors import InputError
    from chaoskit.inventory import load_inventory

    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent("""
        hosts: {a: {address: 127.0.0.1}}
        clusters:
          pg: {engine: postgres, user: u, members: [a]}
          my: {engine: mysql, user: u, members: [a]}
          dm: {engine: dameng, user: u, members: [a]}
        """))
    inv = load_inventory(p)
    pool = ClientProfile("pool", statement_timeout=30.0)
    careful = driver_for(inv.clusters["pg"], inv, op_timeout=2.0)._params()
    assert careful["tcp_user_timeout"] == 2000 and careful["options"] == "-c statement_timeout=2000"
    pooled = driver_for(inv.clusters["pg"], inv, op_timeout=2.0, profile=pool)._params()
    assert "tcp_user_timeout" not in pooled and "keepalives_idle" not in pooled
    assert pooled["options"] == "-c statement_timeout=30000" and pooled["application_name"] == "chaoskit-pool"
    assert "options" not in driver_for(inv.clusters["pg"], inv, profile=ClientProfile("per-op"))._params()
    my = driver_for(inv.clusters["my"], inv, op_timeout=2.0)
    assert my.connect_params("h", 1)["read_timeout"] == 2
    my_pool = driver_for(inv.clusters["my"], inv, op_timeout=2.0, profile=pool).connect_params("h", 1)
    assert "read_timeout" not in my_pool and my_pool["init_command"] == "SET SESSION max_statement_time=30.000"
    dm = driver_for(inv.clusters["dm"], inv, profile=pool)
    with pytest.raises(InputError, match="dmPython offers no statement timeout"):
        dm.connect_params("h", 1)
    assert "login_timeout" in driver_for(inv.clusters["dm"], inv, profile=ClientProfile("pool")).connect_params("h", 1)


def test_rto_max_judges_all_clients_back_not_the_first_client() -> None:
    """One group of both clients: worker 1 back at 1014.0625, worker 2 at 1015.59375 (fault at
    1010). The first client back (4.0625 s) would meet a 5 s target; the last client back
    (5.59375 s) does not, and that is what rto_max judges. The group's write gap runs from the
    last ok before the outage (worker 2, 1010.21875) to the first ok after it (worker 1,
    1014.0625): 3.84375 s."""
    both = {"app": {"profile": "deadline", "workers": [1, 2]}}
    results, _ = analyse(Ctx(playbook(rto_max="5s"), recorder(), type("P", (), {"log": probe()})(), [kill()],
                             groups=both), {"ledger_present": {"rows": ACKED - LOST}})
    app = results["groups"]["app"]
    assert (app["rto_first_client_s"], app["rto_all_clients_s"], app["write_gap_s"]) == (4.0625, 5.59375, 3.84375)
    assert results["slo"]["rto_max"] == {"target": 5.0, "measured": 5.59375, "ok": False,
                                         "judges": "rto_all_clients_s", "by_group": {"app": 5.59375}}
    assert "write_gap_s" not in results["faults"][0]
    results, _ = analyse(Ctx(playbook(rto_max="5.6s"), recorder(), type("P", (), {"log": probe()})(), [kill()],
                             groups=both), {"ledger_present": {"rows": ACKED - LOST}})
    assert results["slo"]["rto_max"]["ok"] is True


def test_group_records_in_full() -> None:
    """A third group whose only worker (9) never wrote: no outage, nothing acknowledged."""
    groups = {**GROUPS, "idle": {"profile": "per-op", "workers": [9]}}
    results, _ = analyse(Ctx(playbook(rpo_max_writes=0, group="deadline"), recorder(),
                             type("P", (), {"log": probe()})(), [kill()], groups=groups),
                         {"ledger_present": {"rows": ACKED - LOST}})
    g = results["groups"]
    assert g["idle"]["faults"] == [{"id": "f", "t_fault": F, "outage": False, "rto_first_client_s": None,
                                    "rto_all_clients_s": None, "write_gap_s": None, "per_client_rto_s": {}}]
    assert (g["idle"]["profile"], g["idle"]["workers"], g["idle"]["rto_all_clients_s"]) == ("per-op", [9], 0.0)
    assert g["pool"]["faults"][0]["id"] == "f" and g["pool"]["faults"][0]["t_fault"] == F
    assert (g["deadline"]["profile"], g["deadline"]["workers"]) == ("deadline", [1])
    # the SLO names the deadline group: its bound (0) applies there only
    assert g["deadline"]["rpo"]["valid"] is False and g["pool"]["rpo"]["valid"] is True  # pool lost 1, no bound
    # without the rpo check no group has an RPO, even with rows read
    pb = playbook()
    pb = pb.model_copy(update={"checks": ()})
    results, _ = analyse(Ctx(pb, recorder(), type("P", (), {"log": probe()})(), [kill()]),
                         {"ledger_present": {"rows": ACKED}})
    assert all(grp["rpo"] is None for grp in results["groups"].values())


def test_with_groups_the_loss_bound_is_judged_per_group() -> None:
    """Deadline lost 2, pool 1, totals 3. With rpo_max_writes 2 every group is within its bound:
    the drill passes its RPO although the totals (3) exceed 2; phantoms would still fail the totals."""
    r = run(playbook(rpo_max_writes=2))
    assert r["rpo"]["lost_acknowledged"] == 3 and r["rpo"]["valid"] is True
    assert r["slo"]["rpo_max_writes"] == {"target": 2, "measured": 2, "ok": True, "by_group": {"deadline": 2,
                                                                                               "pool": 1}}
    assert [g["rpo"]["valid"] for g in r["groups"].values()] == [True, True]


def test_a_group_takes_its_route_through_to_the_load() -> None:
    from chaoskit.playbook.models import LoadConfig

    cfg = LoadConfig.model_validate({"groups": [{"name": "endpoints", "workers": 2},
                                                {"name": "haproxy", "workers": 3, "route": "mha-haproxy"}]})
    groups = cfg.to_spec().client_groups()
    assert [(g.name, g.route, list(g.worker_ids)) for g in groups] == [("endpoints", None, [1, 2]),
                                                                      ("haproxy", "mha-haproxy", [3, 4, 5])]
