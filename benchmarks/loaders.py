"""What running the load through load agents costs: the same ledger load on the lab's PostgreSQL
cluster from the control node's worker processes and from load agents (a detached process per
share, spooling every delivery, read back through FramedSource), rounds alternating (and which of
each pair goes first) so drift on the shared cores and the growing table hit both alike.
`--agents here` runs the agents on the control node (read from the spool file), `--agents loaders`
on the lab's loader hosts ld-a and ld-b, half the clients each, through the lab's Ray cluster once
`chaoskit loaders up` has started it (else over SSH).
Prints the acknowledged writes per second of each and `ratio <agents/local>` (the median over the
rounds of each round's ratio, and their range; the goal for loaders: >= 0.9). One round's ratio
moves by about 15 % either way on this 2-core machine (database, replicas and clients share the
cores): with 8 clients, 3 rounds gave 0.84 and 0.89 on two days where 7 rounds gave 0.99 (0.85 to
1.15), so the default is 7 rounds. With `--agents loaders` each round also prints what it
cost: the controller's CPU per merged op (everything its process did, the Ray driver and SSH
included, this script's sampling left out; the local run's worker processes are not in it), each
agent's process tree and each Ray node's daemons as CPU share and resident memory (sampled every
0.5 s; the Ray daemons also idle, before the round), each loader's clock offset and its
uncertainty as measured over SSH and through its Ray actor, and the start skew: each zone's first
acknowledged write after the common start instant. `--lost` instead SIGKILLs ld-b's agent 3 s
into a two-zone load and prints the seconds until the controller said `loader_lost`.

Run as root with the lab up:
python3 benchmarks/loaders.py [--clients 8] [--seconds 10] [--rounds 7] [--agents here|loaders] [--lost]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from chaoskit.inventory.fanout import RemotePool
from chaoskit.lab.inventory_file import lab_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.agent import agent_sources
from chaoskit.workload.placement import loader_agent_sources
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.spec import ClientGroup
from chaoskit.workload.workloads import WorkloadParams

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _procs() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (ppid, cpu ticks, cmdline) of every process."""
    out = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(d.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), (d / "cmdline").read_bytes())
        except (OSError, ValueError, IndexError):
            continue
    return out


