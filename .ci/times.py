"""The end of a CI run: its wall time, the time per test module, the ten slowest tests and, when the
run took longer than the budget, one line `SLOW SUITE: <minutes> (budget 45): <three slowest
modules>`. Never fails on time (this machine's load moves a run by about 10 %): the developer who
made the suite slow sees it before stopping and says it.

    python3 .ci/times.py <file of per-test JSON lines written by tests/conftest.py> <wall seconds>
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

BUDGET_MIN = 45


def summary(lines: list[str], wall_s: float, budget_min: float = BUDGET_MIN) -> list[str]:
    tests: dict[str, float] = collections.defaultdict(float)
    for line in lines:
        if line.strip():
            rec = json.loads(line)
            tests[rec["test"]] += sum(float(v) for k, v in rec.items() if k != "test")
    modules: dict[str, float] = collections.defaultdict(float)
    for test, seconds in tests.items():
        modules[test.split("::")[0]] += seconds
    out = [f"wall time: {wall_s / 60:.1f} min ({wall_s:.0f} s, install and lint included)", "time per module:"]
    out += [f"  {s:8.1f} s  {m}" for m, s in sorted(modules.items(), key=lambda kv: -kv[1])]
    out.append("ten slowest tests (setup + call + teardown):")
    out += [f"  {s:8.1f} s  {t}" for t, s in sorted(tests.items(), key=lambda kv: -kv[1])[:10]]
    if wall_s > budget_min * 60:
        slowest = [m for m, _ in sorted(modules.items(), key=lambda kv: -kv[1])[:3]]
        out.append(f"SLOW SUITE: {wall_s / 60:.1f} min (budget {budget_min:g}): {', '.join(slowest)}")
    return out


if __name__ == "__main__":
    path, wall = Path(sys.argv[1]), float(sys.argv[2])
    text = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    print("\n".join(summary(text, wall)))
