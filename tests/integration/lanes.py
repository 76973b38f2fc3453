"""Integration sessions that share one lab (`.ci/run`). `$CHAOSKIT_TEST_GROUP` picks the modules of
one session:

- `alone`: modules that need the lab to themselves (they take it down, load the machine's CPU, or
  measure throughput), marked by a module-level `ALONE = "why"`; run first, on their own;
- `default`: the other modules on the default stacks (it owns the base and those stacks);
- `stacks`: the modules that add stacks (`LAB_STACKS` beyond the default ones; it owns those).

`default` and `stacks` run at the same time. Such a session never brings the lab up or down
(`.ci/run` does, with every stack), resets and health-waits only the hosts of the stacks it owns,
never rebuilds the lab, and removes a stack it owns after its last module that needs it. Without
the variable a session runs every module it collected and owns the whole lab."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType

from chaoskit.lab import manager
from chaoskit.lab.recipes import default_stacks, lab_spec

ENV = "CHAOSKIT_TEST_GROUP"
GROUPS = ("alone", "default", "stacks")

_OWNED: list[tuple[str, ...] | None] = [None]  # set once the session's modules are collected


class LaneError(Exception):
    pass


def group() -> str | None:
    """This session's group, or None when it runs every module."""
    raw = os.environ.get(ENV, "").strip()
    if raw and raw not in GROUPS:
        raise LaneError(f"${ENV}: {raw!r} is not one of {', '.join(GROUPS)}")
    return raw or None


def extra_stacks(module: ModuleType | None) -> tuple[str, ...]:
    """The stacks a module adds to the default lab (its `LAB_STACKS` beyond the default ones)."""
    return tuple(s for s in getattr(module, "LAB_STACKS", ()) if s not in default_stacks())


def group_of(module: ModuleType | None) -> str:
    if getattr(module, "ALONE", ""):
        return "alone"
    return "stacks" if extra_stacks(module) else "default"


def set_owned(modules: list[ModuleType]) -> None:
    """What this session owns, from its group and the modules it runs."""
    g = group()
    if g == "default":
        _OWNED[0] = ("base", *default_stacks())
    elif g == "stacks":
        _OWNED[0] = tuple(dict.fromkeys(s for m in modules for s in extra_stacks(m)))
    else:
        _OWNED[0] = None


def owned() -> tuple[str, ...] | None:
    """The stacks this session owns (`base` included only when named), or None: the whole lab."""
    return _OWNED[0]


def hosts(stacks: tuple[str, ...]) -> list[str]:
    """The lab hosts of these stacks (`base` included only when named)."""
    return [h.name for h in lab_spec().hosts if h.stack in stacks]


def use_stacks(stacks: tuple[str, ...], timeout: float = 120.0) -> None:
    """A module's stacks up and healthy. A session that shares the lab finds them up already
    (brought by `.ci/run`): it only waits for those it owns."""
    if owned() is None:
        manager.up(stacks=stacks)
        manager.wait_healthy(timeout)
        return
    missing = [s for s in stacks if s not in manager.up_stacks()]
    if missing:
        raise LaneError(f"stack {missing[0]} is not up: a session sharing the lab (${ENV}) never adds one; "
                        f"`chaoskit lab up --stack {missing[0]}` first")
    wait_owned(timeout)


def wait_owned(timeout: float) -> None:
    """This session's stacks healthy (every stack that is up and the base when it owns the lab).
    When they are not, the tail of each of their hosts' logs is kept first (`kept_logs`) and the
    error says where: a lab that did not heal is a defect whose evidence is in those logs."""
    mine = owned()
    try:
        if mine is None:
            manager.wait_healthy(timeout)
            return
        manager.wait_healthy(timeout, stacks=tuple(s for s in mine if s != "base" and s in manager.up_stacks()),
                             with_base="base" in mine)
    except manager.LabError as exc:
        raise manager.LabError(f"{exc} (hosts' logs: {kept_logs(mine)})") from None


def kept_logs(stacks: tuple[str, ...] | None) -> Path:
    """The last 256 KB of every log of these stacks' hosts (every host when None), copied to
    `$CHAOSKIT_FLAKY_DIR` (else reports/flaky) under lab-unhealthy-<time>/<host>/."""
    root = os.environ.get("CHAOSKIT_FLAKY_DIR")
    dest = (Path(root) if root else Path(__file__).resolve().parents[2] / "reports" / "flaky") / \
        f"lab-unhealthy-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    copy_log_tails(dest, 2**18, None if stacks is None else set(hosts(stacks)))
    return dest


def copy_log_tails(dest: Path, tail_bytes: int, names: set[str] | None = None) -> None:
    """The last `tail_bytes` of each lab host's logs (of the hosts `names`, else all) to
    dest/<host>/: the tail says why."""
    from chaoskit.lab.spec import STATE_DIR

    for log in sorted((STATE_DIR / "hosts").glob("*/*.log")) + sorted((STATE_DIR / "hosts").glob("*/*.out")):
        if names is not None and log.parent.name not in names:
            continue
        target = dest / log.parent.name / log.name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "rb") as src:
            src.seek(max(0, log.stat().st_size - tail_bytes))
            target.write_bytes(src.read())
