"""An open loop that could not keep its own schedule is the client's limit: what counts as the
client's own dispatch lag (never a backlog the server made), how the executors book it, and the
rule that marks a window client-bound. Every instant below is chosen by hand."""

from __future__ import annotations

import time

import pytest

from chaoskit.recorder import DISPATCH_LATE_S, Recorder
from chaoskit.testing.fake_pg import HANG, OK, FakePgDriver
from chaoskit.workload.client_cpu import ClientCpu
from chaoskit.workload.pg_loop import PgLoop
from chaoskit.workload.runner import LoadSpec
from chaoskit.workload.workloads import WorkloadParams, make_workload


@pytest.mark.parametrize(("t", "t_sched", "t_free", "late"), [
    (10.050, 10.000, 9.000, True),    # due 50 ms ago with a free connection: the client's own lag
    (10.050, 10.000, 10.045, False),  # the connection freed 5 ms ago: a backlog of 45 ms, not the client's
    (10.050, 10.045, 9.000, False),   # due 5 ms ago
    (10.050, 10.0399, 9.000, True),   # due 10.1 ms ago
])
def test_the_clients_own_lag_is_from_the_later_of_schedule_and_free_connection(
        t: float, t_sched: float, t_free: float, late: bool) -> None:
    assert DISPATCH_LATE_S == 0.010
    rec = Recorder(base=0.0)
    rec.dispatched(t, t_sched, t_free)
    totals = rec.totals()
    assert (totals["dispatched"], totals["dispatched_late"]) == (1, int(late))


def _loop(driver: FakePgDriver, rate: float) -> tuple[PgLoop, Recorder]:
    spec = LoadSpec(workload="update", workers=1, rate=rate, op_timeout=0.3, params=WorkloadParams(table_rows=100))
    wl = make_workload("update", driver, spec.params, spec.run_id)
    wl.prepare()
    rec = Recorder(base=time.time())
    return PgLoop(driver, wl, spec, rec, [1], 1000.0, rate), rec


@pytest.mark.parametrize(("idle_since", "late"), [(999.0, 1), (1000.045, 0)])
def test_the_event_loop_books_each_arrival_it_starts_with_the_slots_free_instant(idle_since: float,
                                                                                 late: int) -> None:
    """rate 10/s from t = 1000 s: arrival 0 due at 1000.0, started at 1000.05. A slot free since 999
    makes it 50 ms late by the client; one freed at 1000.045 does not (5 ms)."""
    loop, rec = _loop(FakePgDriver(lambda sql, params, conn: OK), 10.0)
    slot = loop.slots[0]
    slot.idle_since = idle_since
    loop.idle.append(slot)
    loop._start_arrivals(1000.05)
    assert (rec.totals()["dispatched"], rec.totals()["dispatched_late"]) == (1, late)


def test_every_op_an_open_loop_ran_was_dispatched_once() -> None:
    """Against a frozen server (every op times out) and a healthy one: each op recorded was one
    arrival started; those still in flight at the stop were started and not recorded (at most one
    per worker)."""
    for script in (lambda sql, params, conn: OK, lambda sql, params, conn: HANG):
        driver = FakePgDriver(script)
        spec = LoadSpec(workload="update", workers=2, rate=100, op_timeout=0.2, backoff_min=0.05, backoff_max=0.1,
                        max_lateness=0.05, params=WorkloadParams(table_rows=100))
        wl = make_workload("update", driver, spec.params, spec.run_id)
        wl.prepare()
        rec = Recorder(base=time.time())
        t0 = time.time()
        PgLoop(driver, wl, spec, rec, [1, 2], t0, 100).run(lambda t0=t0: time.time() > t0 + 0.8, lambda now: None,
                                                           tick=0.02)
        rec.finish()
        totals = rec.totals()
        ops = totals["ok"] + totals["fail"] + totals["info"]
        assert ops > 0 and ops <= totals["dispatched"] <= ops + 2, totals


def test_an_open_loop_late_by_itself_is_client_bound() -> None:
    """1,000 arrivals: 20 late (2 %) marks the window, 10 (1 %, not above) does not, nor do 5 of
    50 (too few arrivals to say); a closed loop (nothing dispatched) has no share."""
    base = ClientCpu(10.0, {1: 0.3}, 2, frozenset({1}))
    late = base.with_dispatch({"dispatched": 1000, "dispatched_late": 20})
    assert late.saturated_why is not None and late.saturated_why.startswith("2.0% of the open loop's arrivals")
    assert late.figures()["client_dispatch_late_pct"] == 2.0 and late.figures()["client_saturated"] is True
    assert base.with_dispatch({"dispatched": 1000, "dispatched_late": 10}).saturated_why is None
    assert base.with_dispatch({"dispatched": 50, "dispatched_late": 5}).saturated_why is None
    closed = base.with_dispatch({})
    assert closed.figures()["client_dispatch_late_pct"] is None and closed.saturated_why is None


def test_a_cell_keeps_the_median_share_over_its_repeats() -> None:
    from chaoskit.drill.experiment import summarise

    def row(pct: float | None, why: str | None) -> dict:
        return {"workload": "w", "workers": 8, "delay_ms": 0.0, "tps": 100.0, "p50_ms": 1.0, "p99_ms": 2.0,
                "p999_ms": 2.0, "error_rate": 0.0, "proxy_added_p50_ms": None, "proxy_added_p99_ms": None,
                "client_cpu_cores": 0.2, "client_dispatch_late_pct": pct, "client_saturated": why is not None,
                "client_saturated_why": why}

    (cell,) = summarise([row(0.5, None), row(3.0, "3.0% of the open loop's arrivals"), row(0.7, None)],
                        ("workload", "workers", "delay_ms"))
    assert cell["client_dispatch_late_pct"] == 0.7 and cell["client_saturated"] is True


def test_a_worker_thread_books_its_arrival_with_the_instant_it_became_free() -> None:
    """The threads executor: arrival 0 due 50 ms before the worker asked for it (it was busy): the
    instant booked as free is when it asked, so the 50 ms are a backlog, not the client's lag."""
    import itertools
    import threading

    from chaoskit.workload.runner import _Worker

    seen: list[tuple[float, float, float]] = []
    rec = Recorder(time.time())
    rec.dispatched = lambda t, t_sched, t_free: seen.append((t, t_sched, t_free))  # type: ignore[method-assign]
    spec = LoadSpec(workload="ledger", workers=1, rate=10)
    t_start = time.time() - 0.05
    w = _Worker(1, None, None, spec, rec, threading.Event(), (10.0, itertools.count()),  # type: ignore[arg-type]
                t_start)
    before = time.time()
    assert w._next_start() == t_start
    ((t, t_sched, t_free),) = seen
    assert t_sched == t_start and before <= t_free <= t
