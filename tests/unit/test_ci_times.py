"""`.ci/times.py`, the end of a CI run: wall time, time per module (setup + call + teardown of its
tests, summed across the unit and integration sessions), the ten slowest tests, and the SLOW SUITE
line only when the run took longer than its budget."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).parents[2] / ".ci" / "times.py"


def times() -> Any:
    spec = importlib.util.spec_from_file_location("ci_times", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINES = [json.dumps(r) for r in (
    {"test": "tests/integration/test_a.py::test_1", "setup": 10.0, "call": 50.0, "teardown": 1.0},
    {"test": "tests/integration/test_a.py::test_2", "setup": 2.0, "call": 20.0, "teardown": 0.5},
    {"test": "tests/integration/test_b.py::test_1", "setup": 0.5, "call": 70.0, "teardown": 0.0},
    {"test": "tests/unit/test_c.py::test_1", "call": 3.0},
    {"test": "tests/integration/test_d.py::test_1", "setup": 1.0, "call": 5.0},
)]


def test_modules_and_tests_summed_over_their_phases_slowest_first() -> None:
    out = times().summary(LINES, 1200)
    assert out[0] == "wall time: 20.0 min (1200 s, install and lint included)"
    modules = out[out.index("time per module:") + 1:out.index("ten slowest tests (setup + call + teardown):")]
    # test_a: 61 + 22.5 = 83.5; test_b: 70.5; test_d: 6; test_c: 3
    assert [m.split()[-1] for m in modules] == ["tests/integration/test_a.py", "tests/integration/test_b.py",
                                               "tests/integration/test_d.py", "tests/unit/test_c.py"]
    assert modules[0].split()[0] == "83.5"
    slowest = out[out.index("ten slowest tests (setup + call + teardown):") + 1:]
    assert slowest[0].split() == ["70.5", "s", "tests/integration/test_b.py::test_1"]
    assert slowest[1].split() == ["61.0", "s", "tests/integration/test_a.py::test_1"]
    assert not any(line.startswith("SLOW SUITE") for line in out)


def test_over_the_budget_names_the_three_slowest_modules_and_never_fails() -> None:
    out = times().summary(LINES, 45 * 60 + 1)
    assert out[-1] == ("SLOW SUITE: 45.0 min (budget 45): tests/integration/test_a.py, tests/integration/test_b.py, "
                       "tests/integration/test_d.py")
    assert times().summary(LINES, 45 * 60)[-1] != out[-1]  # exactly the budget is within it


def test_the_pytest_sessions_append_one_line_per_test(tmp_path: Path) -> None:
    """tests/conftest.py writes what the summary reads: one JSON line per test, its phases."""
    import subprocess
    import sys

    target = tmp_path / "times.jsonl"
    (tmp_path / "test_x.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "conftest.py").write_text((Path(__file__).parents[1] / "conftest.py").read_text()
                                          .replace('pytest_plugins = ["flaky_report"]', ""))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, env={"CHAOSKIT_TEST_TIMES": str(target),
                                                                            "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    recs = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted(r["test"] for r in recs) == ["test_x.py::test_one", "test_x.py::test_two"]
    assert all({"setup", "call", "teardown"} <= set(r) for r in recs)
