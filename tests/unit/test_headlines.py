"""An experiment's headline sentences, checked against percentages worked out by hand from the cells
(the figures are the lab's measured medians from earlier runs)."""

from __future__ import annotations

from typing import Any

from chaoskit.report.headlines import change, conditions, headlines


def cell(workers: int, tps: float, delay: float = 0.0, p50: float | None = None, p99: float | None = None,
         mode: bool | None = None, workload: str = "write") -> dict[str, Any]:
    c = {"workload": workload, "workers": workers, "delay_ms": delay, "tps": tps, "p50_ms": p50, "p99_ms": p99}
    if mode is not None:
        c["synchronous_mode"] = mode
    return c


def test_change_is_whole_percent_with_its_sign() -> None:
    assert change(641, 3619) == "-82 %"  # 641 / 3619 = 0.1771
    assert change(107, 100) == "+7 %" and change(100.2, 100) == "0 %" and change(5, 0) == "n/a"


def test_added_delay_per_concurrency() -> None:
    cells = [cell(4, 3619, 0, 1.03), cell(4, 641, 2, 6.21), cell(4, 314, 5, 12.61),
             cell(16, 6329, 0, 2.0), cell(16, 2195, 2, 6.5), cell(16, 1191, 5, 13.0)]
    # 641/3619 - 1 = -0.823, 2195/6329 - 1 = -0.653; 314/3619 - 1 = -0.913, 1191/6329 - 1 = -0.812
    assert headlines({"experiment": {"kind": "sweep"}, "cells": cells}) == [
        "2 ms delay vs no delay: TPS -82 % at 4 workers, -65 % at 16; p50 1.03 ms -> 6.21 ms at 4 workers",
        "5 ms delay vs no delay: TPS -91 % at 4 workers, -81 % at 16; p50 1.03 ms -> 12.61 ms at 4 workers"]


def test_sync_against_async_and_how_the_gap_moves() -> None:
    cells = [cell(8, 4687, 0, 1.5, mode=False), cell(8, 4243, 10, 1.9, mode=False),
             cell(8, 3557, 0, 2.1, mode=True), cell(8, 328, 10, 24.5, mode=True)]
    # sync/async: 3557/4687 - 1 = -0.241 at 0 ms, 328/4243 - 1 = -0.923 at 10 ms;
    # delay: async 4243/4687 - 1 = -0.095, sync 328/3557 - 1 = -0.908
    assert headlines({"experiment": {"kind": "sweep"}, "cells": cells}) == [
        "sync vs async commit at 0 ms delay: TPS -24 % at 8 workers",
        "sync vs async commit at 10 ms delay: TPS -92 % at 8 workers",
        "at 8 workers the sync/async TPS gap grows from 24 % at 0 ms to 92 % at 10 ms",
        "async commit: 10 ms delay vs no delay: TPS -9 % at 8 workers; p50 1.50 ms -> 1.90 ms at 8 workers",
        "sync commit: 10 ms delay vs no delay: TPS -91 % at 8 workers; p50 2.10 ms -> 24.50 ms at 8 workers"]


def test_a_shrinking_gap_is_said_so() -> None:
    cells = [cell(4, 1000, 1, mode=False), cell(4, 500, 1, mode=True), cell(4, 400, 5, mode=False),
             cell(4, 300, 5, mode=True)]
    # gap 1 - 500/1000 = 50 % at 1 ms, 1 - 300/400 = 25 % at 5 ms
    assert "at 4 workers the sync/async TPS gap shrinks from 50 % at 1 ms to 25 % at 5 ms" in \
        headlines({"experiment": {"kind": "sweep"}, "cells": cells})


def test_ramp_peak_growth_and_overload() -> None:
    cells = [cell(1, 800, p99=1.0), cell(16, 6400, p99=5.0), cell(64, 7306, p99=20.0), cell(128, 6795, p99=45.5)]
    result = {"experiment": {"kind": "ramp"}, "cells": cells,
              "knee": {"peak": cells[2], "recommended_workers": 16}}
    # 7306 / 800 = 9.13x; 6795 / 7306 - 1 = -0.070
    assert headlines(result) == [
        "peak 7,306 TPS at 64 workers (9.1x the 800 TPS of 1 worker); recommended concurrency 16",
        "beyond the peak, 128 workers: TPS -7 % against the peak, p99 20.00 ms -> 45.50 ms"]


def test_a_ladder_of_several_workloads_speaks_of_each_on_its_own() -> None:
    ro = [cell(8, 2000, p99=4.0, workload="oltp-ro"), cell(64, 5000, p99=30.0, workload="oltp-ro")]
    wo = [cell(8, 1000, p99=9.0, workload="oltp-wo"), cell(64, 1100, p99=80.0, workload="oltp-wo"),
          cell(256, 900, p99=300.0, workload="oltp-wo")]
    result = {"experiment": {"kind": "ramp"}, "cells": ro + wo, "knee": {"peak": ro[1], "recommended_workers": 64},
              "knees": {"oltp-ro": {"peak": ro[1], "recommended_workers": 64},
                        "oltp-wo": {"peak": wo[1], "recommended_workers": 8}}}
    # oltp-ro: 5000 / 2000 = 2.5x; oltp-wo: 1100 / 1000 = 1.1x, 900 / 1100 - 1 = -0.182
    assert headlines(result) == [
        "oltp-ro: peak 5,000 TPS at 64 workers (2.5x the 2,000 TPS of 8 workers); recommended concurrency 64",
        "oltp-wo: peak 1,100 TPS at 64 workers (1.1x the 1,000 TPS of 8 workers); recommended concurrency 8",
        "oltp-wo: beyond the peak, 256 workers: TPS -18 % against the peak, p99 80.00 ms -> 300.00 ms"]