def _rss(pid: int) -> int:
    try:
        return int((Path(f"/proc/{pid}/statm")).read_text().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _tree(roots: set[int], procs: dict[int, tuple[int, int, bytes]]) -> set[int]:
    out, grew = set(r for r in roots if r in procs), True
    while grew:
        kids = {p for p, (pp, _, _) in procs.items() if pp in out} - out
        grew, out = bool(kids), out | kids
    return out


def _cpu(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


class Costs:
    """CPU share and resident memory of the agents' trees and the Ray daemons, per loader host,
    sampled on the runner's ticks. The process table is scanned for their members every RESCAN_S
    only: a scan of every process is itself a good part of a core on a busy machine, and this
    sampling runs only in the agents' rounds."""

    RESCAN_S = 5.0

    def __init__(self, spool: Path, ray_dir: str | None) -> None:
        self.spool, self.ray_dir = spool, ray_dir
        self.t0: dict[str, float] = {}
        self.t1: dict[str, float] = {}
        self.ticks: dict[str, int] = {}  # CPU ticks used since the group's first sample
        self.rss: dict[str, int] = {}
        self._members: dict[str, set[int]] = {}
        self._seen: dict[int, int] = {}  # pid -> its CPU ticks at the last sample
        self._scanned = -float("inf")

    def groups(self) -> dict[str, set[int]]:
        procs = _procs()
        out: dict[str, set[int]] = {}
        for pid_file in self.spool.glob("*/agent.pid"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                out["agent " + pid_file.parent.name] = _tree({int(pid_file.read_text().split()[0])}, procs)
        if self.ray_dir:
            for name in ("head", "n-ld-a", "n-ld-b"):
                mark = f"{self.ray_dir}/{name}".encode()
                out["ray " + name] = {p for p, (_, _, cmd) in procs.items() if mark in cmd}
        return out

    own_cpu = 0.0  # the controller's CPU these samples took (left out of its cost per op)

    def tick(self, _runner: object = None) -> None:
        began = time.thread_time()
        self._tick()
        self.own_cpu += time.thread_time() - began

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._scanned >= self.RESCAN_S:
            self._members, self._scanned = self.groups(), now
        for name, pids in self._members.items():
            used = 0
            for p in pids:
                cpu = _cpu(p)
                if cpu is None:
                    continue
                used += cpu - self._seen.get(p, cpu)  # a member first seen now counts from now
                self._seen[p] = cpu
            self.t0.setdefault(name, now)
            self.t1[name] = now
            self.ticks[name] = self.ticks.get(name, 0) + used
            self.rss[name] = max(self.rss.get(name, 0), sum(_rss(p) for p in pids))

    def lines(self) -> list[str]:
        out = []
        for name in sorted(self.t1):
            span = self.t1[name] - self.t0[name]
            share = self.ticks[name] / TICK / span * 100 if span > 0 else 0.0
            out.append(f"    {name}: CPU {share:.0f}% of a core, resident {self.rss[name] / 2**20:.0f} MiB")
        return out


def one(clients: int, seconds: float, agents: Path | None, where: str = "here") -> float:
    half = clients // 2
    groups = (ClientGroup("a", workers=half), ClientGroup("b", workers=clients - half, first_worker=half + 1))
    # a run id of its own
    spec = LoadSpec(workload="ledger", workers=clients, params=WorkloadParams(table_rows=2_000), groups=groups)
    inv = lab_inventory()
    rec = Recorder(base=time.time())
    with RemotePool(inv) as pool:
        make = None if agents is None else agent_sources(agents) if where == "here" else \
            loader_agent_sources(pool, {"a": ("ld-a",), "b": ("ld-b",)}, spec.run_id)
        runner = LoadRunner(inv.clusters["pg"], inv, spec, rec, make_sources=make)
        runner.setup()
        remote = agents is not None and where == "loaders" and inv.loaders is not None
        costs = None
        if remote:
            assert inv.loaders is not None
            ray_dir = inv.loaders.ray.dir if inv.loaders.ray is not None else None
            costs = Costs(Path(inv.loaders.spool) / spec.run_id, ray_dir)
            idle = Costs(Path("/nonexistent"), ray_dir)
            idle.tick()
            time.sleep(2.0)
            idle.tick()
            print("  idle before the round:", *idle.lines(), sep="\n", flush=True)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        try:
            runner.run_for(seconds + 1.0, on_tick=costs.tick if costs is not None else None)
        finally:
            if remote:
                shutil.rmtree(Path(inv.loaders.spool) / spec.run_id, ignore_errors=True)  # type: ignore[union-attr]
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    totals = rec.totals()
    merged = totals["ok"] + totals["fail"] + totals["info"]
    used = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime - (costs.own_cpu if costs else 0.0)
    print(f"  {'agents' if agents else 'local'}: controller CPU {used:.2f} s for {merged} merged ops: "
          f"{used / max(merged, 1) * 1e6:.1f} us per op", flush=True)
    if costs is not None:
        print(*costs.lines(), sep="\n", flush=True)
        from chaoskit.recorder import LEDGER_UNSET

        firsts = {}
        for g in groups:
            acks = [c[c < LEDGER_UNSET] for c in (rec.ledger_column(w) for w in g.worker_ids)]
            firsts[g.name] = rec.base + min(int(a.min()) for a in acks if len(a)) / 1000 - (runner.t_start or 0.0)
        for src in runner.sources:  # each loader's clock as measured before the start, both ways
            d = src.describe()
            ways = [f"{w.removeprefix('clock_')} {d[w]['offset_s'] * 1000:+.3f} ms +/- "
                    f"{d[w]['uncertainty_s'] * 1000:.3f} ms" for w in ("clock_ssh", "clock_ray") if d.get(w)]
            if ways:
                print(f"    clock of {d.get('where')}: " + ", ".join(ways), flush=True)
        print("    start: each zone's first acknowledged write after the common start: "
              + ", ".join(f"{n} {v * 1000:+.0f} ms" for n, v in firsts.items())
              + f"; skew {(max(firsts.values()) - min(firsts.values())) * 1000:.0f} ms", flush=True)
    # the acknowledged writes of the window [start + 1 s, start + 1 s + seconds]: neither the
    # start nor the stop (an agent's is a file it polls) counts
    df = rec.to_frame()
    t0 = (runner.t_start or 0.0) + 1.0
    window = df[(df["t"] >= t0) & (df["t"] < t0 + seconds)]
    if totals["fail"] or totals["info"]:
        print(f"  ({'agents' if agents else 'local'}: {totals['fail']} failed, {totals['info']} indeterminate; "
              f"first: {rec.errors[:1]})", flush=True)
    return float(window["write_ok"].sum()) / seconds


def lost(clients: int) -> None:
    """ld-b's agent SIGKILLed 3 s into a two-zone load: seconds until `loader_lost`."""
    half = clients // 2
    groups = (ClientGroup("a", workers=half), ClientGroup("b", workers=clients - half, first_worker=half + 1))
    spec = LoadSpec(workload="ledger", workers=clients, params=WorkloadParams(table_rows=2_000), groups=groups)
    inv = lab_inventory()
    assert inv.loaders is not None
    events: list[dict] = []
    spool = Path(inv.loaders.spool) / spec.run_id
    with RemotePool(inv) as pool:
        runner = LoadRunner(inv.clusters["pg"], inv, spec, Recorder(base=time.time()), on_event=events.append,
                            make_sources=loader_agent_sources(pool, {"a": ("ld-a",), "b": ("ld-b",)}, spec.run_id))
        runner.setup()
        runner.start()
        try:
            time.sleep(3.0)
            [pid_file] = spool.glob("b-*/agent.pid")
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            killed = time.time()
            while not [e for e in events if e["kind"] == "loader_lost"] and time.time() < killed + 120:
                time.sleep(0.01)
        finally:
            runner.stop()
            shutil.rmtree(spool, ignore_errors=True)
    said = [e for e in events if e["kind"] == "loader_lost"]
    via = sorted({s.describe().get("via", "ssh") for s in runner.sources})
    print(f"agent killed -> loader_lost: {said[0]['t'] - killed:.2f} s ({said[0]['why']}; via {', '.join(via)})"
          if said else "no loader_lost within 120 s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--agents", choices=("here", "loaders"), default="here")
    ap.add_argument("--lost", action="store_true")
    args = ap.parse_args()
    if args.lost:
        lost(args.clients)
        return
    local, agents = [], []
    with tempfile.TemporaryDirectory(prefix="chaoskit-agents-") as tmp:
        for r in range(args.rounds):
            # which goes first alternates: the ledger grows and the database slows round by round,
            # and a fixed order would charge that to the second of each pair
            for first in ((False, True) if r % 2 == 0 else (True, False)):
                if first:
                    agents.append(one(args.clients, args.seconds, Path(tmp) / f"round{r}", args.agents))
                else:
                    local.append(one(args.clients, args.seconds, None))
            print(f"round {r + 1}: local {local[-1]:.0f} ops/s, agents {agents[-1]:.0f} ops/s", flush=True)
    ratios = [a / b for a, b in zip(agents, local, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{args.clients} connections, {args.seconds:g} s each: local {statistics.median(local):.0f} ops/s, "
          f"agents ({args.agents}) {statistics.median(agents):.0f} ops/s")
    print(f"ratio {ratio:.2f} (rounds: {min(ratios):.2f} to {max(ratios):.2f})")


if __name__ == "__main__":
    main()
