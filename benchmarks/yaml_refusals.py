"""How fast the YAML reader refuses hostile input (deep nesting, alias bombs, huge numbers): each
bomb parsed 5 times, the slowest printed. Target: under 1 s each on the 2-core CI machine.

    python3 benchmarks/yaml_refusals.py
"""

from __future__ import annotations

import contextlib
import time

from chaoskit.errors import InputError
from chaoskit.yamlsrc import parse_yaml

BOMBS = {
    "deep nesting": "[" * 3000,
    "alias bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "\n".join(
        f"b{k}: &b{k} [" + ",".join(["*a" if k == 1 else f"*b{k - 1}"] * 10) + "]" for k in range(1, 7)),
    "long number": "a: " + "9" * 5000,
}


def main() -> None:
    for name, text in BOMBS.items():
        worst = 0.0
        for _ in range(5):
            t0 = time.perf_counter()
            with contextlib.suppress(InputError):
                parse_yaml(text, "bomb.yaml")
            worst = max(worst, time.perf_counter() - t0)
        print(f"{name}: refused in at most {worst * 1000:.1f} ms (target < 1000 ms)")


if __name__ == "__main__":
    main()
