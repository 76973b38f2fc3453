"""The `chaoskit` command. Typer commands only: parse, call, map errors to exit codes.

Exit codes: 0 ok, 1 failure (or an SLO missed), 2 bad input (nothing touched), 3 aborted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from chaoskit.errors import ChaoskitError, InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Failover and latency drills for replicated databases.")
lab_app = typer.Typer(no_args_is_help=True, help="The local lab (root, Linux).")
inventory_app = typer.Typer(no_args_is_help=True, help="Inspect an inventory.")
app.add_typer(lab_app, name="lab")
app.add_typer(inventory_app, name="inventory")

out = Console()
err = Console(stderr=True)

InventoryOpt = Annotated[Path, typer.Option("-i", "--inventory", help="Inventory YAML (own or Ansible shape).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _fail(exc: ChaoskitError) -> None:
    err.print(f"[red]error:[/red] {exc}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


@lab_app.command("up")
def lab_up(
    patroni: Annotated[str, typer.Option(help="Patroni to run: debian (package) or pypi.")] = "debian",
    keep_on_failure: Annotated[bool, typer.Option(help="Leave a failed lab in place to read its logs.")] = False,
) -> None:
    """Build the lab: namespaces, sshd per host, etcd, 3 Patroni nodes, a MariaDB GTID pair."""
    from chaoskit.lab import manager

    if patroni not in ("debian", "pypi"):
        _fail(InputError("expected debian or pypi", source="command line", field="--patroni"))
    try:
        with out.status("bringing the lab up..."):
            res = manager.up(patroni, keep_on_failure=keep_on_failure)
    except ChaoskitError as exc:
        _fail(exc)
    if res.already_up:
        out.print(f"lab already up and healthy (checked in {res.seconds:.1f}s)")
    else:
        note = " (cleaned leftovers of an earlier run first)" if res.cleaned_leftovers else ""
        out.print(f"lab up in {res.seconds:.1f}s{note}; inventory: inventories/lab.yaml")
    _print_lab_status(manager.status())


@lab_app.command("down")
def lab_down() -> None:
    """Remove everything the lab made."""
    from chaoskit.lab import manager

    try:
        seconds = manager.down()
    except ChaoskitError as exc:
        _fail(exc)
    out.print(f"lab down in {seconds:.1f}s")


@lab_app.command("status")
def lab_status(as_json: JsonOpt = False) -> None:
    """Hosts (SSH reachable), Patroni members (role, state, lag) and MariaDB roles."""
    from chaoskit.lab import manager

    try:
        manager.require_root()
        data = manager.status()
    except ChaoskitError as exc:
        _fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        _print_lab_status(data)


def _print_lab_status(data: dict) -> None:
    table = Table(title="lab hosts")
    for col in ("host", "address", "ssh"):
        table.add_column(col)
    for h in data["hosts"]:
        table.add_row(h["name"], h["address"], "yes" if h["ssh"] else "[red]no[/red]")
    out.print(table)
    pg = Table(title="postgres (Patroni)")
    for col in ("member", "role", "state", "lag_bytes"):
        pg.add_column(col)
    for m in data["postgres"]:
        pg.add_row(m["name"], m["role"], str(m["state"]), str(m["lag_bytes"]))
    out.print(pg)
    my = Table(title="mariadb")
    for col in ("member", "role"):
        my.add_column(col)
    for m in data["mariadb"]:
        my.add_row(m["name"], m["role"])
    out.print(my)


@inventory_app.command("check")
def inventory_check(inventory: InventoryOpt, as_json: JsonOpt = False) -> None:
    """Reach every host in parallel: SSH round-trip, clock offset, capabilities, cluster roles."""
    from chaoskit.inventory.check import check_inventory, render_check
    from chaoskit.inventory.loader import load_inventory

    try:
        inv = load_inventory(inventory)
        report = check_inventory(inv)
    except ChaoskitError as exc:
        _fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(report, default=str) + "\n")
    else:
        render_check(report, out)
    if not all(h["reachable"] for h in report["hosts"]):
        raise typer.Exit(1)


def _duration(value: str, flag: str) -> float:
    from chaoskit.units import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InputError(str(exc), source="command line", field=flag) from None


@app.command("load")
def load(
    inventory: InventoryOpt,
    cluster: Annotated[str, typer.Option(help="Cluster name in the inventory.")],
    workload: Annotated[str, typer.Option(help="ledger|bank|update|read|oltp|oltp-ro|oltp-wo")] = "ledger",
    workers: Annotated[int, typer.Option(min=1, help="Concurrent workers (one connection each).")] = 8,
    rate: Annotated[float | None, typer.Option(help="Open loop: total arrivals per second.")] = None,
    duration: Annotated[str, typer.Option(help="How long, e.g. 60s.")] = "60s",
    processes: Annotated[int | None, typer.Option(help="Worker processes (default: one per core).")] = None,
    op_timeout: Annotated[str, typer.Option(help="Per-op deadline.")] = "5s",
    table_rows: Annotated[int, typer.Option(help="Rows in update/read/oltp tables.")] = 10_000,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Directory for timeline.csv.")] = None,
) -> None:
    """Run a steady load and report TPS, latency percentiles and errors by class."""
    from rich.live import Live

    from chaoskit.inventory.loader import load_inventory
    from chaoskit.recorder import Recorder
    from chaoskit.workload.progress import live_line, summary, summary_table
    from chaoskit.workload.runner import LoadRunner, LoadSpec
    from chaoskit.workload.workloads import WORKLOADS, WorkloadParams

    try:
        seconds = _duration(duration, "--duration")
        timeout = _duration(op_timeout, "--op-timeout")
        if workload not in WORKLOADS:
            raise InputError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}",
                             source="command line", field="--workload")
        if rate is not None and rate <= 0:
            raise InputError("must be > 0", source="command line", field="--rate")
        inv = load_inventory(inventory)
        try:
            cl = inv.cluster(cluster)
        except KeyError as exc:
            raise InputError(str(exc.args[0]), source="command line", field="--cluster") from None
        spec = LoadSpec(workload=workload, workers=workers, rate=rate, processes=processes, op_timeout=timeout,
                        params=WorkloadParams(table_rows=table_rows))
        import time as _time

        recorder = Recorder(base=_time.time())
        runner = LoadRunner(cl, inv, spec, recorder)
        runner.setup()
    except ChaoskitError as exc:
        _fail(exc)
    except Exception as exc:  # a server that refuses the setup is an operational failure
        err.print(f"error: setting up workload {workload} on {cluster}: {exc}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    with Live(console=err, refresh_per_second=4, transient=True) as live:
        runner.run_for(seconds, on_tick=lambda r: live.update(live_line(r.recorder, r.t_start)))
    assert runner.t_start is not None and runner.t_end is not None
    s = summary(recorder, runner.t_start, min(runner.t_end, runner.t_start + seconds))
    out.print(summary_table(s, f"{workload} on {cluster}: {workers} workers"
                               + (f", open loop {rate:g}/s" if rate else ", closed loop")))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        recorder.write_timeline_csv(str(out_dir / "timeline.csv"), t0=runner.t_start)
        out.print(f"timeline: {out_dir / 'timeline.csv'}")


def main() -> None:
    try:
        app()
    except ChaoskitError as exc:  # anything a command did not map itself
        err.print(f"error: {exc}", highlight=False, markup=False)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
