"""The FLAKY reporting of CI (tests/flaky_report.py), run on a small suite of its own: an
integration test that fails once then passes is reported with its first failure's reason and
evidence, one that fails twice fails the run, and a failing unit test is never run again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]

INTEGRATION = '''
from pathlib import Path

COUNTS = Path(__file__).parent.parent / "counts"


def attempt(name):
    f = COUNTS / name
    n = int(f.read_text()) + 1 if f.exists() else 1
    f.write_text(str(n))
    return n


def test_fails_once(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text('{"attempt": %d}' % attempt("once"))
    assert COUNTS.joinpath("once").read_text() != "1", "first attempt lost the primary"


def test_fails_twice():
    attempt("twice")
    assert False, "always broken"


def test_passes():
    attempt("passes")
'''

UNIT = '''
from pathlib import Path

COUNTS = Path(__file__).parent.parent / "counts"


def test_unit_fails_once():
    f = COUNTS / "unit"
    n = int(f.read_text()) + 1 if f.exists() else 1
    f.write_text(str(n))
    assert n > 1, "a unit test is never rerun"
'''


def run_suite(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    suite = tmp_path / "suite"
    (suite / "integration").mkdir(parents=True)
    (suite / "unit").mkdir()
    (suite / "counts").mkdir()
    (suite / "conftest.py").write_text('pytest_plugins = ["flaky_report"]\n')
    (suite / "integration" / "test_i.py").write_text(INTEGRATION)
    (suite / "unit" / "test_u.py").write_text(UNIT)
    keep = tmp_path / "kept"
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR), "CHAOSKIT_FLAKY_DIR": str(keep)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", str(suite)],
                         cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    return res, suite


def test_fails_once_is_flaky_twice_fails_unit_never_rerun(tmp_path: Path) -> None:
    res, suite = run_suite(tmp_path)
    out = res.stdout
    assert res.returncode == 1, out + res.stderr  # the twice-failing test and the unit test fail the run
    counts = {f.name: int(f.read_text()) for f in (suite / "counts").iterdir()}
    assert counts == {"once": 2, "twice": 2, "passes": 1, "unit": 1}
    flaky = [line for line in out.splitlines() if line.startswith("FLAKY: ")]
    assert len(flaky) == 1, out
    assert flaky[0].startswith("FLAKY: integration/test_i.py::test_fails_once: AssertionError: first attempt "
                               "lost the primary (first failure's evidence: "), flaky[0]
    assert "FAILED integration/test_i.py::test_fails_twice" in out
    assert "FAILED unit/test_u.py::test_unit_fails_once" in out
    # the first attempt's run directory, as it was before the rerun replaced it
    kept = flaky[0].rsplit("evidence: ", 1)[1].rstrip(")")
    (run_json,) = Path(kept).glob("*/run/run.json")
    assert run_json.read_text() == '{"attempt": 1}'
    assert str(tmp_path / "kept") in kept


def test_no_flaky_section_when_nothing_was_rerun(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "integration").mkdir(parents=True)
    (suite / "conftest.py").write_text('pytest_plugins = ["flaky_report"]\n')
    (suite / "integration" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR), "CHAOSKIT_FLAKY_DIR": str(tmp_path / "kept")}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(suite)], cwd=suite,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "FLAKY" not in res.stdout and not (tmp_path / "kept").exists(), res.stdout
