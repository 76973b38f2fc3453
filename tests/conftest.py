"""Shared test configuration: the time spent per test module is printed at the end of the session
(the CI budget is kept per module)."""

from __future__ import annotations

import collections

import pytest

# integration tests run once more after a failure, and a pass on the second run is printed as FLAKY
pytest_plugins = ["flaky_report"]

_TIMES: dict[str, float] = collections.defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TIMES[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TIMES:
        return
    terminalreporter.section("time per test module (setup + call + teardown)")
    for module, seconds in sorted(_TIMES.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    terminalreporter.write_line(f"{sum(_TIMES.values()):8.1f} s  in all")
