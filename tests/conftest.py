"""Shared test configuration: the time spent per test module is printed at the end of the session
(the CI budget is kept per module), and where `$CHAOSKIT_TEST_TIMES` names a file, every test's
setup, call and teardown seconds are appended to it as one JSON line per test (`.ci/times.py`
sums the sessions of one CI run: wall time, per module, the slowest tests)."""

from __future__ import annotations

import collections
import json
import os

import pytest

# integration tests run once more after a failure, and a pass on the second run is printed as FLAKY
pytest_plugins = ["flaky_report"]

_TIMES: dict[str, float] = collections.defaultdict(float)
_PHASES: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # under pytest-xdist this runs on the controller for every worker's report too
    _TIMES[report.nodeid.split("::")[0]] += report.duration
    _PHASES[report.nodeid][report.when] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("CHAOSKIT_TEST_TIMES")
    if not target or hasattr(session.config, "workerinput"):  # an xdist worker: its controller writes
        return
    data = "".join(json.dumps({"test": nodeid, **phases}) + "\n" for nodeid, phases in _PHASES.items())
    # one append of the whole block: sessions that end at the same time (`.ci/run` runs several)
    # never interleave their lines
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TIMES:
        return
    terminalreporter.section("time per test module (setup + call + teardown)")
    for module, seconds in sorted(_TIMES.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    terminalreporter.write_line(f"{sum(_TIMES.values()):8.1f} s  in all")