def test_a_ladder_that_peaks_at_its_first_step() -> None:
    cells = [cell(8, 1182, p99=16.32), cell(64, 931, p99=806.91)]
    result = {"experiment": {"kind": "ramp"}, "cells": cells, "knee": {"peak": cells[0], "recommended_workers": 8}}
    # 931 / 1182 - 1 = -0.212
    assert headlines(result) == [
        "peak 1,182 TPS at 8 workers (the first step: more workers only lowered it); recommended concurrency 8",
        "beyond the peak, 64 workers: TPS -21 % against the peak, p99 16.32 ms -> 806.91 ms"]


def test_compare_states_median_and_spread() -> None:
    result = {"experiment": {"kind": "compare"}, "cells": [cell(8, 1000)],
              "comparison": {"pg2_vs_pg": {"relative_tps_change_median": -0.1234, "min": -0.151, "max": -0.089,
                                           "repeats": 3}}}
    assert headlines(result) == ["pg2 against pg: TPS -12 % (median of 3 repeats; -15 % to -9 %)"]


def test_routes_compared_at_each_added_delay() -> None:
    """One sentence per route, its changes in the order of the delays (whole percent: -0.0349 is
    -3 %, 0.0049 rounds to 0 %)."""
    by_delay = {
        "0": {"pgb_vs_pg": {"relative_tps_change_median": -0.0349, "min": -0.05, "max": -0.01, "repeats": 3,
                            "relative_p50_change_median": 0.0412}},
        "1": {"pgb_vs_pg": {"relative_tps_change_median": -0.1051, "min": -0.12, "max": -0.09, "repeats": 3,
                            "relative_p50_change_median": 0.0049}},
        "5": {"pgb_vs_pg": {"relative_tps_change_median": -0.0749, "min": -0.08, "max": -0.07, "repeats": 2,
                            "relative_p50_change_median": None}},
    }
    result = {"experiment": {"kind": "compare"}, "cells": [cell(8, 1000)], "comparison_by_delay": by_delay}
    assert headlines(result) == [
        "pgb against pg: TPS -3 % with no added delay, -11 % at +1 ms, -7 % at +5 ms; "
        "p50 latency +4 % with no added delay, 0 % at +1 ms (median of 2 repeats at each delay)"]


def test_nothing_to_say_without_a_second_delay_or_any_result() -> None:
    assert headlines({"experiment": {"kind": "sweep"}, "cells": [cell(4, 100), cell(8, 180)]}) == []
    assert headlines({"experiment": {"kind": "sweep"}, "cells": [{"workers": 4, "tps": None}]}) == []


def test_the_results_table_reads_like_a_person_wrote_it() -> None:
    from chaoskit.report.experiment import results_table

    cells = [{"synchronous_mode": True, "workload": "update", "workers": 8, "delay_ms": 10.0, "repeats": 3,
              "tps": 328.4, "tps_min": 301.0, "tps_max": 1350.6, "p50_ms": 24.456, "p99_ms": 30.0, "p999_ms": None,
              "error_rate": 0.00125, "proxy_added_p50_ms": None, "proxy_added_p99_ms": None}]
    headers, rows = results_table(cells)
    assert headers == ["commit", "workload", "delay", "workers", "TPS (median)", "TPS min-max", "p50", "p99",
                       "errors", "repeats"]
    assert rows == [["sync", "update", "10 ms", "8", "328", "301-1,351", "24.46 ms", "30.00 ms", "0.12%", "3"]]


def test_a_control_node_shared_with_other_work_is_said_with_its_cells() -> None:
    """The managed sweep's shape: at 32 connections the control node was 97 % busy while the load
    used 0.41 cores and was not client-bound; at 8 it was 60 % busy (below 90 %: not said); a cell
    already client-bound is marked by its own rule, not here."""
    a, b, c = cell(8, 960, 0), cell(32, 1180, 1), cell(64, 1200, 0)
    a.update(cpu_busy_pct_control=60.0, client_cpu_cores=0.2, client_saturated=False)
    b.update(cpu_busy_pct_control=97.2, client_cpu_cores=0.41, client_saturated=False)
    c.update(cpu_busy_pct_control=99.0, client_cpu_cores=1.9, client_saturated=True)
    result = {"experiment": {"kind": "ramp"}, "cells": [a, b, c]}
    assert not [h for h in headlines(result) if "control node" in h]  # a condition of the measurement, not a figure
    (line,) = conditions(result)
    assert line.startswith("The control node, where the load runs, was at least 90 % busy in write x32 +1 ms (97 %), "
                           "though the load's own processes used 0.41 cores")
    assert "x8" not in line and "x64" not in line
