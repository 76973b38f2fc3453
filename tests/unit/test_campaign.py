"""Campaign figures by hand, the wait for a healthy cluster on a fake clock, and the loop over runs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from chaoskit.drill.campaign import run_campaign, wait_healthy
from chaoskit.report.campaign import distribution, summarise, write_campaign
from chaoskit.testing.clock import FakeClock


def test_distribution_by_nearest_rank() -> None:
    # 20 values 1..20: median 10.5; p95 = ceil(0.95 x 20) = 19th value = 19
    assert distribution([float(v) for v in range(1, 21)]) == {"n": 20, "missing": 0, "min": 1.0, "median": 10.5,
                                                              "p95": 19.0, "max": 20.0}
    # 3 values: p95 = ceil(2.85) = 3rd; a run without an RTO (no recovery) is counted apart
    assert distribution([9.5, None, 10.25, 12.0]) == {"n": 3, "missing": 1, "min": 9.5, "median": 10.25,
                                                      "p95": 12.0, "max": 12.0}
    assert distribution([None]) == {"n": 0, "missing": 1}


def test_summary_pass_rate_counts_judged_runs() -> None:
    runs = [{"run": "a", "verdict": True, "rto_all_clients_s": 10.0, "lost": 0},
            {"run": "b", "verdict": False, "rto_all_clients_s": 31.0, "lost": 2},
            {"run": "c", "verdict": "aborted", "rto_all_clients_s": None, "lost": None}]
    s = summarise("pg-kill-primary", runs)
    assert (s["repeat"], s["passed"], s["pass_rate"]) == (3, 1, 0.5)  # 1 of the 2 judged runs
    assert s["rto_all_clients_s"]["median"] == 20.5 and s["lost"]["max"] == 2


def test_write_campaign(tmp_path: Path) -> None:
    s = summarise("x", [{"run": "a", "verdict": True, "rto_all_clients_s": 1.5, "lost": 0}])
    write_campaign(s, tmp_path)
    assert (tmp_path / "campaign_rto.png").read_bytes()[:4] == b"\x89PNG"
    assert "1 of 1 runs passed" in (tmp_path / "campaign.html").read_text()


def test_wait_healthy_needs_one_primary_every_member_up_held() -> None:
    clock = FakeClock(0.0)
    views = iter([{"a": "down", "b": "replica"}] * 4 + [{"a": "primary", "b": "primary"}] * 2
                 + [{"a": "replica", "b": "primary"}] * 100)
    assert wait_healthy(lambda: next(views), 2, settle_s=30.0, hold_s=3.0, sleep=clock.sleep, now=clock.now) is True
    # healthy from the 7th poll (t = 3.0 s), held 3 s: returns at t = 6.0
    assert clock.now() == 6.0
    # a member missing from the view is not a steady cluster: never healthy
    clock3 = FakeClock(0.0)
    assert wait_healthy(lambda: {"b": "primary"}, 2, settle_s=5.0, sleep=clock3.sleep, now=clock3.now) is False
    clock2 = FakeClock(0.0)

    def broken() -> dict[str, str]:
        raise ConnectionError("x")

    assert wait_healthy(broken, 2, settle_s=5.0, sleep=clock2.sleep, now=clock2.now) is False
    assert clock2.now() == 5.0


def test_steady_is_every_member_answering_with_one_writer() -> None:
    from chaoskit.topology.roles import steady

    assert steady({"a": "primary", "b": "replica", "c": "replica"}, 3) is True
    assert steady({"a": "primary", "b": "replica"}, 3) is False  # c never answered
    assert steady({"a": "primary", "b": "primary", "c": "replica"}, 3) is False  # two writers
    assert steady({"a": "primary", "b": "down", "c": "replica"}, 3) is False
    assert steady({"a": "replica", "b": "replica", "c": "replica"}, 3) is False  # no writer yet


def test_held_counts_from_the_first_look_of_an_unbroken_run() -> None:
    from chaoskit.timesource import Held

    held = Held(1.0)
    # looks at 0.0 (ok), 0.5 (broken), 0.7, 1.2, 1.7 (ok): the run starts at 0.7, holds 1 s at 1.7
    assert [held.look(ok, t) for ok, t in ((True, 0.0), (False, 0.5), (True, 0.7), (True, 1.2), (True, 1.7))] == [
        False, False, False, False, True]
    assert held.since == 0.7
    assert held.look(False, 2.0) is False and held.since is None


def _sealed(tmp_path: Path, name: str, verdict: object = True, aborted: bool = False, incomplete: str | None = None
            ) -> SimpleNamespace:
    results = {"verdict": verdict, "rpo": {"lost_acknowledged": 0},
               "faults": [{"outage": True, "rto_all_clients_s": 10.5}]}
    evidence = {"results": results, "aborted": aborted, **({"incomplete": incomplete} if incomplete else {})}
    return SimpleNamespace(path=tmp_path / name, evidence=evidence, aborted=aborted, incomplete=incomplete)


def test_a_campaign_runs_until_its_repeat_an_unsettled_cluster_or_an_aborted_run(tmp_path: Path) -> None:
    runs = iter([_sealed(tmp_path, "r1"), _sealed(tmp_path, "r2", verdict=False), _sealed(tmp_path, "r3")])
    waits: list[float] = []
    told: list[tuple[int, str, object]] = []

    def wait(roles: object, members: int, settle_s: float) -> bool:
        waits.append(settle_s)
        return True

    done = run_campaign(3, lambda: next(runs), lambda: {}, 3, 60.0, lambda i, s, r: told.append((i, s.path.name,
                                                                                               r["verdict"])), wait)
    assert [r["run"] for r in done.runs] == ["r1", "r2", "r3"] and waits == [60.0, 60.0]  # none before the first
    assert told == [(0, "r1", True), (1, "r2", False), (2, "r3", True)] and not done.aborted
    assert done.runs[0]["rto_all_clients_s"] == 10.5 and done.unsettled_after is None
    # the cluster not steady within the settle time after run 1: no second run
    runs = iter([_sealed(tmp_path, "r1"), _sealed(tmp_path, "r2")])
    done = run_campaign(3, lambda: next(runs), lambda: {}, 3, 60.0, wait=lambda *a: False)
    assert [r["run"] for r in done.runs] == ["r1"] and done.unsettled_after == 1
    # an aborted run, or an incomplete one, ends the campaign after it (its directory is sealed)
    for last in (_sealed(tmp_path, "r2", aborted=True), _sealed(tmp_path, "r2", incomplete="load lost")):
        these = iter([_sealed(tmp_path, "r1"), last, _sealed(tmp_path, "r3")])
        done = run_campaign(3, these.__next__, lambda: {}, 3, 60.0, wait=lambda *a: True)
        assert [r["run"] for r in done.runs] == ["r1", "r2"] and done.aborted
        assert done.runs[-1]["verdict"] in ("aborted", "incomplete")
