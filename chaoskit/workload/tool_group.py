"""Client groups whose load an external tool makes (`load.groups[].tool`), run on the control
node (or, with `where:`, by a load agent on a loader host) against the group's route, their
output read into the same Recorder as chaoskit's own clients, so the timeline, phases and RTO
come out per group the same way.

Each tool is one engine module (`chaoskit.workload.engine`) that starts it, reads it and starts it
again when it gives up: `prepare` (its tables, before the load) and `runner` (an object with
`tick(now)`, `stop()` and `events`). This module is the load runner's side of them: the process
that drives one tool group and ships its batches and events, as a worker process of chaoskit's own
clients does. Everything a tool writes is kept under `tools/<group>/`.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.lifeline import die_with_parent
from chaoskit.recorder import Recorder
from chaoskit.workload import stamp
from chaoskit.workload.engine import engine
from chaoskit.workload.outcomes import client_deadline
from chaoskit.workload.spec import ClientGroup, LoadSpec

POLL_S = 0.02
DRAIN_EVERY = 0.2
LATE_S = 2.0  # the stdio block a log line may wait in: intervals older than this are shipped as complete
STOP_GRACE_S = 10.0  # a client ending its transaction in flight at the load's stop; then SIGKILL


def with_parent_death(argv: list[str]) -> list[str]:
    """The tool dies with the process that started it, however that one dies (the kernel's
    parent-death signal, set by util-linux's setpriv before it executes the tool)."""
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv]


def run_setup(commands: list[tuple[str, list[str]]], log: Path, env: dict[str, str], group: str,
              timeout: float) -> None:
    """A tool's setup commands (its tables), one after the other, each after a `== <label>` line
    in `log` with its output; the first that fails raises, naming it and quoting its last line."""
    with open(log, "ab") as fh:
        for label, argv in commands:
            fh.write(f"== {label}\n".encode())
            fh.flush()
            res = subprocess.run(with_parent_death(argv), stdin=subprocess.DEVNULL, stdout=fh,
                                 stderr=subprocess.STDOUT, env={**os.environ, **env}, timeout=timeout, check=False)
            if res.returncode != 0:
                said = log.read_text(errors="replace").strip().splitlines()
                raise RuntimeError(f"{label} for group {group} failed (exit {res.returncode}): "
                                   f"{said[-1] if said else 'no output'}")


def describe_tool(group: ClientGroup, route: Cluster) -> list[str]:
    """The command lines a tool group will run on the control node (placeholders where a value is
    found at run time), for `chaoskit validate`."""
    return engine(group.tool).describe(group, route)


def prepare_tool(group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path) -> None:
    """The tool's own tables, made through the group's route before the load starts."""
    raw.mkdir(parents=True, exist_ok=True)
    engine(group.tool).prepare(group, cluster, inventory, spec, raw)


def tool_main(cluster_json: str, inventory_json: str, spec: LoadSpec, group: ClientGroup, raw: str, base: float,
              rate_share: float | None, out: Any, go: Any, start_at: Any, stop_evt: Any, parent_pid: int) -> None:
    """Entry point of a tool group's process on the control node: it dies with the controller."""
    die_with_parent(parent_pid)
    run_tool(cluster_json, inventory_json, spec, group, raw, base, rate_share, out, go, start_at, stop_evt)


def run_tool(cluster_json: str, inventory_json: str, spec: LoadSpec, group: ClientGroup, raw: str, base: float,
             rate_share: float | None, out: Any, go: Any, start_at: Any, stop_evt: Any) -> None:
    """A tool group in this process (the load runner's protocol: ready, batches, final): a tool
    group process of the control node and a loader's agent (`chaoskit.workload.agent`) both run
    it; what ends it when its controller is gone is theirs."""
    cluster = Cluster.model_validate_json(cluster_json)
    inventory = Inventory.model_validate_json(inventory_json)
    recorder = Recorder(base, spec.interval, keep_ops=True, stall_s=client_deadline(spec.op_timeout))
    runner = engine(group.tool).runner(group, cluster, inventory, spec, Path(raw), recorder, rate_share)
    out.put(("ready", os.getpid()))
    go.wait()
    delay = start_at.value - stamp.now()
    if delay > 0:
        time.sleep(delay)
    last_drain = stamp.now()

    def ship(now: float, kind: str = "batch") -> None:
        for ev in runner.events:
            out.put(("event", os.getpid(), ev))
        runner.events.clear()
        batch = recorder.drain(now - LATE_S) if kind == "batch" else recorder.drain(now, final=True)
        out.put((kind, os.getpid(), batch))

    def ship_when_due() -> None:
        nonlocal last_drain
        now = stamp.now()
        if now - last_drain >= DRAIN_EVERY:
            ship(now)
            last_drain = now

    runner.heartbeat = ship_when_due
    try:
        while not stop_evt.is_set():
            runner.tick(stamp.now())
            ship_when_due()
            stop_evt.wait(POLL_S)
    finally:
        runner.stop()
        ship(stamp.now(), "final")
