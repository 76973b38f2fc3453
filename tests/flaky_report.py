"""Flakes are visible and never cost a landing (a pytest plugin, loaded by tests/conftest.py).

- Every test under an `integration/` directory may run once more after a failure
  (pytest-rerunfailures' `flaky` marker, one rerun); unit tests never run twice.
- A test that passed only on its second run is printed at the end of the session as
  `FLAKY: <test id>: <first failure's one-line reason>`, and the first failure's evidence (the
  test's tmp_path and every run directory it was handed: drills' run.json, events, history) is
  copied to `<flaky dir>/<test id>/` before the rerun replaces it; the path is printed with it.
  A FLAKY line is a defect to find and fix, not a pass.
- A test that fails both times fails the run as any failure does.

The directory is `$CHAOSKIT_FLAKY_DIR`, else `reports/flaky` under the rootdir (out of git).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RERUNS = 1


def is_integration(item: pytest.Item) -> bool:
    """Under an `integration/` directory of the suite (relative to the rootdir, so a checkout that
    happens to live under such a directory does not rerun its unit tests)."""
    path = Path(str(item.path))
    with contextlib.suppress(ValueError):
        path = path.relative_to(Path(str(item.config.rootpath)))
    return "integration" in path.parts


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_integration(item) and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS))


def one_line(report: pytest.TestReport) -> str:
    """The first failure's reason in one line: the crash message, else the last line of the repr."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = (lines[0] if crash is not None else lines[-1]) if lines else "failed"
    return line[:300]


def _paths(value: Any) -> Iterator[Path]:
    """Directories among a fixture's value (a Path, or Paths inside a tuple/list)."""
    if isinstance(value, Path):
        if value.is_dir():
            yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _paths(v)


def keep_dir(config: pytest.Config) -> Path:
    root = os.environ.get("CHAOSKIT_FLAKY_DIR")
    return Path(root) if root else Path(str(config.rootpath)) / "reports" / "flaky"


def safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


class FlakyTracker:
    """First failures of integration tests (kept), and which of them then passed."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.first: dict[str, tuple[str, str]] = {}  # nodeid -> (reason, where its evidence is)
        self.flaky: list[tuple[str, str, str]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if not report.failed or not is_integration(item) or item.nodeid in self.first:
            return
        dest = keep_dir(self.config) / safe_name(item.nodeid)
        kept = []
        funcargs = getattr(item, "funcargs", {}) or {}
        for name, value in funcargs.items():
            for path in _paths(value):
                target = dest / f"{name}-{len(kept)}"
                try:
                    shutil.copytree(path, target, symlinks=True, dirs_exist_ok=True)
                    kept.append(str(target))
                except OSError as exc:  # evidence is best effort; the report line is not
                    kept.append(f"{path} (not copied: {exc})")
        self.first[item.nodeid] = (one_line(report), str(dest) if kept else "no run directory")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed and report.nodeid in self.first \
                and getattr(report, "rerun", 0) >= 1:
            reason, where = self.first[report.nodeid]
            self.flaky.append((report.nodeid, reason, where))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.flaky:
            return
        terminalreporter.section("flaky tests (passed only on their second run: each is a defect)")
        for nodeid, reason, where in self.flaky:
            terminalreporter.write_line(f"FLAKY: {nodeid}: {reason} (first failure's evidence: {where})")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FlakyTracker(config), "chaoskit-flaky-tracker")
