"""Experiments beyond one drill: `sweep` (a grid), `ramp` (find the knee), `compare` (targets in
alternation). Each cell is: optional injected latency on a link, a discarded warm-up, a measured
window, repeated; medians are reported with the spread across repeats, and the durability
settings read from the servers are stated next to every figure. The format is
chaoskit/playbook/experiment.py.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaoskit.analysis.knee import find_knee
from chaoskit.drill.healing import Undo
from chaoskit.drill.preflight import describe_ha, read_settings
from chaoskit.errors import PreflightError
from chaoskit.faults.client_link import ClientLink
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import LatencySpec
from chaoskit.ha.registry import manager_for
from chaoskit.hostmetrics import HOST_CPU_PREFIX, sampler_for, window_means
from chaoskit.incomplete import Failures
from chaoskit.interrupts import stop_signals_interrupt
from chaoskit.inventory.models import Inventory
from chaoskit.playbook.experiment import Experiment, Link, ToolConfig, tool_of_cell
from chaoskit.recorder import Recorder, error_rate
from chaoskit.workload.engine import TOOL_FIGURE_PREFIX, engine, measures
from chaoskit.workload.runner import LoadRunner
from chaoskit.workload.spec import LoadSpec
from chaoskit.workload.workloads import WorkloadParams


def setting_matches(actual: Any, wanted: bool | int | float | str) -> bool:
    """A server's answer against a required value: booleans as the servers spell them (ON/OFF,
    on/off, 1/0, true/false), numbers by value, words case-insensitively."""
    text = "" if actual is None else str(actual).strip()
    if isinstance(wanted, bool):
        truth = {"on": True, "1": True, "true": True, "yes": True,
                 "off": False, "0": False, "false": False, "no": False}
        return truth.get(text.lower()) is wanted
    if isinstance(wanted, int | float):
        try:
            return float(text) == float(wanted)
        except ValueError:
            return False
    return text.lower() == str(wanted).strip().lower()


def check_required(exp: Experiment, inv: Inventory,
                   read: Any = None) -> dict[str, dict[str, Any]]:
    """Every target's values of the required settings; raises PreflightError naming the first
    setting that differs (nothing has run then). `read(cluster name, names)` is for tests."""
    if not exp.require:
        return {}
    read = read or (lambda name, names: read_settings(inv.clusters[name], inv, names=names))
    found = {}
    for target in exp.targets or (exp.cluster,):
        values = read(target, tuple(exp.require))
        found[target] = values
        for name, wanted in exp.require.items():
            if not setting_matches(values.get(name), wanted):
                have = "is not set on this server" if values.get(name) is None else f"is {values.get(name)}"
                raise PreflightError(f"experiment {exp.name} requires {name} = {_plain(wanted)}; on {target} it "
                                     f"{have}: refused, nothing was run")
    return found


def _plain(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def tables_of(workload: str, load: ToolConfig | None) -> str:
    """Which tables a cell's workload runs on: a tool says which of its tests share theirs
    (pgbench's builtin scripts share pgbench's); every other workload has its own."""
    tool = tool_of_cell(workload, load)
    return engine(tool.tool).tables_of(workload) if tool is not None else workload


PLACED = "clients"  # the group of a cell whose clients run on loader hosts


def cell_load(workload: str, workers: int, op_timeout: float, table_rows: int, load: ToolConfig | None,
              prepare: bool, placed: bool = False) -> LoadSpec:
    """One cell's load: `workers` of chaoskit's own clients (`placed`: one group, `PLACED`, whose
    shares run on loader hosts), or one tool group of `workers` threads running the test
    `workload` (its tables made first when `prepare`: once per test and target)."""
    from chaoskit.workload.spec import ClientGroup

    params = WorkloadParams(table_rows=table_rows)
    load = tool_of_cell(workload, load)
    if load is None:
        groups = (ClientGroup(PLACED, workers=workers),) if placed else ()
        return LoadSpec(workload=workload, workers=workers, op_timeout=op_timeout, params=params, groups=groups)

    # one group of the tool, as a drill's (pgbench: one per client, started again if it aborts;
    # JMeter: the plan, its threads set through chaoskit.threads, validated with the experiment)
    settings = engine(load.tool).cell_settings(load.settings, workload, prepare)
    group = ClientGroup(load.tool, workers=workers, tool=load.tool, settings=settings)
    return LoadSpec(workload="read", workers=workers, op_timeout=op_timeout, params=params, groups=(group,))


MANAGED_NOTE = ("a managed service with no host to SSH into: no host checks, no host metrics, no host faults; "
                "the load, the client link's relays and SQL run on this machine")


def measure_cell(inv: Inventory, cluster: str, fm: FaultManager, *, workload: str, workers: int, delay_ms: float,
                 link: Link | None, warmup: float, measure: float, table_rows: int,
                 op_timeout: float, sync_standby: Any = None, load: ToolConfig | None = None,
                 tool_dir: Path | None = None, prepare: bool = True,
                 placed: tuple[str, ...] = ()) -> dict[str, Any]:
    """One cell. `sync_standby`: the HA manager, when synchronous replication is on and the cell
    must not start before a synchronous standby is named again. `load`: a tool makes the load
    (its output kept under `tool_dir`); `prepare`: its tables are made first. `placed`: the
    loader hosts chaoskit's own clients run on (load agents, split over them; `fm`'s SSH pool)."""
    faults = []
    target = inv.clusters[cluster]
    with contextlib.ExitStack() as stack:
        client_link = None
        if delay_ms and link is not None:
            ttl = warmup + measure + 120
            if link.source == "client":
                spec = LatencySpec(target="client", peer_port=link.port, delay_ms=delay_ms, jitter_ms=link.jitter_ms,
                                   stream=link.stream, ttl=ttl)
                client_link = stack.enter_context(ClientLink(target, inv, spec))
                target = client_link.cluster
            else:
                source = link.source if "@" in link.source or not link.source.startswith("role:") \
                    else link.source + "@all"
                spec = LatencySpec(target=source, cluster=cluster, peers=(link.dest or "",), peer_port=link.port,
                                   delay_ms=delay_ms, jitter_ms=link.jitter_ms, stream=link.stream, ttl=ttl)
                faults = fm.inject(spec)

                def revert_all() -> None:
                    for f in faults:
                        fm.revert(f)

                stack.callback(revert_all)
                wait_links_through_relays(fm, faults)
                if sync_standby is not None:
                    deadline = time.time() + 15
                    while not any(m.sync for m in sync_standby.members()) and time.time() < deadline:
                        time.sleep(0.2)
        rec = Recorder(base=time.time())
        load_spec = cell_load(workload, workers, op_timeout, table_rows, load, prepare, placed=bool(placed))
        extra: dict[str, Any] = {}
        if placed:
            from chaoskit.workload.placement import loader_agent_sources

            extra["make_sources"] = loader_agent_sources(fm.pool, {PLACED: placed}, load_spec.run_id)
        runner = LoadRunner(target, inv, load_spec, rec, tool_dir=tool_dir, **extra)
        runner.setup()
        t_start, client = runner.run_measured(warmup, measure)
        window = (t_start + warmup, t_start + warmup + measure)
        w = rec.window(*window)
        proxy = [s for f in faults for s in fm.proxy_stats(f)]
        if client_link is not None:
            time.sleep(1.1)  # the relays write their figures every second
            proxy = client_link.stats()
    ops = w["ok"] + w["fail"] + w["info"]
    added = [s["added_p50_ms"] for s in proxy if s.get("added_p50_ms") is not None]
    latency: dict[str, Any] = {"mean_ms": _ms(w["mean_ms"]), "p50_ms": w["p50_ms"], "p90_ms": _ms(w["p90_ms"]),
                               "p99_ms": w["p99_ms"], "p999_ms": w["p99.9_ms"]}
    load = tool_of_cell(workload, load)
    if load is not None and not measures(load.tool).latency:  # no op's latency is known: none is made up
        assert tool_dir is not None
        latency = {"mean_ms": None, "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None,
                   **engine(load.tool).window_latency(tool_dir / load.tool, *window)}
    figures = client.with_dispatch(w).figures()
    if placed:  # the clients ran on loader hosts: the control node's CPU says nothing of them
        figures.update({"client_cpu_cores": None, "client_cpu_busiest_process": None, "client_saturated": None,
                        "client_saturated_why": "clients on loader hosts: their CPU is not measured here",
                        "loaders": list(placed)})
    return {"workload": workload, "workers": workers, "delay_ms": delay_ms, "tps": round(w["tps"], 1),
            "window": [round(window[0], 6), round(window[1], 6)],  # the measured instants (control clock)
            **latency, **figures,
            "error_rate": error_rate(w) if ops else None,  # no ops: no rate (not 0)
            "proxy_added_p50_ms": round(statistics.median(added), 3) if added else None,
            "proxy_added_p99_ms": max((s["added_p99_ms"] for s in proxy if s.get("added_p99_ms")), default=None),
            "proxy_bytes": sum(s.get("bytes", 0) for s in proxy)}


def _ms(value: float) -> float | None:
    """A latency figure of the window (NaN when no op succeeded in it: none, not a number)."""
    return None if math.isnan(value) else round(value, 3)


def wait_links_through_relays(fm: FaultManager, faults: list[Any], timeout: float = 20.0) -> None:
    """The fault reset the links it delays (e.g. a standby's replication connection); measure only
    once every relay carries a connection again. A walreceiver waits wal_retrieve_retry_interval
    (5 s by default) before it reconnects, and a synchronous standby that is not connected is
    dropped by the HA manager: a cell measured before that would measure asynchronous commit."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        stats = [s for f in faults for s in fm.proxy_stats(f)]
        if stats and all(s.get("connections", 0) >= 1 for s in stats):
            time.sleep(0.5)  # the standby is back; let the manager name it synchronous again
            return
        time.sleep(0.25)
    raise RuntimeError(f"the delayed links did not reconnect through their relays within {timeout:g}s")


def summarise(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Median per cell over repeats, with the spread (min, max) of TPS."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in cells.items():
        tps = [r["tps"] for r in rs]

        def med(k: str, rs: list[dict[str, Any]] = rs) -> float | None:
            values = [r[k] for r in rs if r.get(k) is not None]
            return statistics.median(values) if values else None

        cell = {**dict(zip(keys, key, strict=True)), "repeats": len(rs), "tps": statistics.median(tps),
                "tps_min": min(tps), "tps_max": max(tps), "mean_ms": med("mean_ms"), "p50_ms": med("p50_ms"),
                "p90_ms": med("p90_ms"), "p99_ms": med("p99_ms"),
                "p999_ms": med("p999_ms"), "error_rate": med("error_rate"),
                "proxy_added_p50_ms": med("proxy_added_p50_ms"), "proxy_added_p99_ms": med("proxy_added_p99_ms")}
        for name in sorted({k for r in rs for k in r if k.startswith(TOOL_FIGURE_PREFIX)}):
            cell[name] = med(name)  # what a rate-only tool says of latency (its engine's window_latency)
        for name in sorted({k for r in rs for k in r if k.startswith(HOST_CPU_PREFIX)}):
            cell[name] = med(name)  # each host's CPU busy % over the cell's window
        if any("client_cpu_cores" in r for r in rs):
            # a cell is the client's as soon as one of its repeats was: its TPS is then the client's limit
            why = next((r["client_saturated_why"] for r in rs if r.get("client_saturated")), None)
            measured = any(r.get("client_cpu_cores") is not None for r in rs)  # not on loader hosts
            cell.update({"client_cpu_cores": med("client_cpu_cores"),
                         "client_saturated": why is not None if measured else None,
                         "client_saturated_why": why if measured else rs[0].get("client_saturated_why")})
            if any(r.get("client_dispatch_late_pct") is not None for r in rs):
                cell["client_dispatch_late_pct"] = med("client_dispatch_late_pct")
        out.append(cell)
    # one set of columns for every cell (a tool's cells and chaoskit's clients' cells side by side)
    columns = list(dict.fromkeys(k for c in out for k in c))
    return [{k: c.get(k) for k in columns} for c in out]


def run_experiment(exp: Experiment, inv: Inventory, inventory_path: str, progress: Any = None,
                   tool_dir: Path | None = None) -> dict[str, Any]:
    """Cell by cell, told as the drill is, in nested scopes whose teardown is the reading order
    reversed: every latency fault and every settings change is undone on the way out (normal end,
    error, Ctrl-C, SIGTERM), the settings journaled with a dead-man first; the hosts' CPU is read
    through it all; an error or interrupt in a cell ends the cells, and those measured are kept.
    `tool_dir`: where a tool's output is kept, a directory per cell (`cell-NNN/`)."""
    run = ExperimentRun(exp, inv, inventory_path, progress, tool_dir)
    with stop_signals_interrupt(), run.hosts_connected(), run.hosts_sampled(), run.healing(), run.cells_kept():
        run.place_clients()
        run.read_targets()
        run.change_settings()
        run.measure_cells()
    return run.result()


class ExperimentRun:
    """One experiment's run: its scopes (the drill's: hosts connected, sampled, healing; and the
    cells kept whatever ends them) and its steps, each reading and writing the run's state."""

    def __init__(self, exp: Experiment, inv: Inventory, inventory_path: str, progress: Any,
                 tool_dir: Path | None) -> None:
        self.exp, self.inv, self.inventory_path, self.progress, self.tool_dir = exp, inv, inventory_path, progress, \
            tool_dir
        self.started = time.time()
        self.settings: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        self.ha = manager_for(inv.clusters[exp.cluster], inv)
        self.ttl = 3600.0 * 24
        self.interrupted: str | None = None
        self.failures = Failures()  # what failed after the first cell started: the cells done are kept, the run sealed
        self.targets = exp.targets or (exp.cluster,)
        self.required = check_required(exp, inv)  # before anything is touched
        self.restore_errors: list[str] = []
        self.series: Any = {}
        self.fm: FaultManager | None = None
        self.undo: Undo | None = None
        self.placed: tuple[str, ...] = ()  # the loader hosts the clients run on (where:)

    @contextlib.contextmanager
    def hosts_connected(self) -> Iterator[None]:
        """SSH to the targets' hosts (the fault manager's pool) and what undoes changes."""
        with FaultManager(self.inv) as fm:
            self.fm, self.undo = fm, Undo(fm, self.ha, self.inventory_path)
            yield

    @contextlib.contextmanager
    def hosts_sampled(self) -> Iterator[None]:
        """The hosts' CPU (and the control node's) through the whole experiment, read per cell's window."""
        assert self.fm is not None
        hosts = list(dict.fromkeys(m.host for t in self.targets for m in self.inv.clusters[t].members))
        sampler = sampler_for(self.inv, self.fm.pool, hosts)
        sampler.start()
        try:
            yield
        finally:
            self.series = sampler.stop()

    @contextlib.contextmanager
    def healing(self) -> Iterator[None]:
        """On the way out, whatever happened: every latency fault reverted, every setting restored."""
        assert self.undo is not None
        try:
            yield
        finally:
            self.restore_errors = self.undo.undo().errors

    @contextlib.contextmanager
    def cells_kept(self) -> Iterator[None]:
        """An interrupt or an error ends the cells; the cells measured so far are evidence all the
        same (the error is the run's failure, said with them), never raised past the heal."""
        try:
            yield
        except KeyboardInterrupt:
            self.interrupted = "interrupted (Ctrl-C or SIGTERM); faults reverted, settings restored"
        except Exception as exc:
            self.failures.add(f"cell {len(self.rows)}", exc)

    def place_clients(self) -> None:
        """With `where:`: the loader hosts the cells' clients run on, and each ready (this chaoskit,
        its clock), before anything is changed; kept in the result."""
        if self.exp.where is None:
            return
        from chaoskit.drill.preflight import loader_hosts_ready, where_hosts

        assert self.fm is not None
        self.placed = where_hosts("experiment", self.exp.where, self.exp.loaders, self.inv)
        loader_hosts_ready(list(self.placed), self.inv, self.fm.pool)

    def read_targets(self) -> None:
        for t in self.targets:
            self.settings[t] = {"server": read_settings(self.inv.clusters[t], self.inv),
                                "ha": describe_ha(manager_for(self.inv.clusters[t], self.inv))}

    def change_settings(self) -> None:
        """The HA settings fixed for the whole experiment, journaled (with a dead-man) and set."""
        if self.exp.settings:
            assert self.undo is not None
            self.undo.change_settings(dict(self.exp.settings), self.ttl)

    def plan(self) -> list[tuple[str, str, int, float, bool | None]]:
        """(target, workload, workers, delay, synchronous mode) of every cell, in the order run."""
        exp, grid = self.exp, self.exp.grid
        modes: tuple[bool | None, ...] = grid.synchronous_mode or (None,)
        if exp.kind == "compare":  # the targets alternate innermost: each delay's routes side by side
            return [(t, wl, w, d, None) for _ in range(exp.repeats) for d in grid.delay_ms
                    for wl in grid.workload for w in grid.workers for t in self.targets]
        # the mode outermost: one reconfiguration per mode and repeat
        return [(exp.cluster, wl, w, d, m) for _ in range(exp.repeats)
                for m, wl, w, d in itertools.product(modes, grid.workload, grid.workers, grid.delay_ms)]

    def measure_cells(self) -> None:
        exp, inv, ha = self.exp, self.inv, self.ha
        assert self.fm is not None and self.undo is not None
        plan = self.plan()
        per_cell = exp.warmup + exp.measure + 2
        current: bool | None = None
        # a tool's tables are made once per target and test (pgbench's builtin scripts share theirs)
        prepared: set[tuple[str, str]] = set()
        for i, (target, wl, w, d, m) in enumerate(plan):
            if m is not None and m != current:
                # the first switch is journaled with the original value; later ones only flip it
                if current is None:
                    self.undo.change_settings({"synchronous_mode": m}, self.ttl)
                else:
                    ha.apply_settings({"synchronous_mode": m})
                current = m
                self.settings[f"{exp.cluster} synchronous_mode={str(m).lower()}"] = {
                    "server": read_settings(inv.clusters[exp.cluster], inv), "ha": describe_ha(ha)}
            if self.progress is not None:
                mode = "" if m is None else (" sync" if m else " async")
                self.progress(i, len(plan), per_cell * (len(plan) - i), f"{target} {wl} x{w} delay {d:g} ms{mode}")
            sync_on = m is True or (m is None and exp.settings.get("synchronous_mode") is True)
            tool_cell = tool_of_cell(wl, exp.load) is not None
            cell_dir = (self.tool_dir / f"cell-{i:03d}") if self.tool_dir is not None and tool_cell else None
            tables = (target, tables_of(wl, exp.load))
            cell = measure_cell(inv, target, self.fm, workload=wl, workers=w, delay_ms=d, link=exp.link,
                                warmup=exp.warmup, measure=exp.measure, table_rows=exp.table_rows,
                                op_timeout=exp.op_timeout, sync_standby=ha if sync_on else None,
                                load=exp.load, tool_dir=cell_dir, prepare=tables not in prepared,
                                placed=self.placed)
            prepared.add(tables)
            if m is not None:
                cell["synchronous_mode"] = m
            self.rows.append({"target": target, "repeat": i // max(1, len(plan) // exp.repeats), **cell})

    def result(self) -> dict[str, Any]:
        """The run's result: what was measured and changed, then the cells' figures (an analysis
        that fails is the run's failure, said with the rows)."""
        result: dict[str, Any] = {
            "experiment": self.exp.model_dump(mode="json"), "started": self.started, "ended": time.time(),
            "settings": self.settings, "rows": self.rows, "cells": [], "aborted": self.interrupted,
            "settings_restore_errors": self.restore_errors, "failures": self.failures,
            **({"placement": {"where": self.exp.where.said(), "loaders": list(self.placed)}}
               if self.exp.where is not None else {})}
        with self.failures.guard("analysis"):
            _summarised(result, self.exp, self.inv, self.targets, self.series, self.required)
        return result


def _summarised(result: dict[str, Any], exp: Experiment, inv: Inventory, targets: tuple[str, ...], series: Any,
                required: Any) -> None:
    """The cells' figures from the rows measured, the knees and comparisons, into `result`."""
    rows = result["rows"]
    for row in rows:
        for host, busy in window_means(series, *row["window"]).items():
            row[HOST_CPU_PREFIX + host] = busy
    delays = exp.grid.delay_ms
    keys: tuple[str, ...] = ("workload", "workers", "delay_ms")
    if exp.kind == "compare":
        keys = ("target", "workload", "workers", *(("delay_ms",) if delays != (0.0,) else ()))
    if exp.grid.synchronous_mode and exp.kind != "compare":
        keys = ("synchronous_mode", *keys)
    cells = result["cells"] = summarise(rows, keys)
    result["host_metrics"] = {h: s.summary() for h, s in sorted(series.items())}
    if required:
        result["required"] = {"settings": dict(exp.require), "found": required}
    managed = [t for t in targets if inv.clusters[t].managed]
    if managed:  # said once, with the figures: what could not be measured there and why
        result["managed"] = {t: MANAGED_NOTE for t in managed}
    if exp.kind == "ramp":
        # one ladder per workload: their knees are at different concurrencies
        knees = ladder_knees(cells, exp.grid.workload, exp.grid.delay_ms[0])
        result["knee"] = knees[exp.grid.workload[0]]
        if len(knees) > 1:
            result["knees"] = knees
    if exp.kind == "compare" and len(targets) >= 2:
        if delays == (0.0,):
            result["comparison"] = _compare(rows, targets)
        else:  # each route against the first at each added delay: the comparison seed 000 made
            result["comparison_by_delay"] = {f"{d:g}": _compare([r for r in rows if r["delay_ms"] == d], targets)
                                             for d in delays}


def ladder_knees(cells: list[dict[str, Any]], workloads: tuple[str, ...], delay_ms: float) -> dict[str, Any]:
    """One knee per workload (their knees are at different concurrencies), over the cells at the
    first delay. A cell where the client was the limit says nothing of the server: the knee
    ignores it, and says which it ignored and why."""
    knees = {}
    for wl in workloads:
        steps = sorted((c for c in cells if c["delay_ms"] == delay_ms and c["workload"] == wl),
                       key=lambda c: c["workers"])
        knees[wl] = find_knee([c for c in steps if not c.get("client_saturated")])
        ignored = [{"workers": c["workers"], "why": c["client_saturated_why"]} for c in steps
                   if c.get("client_saturated")]
        if ignored:
            knees[wl]["ignored_client_saturated"] = ignored
    return knees


def _compare(rows: list[dict[str, Any]], targets: tuple[str, ...]) -> dict[str, Any]:
    """Relative TPS difference of each target against the first, per repeat: median and spread;
    and the relative change of the median latency (p50), median over repeats."""
    base = targets[0]
    out = {}

    def per_repeat(t: str, key: str) -> dict[int, float]:
        got: dict[int, list[float]] = {}
        for r in rows:
            if r["target"] == t and r.get(key) is not None:
                got.setdefault(r["repeat"], []).append(r[key])
        return {rep: statistics.mean(v) for rep, v in got.items()}

    for t in targets[1:]:
        changes = {}
        for key in ("tps", "p50_ms"):
            a, b = per_repeat(base, key), per_repeat(t, key)
            changes[key] = [b[rep] / a[rep] - 1 for rep in sorted(a) if rep in b and a[rep]]
        ratios, p50 = changes["tps"], changes["p50_ms"]
        out[f"{t}_vs_{base}"] = {"relative_tps_change_median": round(statistics.median(ratios), 4) if ratios else None,
                                 "min": round(min(ratios), 4) if ratios else None,
                                 "max": round(max(ratios), 4) if ratios else None, "repeats": len(ratios),
                                 "relative_p50_change_median": round(statistics.median(p50), 4) if p50 else None}
    return out
