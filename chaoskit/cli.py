"""The `chaoskit` command. Typer commands only: parse, call, map errors to exit codes.

Exit codes: 0 ok, 1 failure (or an SLO missed), 2 bad input (nothing touched), 3 aborted.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from chaoskit.errors import ChaoskitError, InputError, escaped
from chaoskit.faults.spec import KINDS as FAULT_KINDS  # the kinds' names for help (the registry loads SSH)
from chaoskit.lab.recipes import default_stacks, stack_names
from chaoskit.workload.spec import THROUGHPUT
from chaoskit.workload.workloads import WORKLOADS

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Failover and latency drills for replicated databases.")
lab_app = typer.Typer(no_args_is_help=True, help="The local lab (root, Linux).")
inventory_app = typer.Typer(no_args_is_help=True, help="Inspect an inventory.")
app.add_typer(lab_app, name="lab")
app.add_typer(inventory_app, name="inventory")
fault_app = typer.Typer(no_args_is_help=True, help="Inject, list and revert faults (journaled on the hosts).")
app.add_typer(fault_app, name="fault")

out = Console(width=None if sys.stdout.isatty() else 200)  # tables stay whole in files and pipes
err = Console(stderr=True)

InventoryOpt = Annotated[Path, typer.Option("-i", "--inventory", help="Inventory YAML (own or Ansible shape).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _fail(exc: ChaoskitError) -> None:
    err.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _inventory(path: Path, reach: bool = True) -> Any:
    """Load and validate an inventory; with `reach`, a lab inventory whose lab is not up stops
    here, before any packet is sent (commands validate their other inputs first, then reach)."""
    from chaoskit.inventory.loader import load_inventory
    from chaoskit.inventory.reach import refuse_unreachable_lab

    inv = load_inventory(path)
    if reach:
        refuse_unreachable_lab(inv)
    return inv


def _controller(evidence: bool = False) -> None:
    """This process starts helpers (they carry its pid and die with it); evidence is private."""
    from chaoskit.lifeline import mark_controller

    mark_controller()
    if evidence:
        os.umask(0o077)


@lab_app.command("up")
def lab_up(
    patroni: Annotated[str, typer.Option(help="Patroni to run: debian (package) or pypi.")] = "debian",
    stack: Annotated[str, typer.Option(help=f"Comma list of stacks: {', '.join(stack_names())} (added beside those "
                                            "already up).")] = ",".join(default_stacks()),
    keep_on_failure: Annotated[bool, typer.Option(help="Leave a failed lab in place to read its logs.")] = False,
) -> None:
    """Build the lab: namespaces, an sshd per host, etcd and a standalone PostgreSQL on dcs1, and the
    chosen stacks (default: Patroni + PostgreSQL 15 x3, a MariaDB GTID pair)."""
    from chaoskit.lab import manager

    if patroni not in ("debian", "pypi"):
        _fail(InputError("expected debian or pypi", source="command line", field="--patroni"))
    stacks = [s.strip() for s in stack.split(",") if s.strip()]
    try:
        with out.status("bringing the lab up..."):
            res = manager.up(patroni, stacks=stacks, keep_on_failure=keep_on_failure)
    except ChaoskitError as exc:
        _fail(exc)
    if res.already_up:
        out.print(f"lab already up and healthy (checked in {res.seconds:.1f}s): {', '.join(res.stacks)}")
    elif res.revived and not res.added:
        out.print(f"lab revived in {res.seconds:.1f}s (dead daemons started again, stacks repaired): "
                  f"{', '.join(res.stacks)}")
    else:
        note = " (cleaned leftovers of an earlier run first)" if res.cleaned_leftovers else ""
        if res.revive_failed:
            out.print(f"could not revive the lab in place, rebuilt it: {res.revive_failed}")
        out.print(f"lab up in {res.seconds:.1f}s{note}: added {', '.join(res.added) or 'the base'}; running "
                  f"{', '.join(res.stacks)}; inventory: inventories/lab.yaml")
    _print_lab_status(manager.status())


@lab_app.command("down")
def lab_down(
    stack: Annotated[str, typer.Option(help="Comma list of stacks to remove (the base and the others run on); "
                                            "default: the whole lab.")] = "",
) -> None:
    """Remove everything the lab made, or only some stacks."""
    from chaoskit.lab import manager

    stacks = [s.strip() for s in stack.split(",") if s.strip()]
    t0 = time.monotonic()
    try:
        if stacks:
            left = manager.down_stacks(stacks)
        else:
            manager.down()
    except ChaoskitError as exc:
        _fail(exc)
    seconds = time.monotonic() - t0
    if stacks:
        out.print(f"stacks down in {seconds:.1f}s: {', '.join(stacks)}; running {', '.join(left) or 'the base only'}")
    else:
        out.print(f"lab down in {seconds:.1f}s")


@lab_app.command("status")
def lab_status(as_json: JsonOpt = False) -> None:
    """Stacks up, hosts (SSH reachable), and every cluster's members with their roles (server and
    HA manager)."""
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
    table = Table(title=f"lab hosts (stacks: {', '.join(data['stacks']) or 'none'})")
    for col in ("host", "address", "stack", "ssh"):
        table.add_column(col)
    for h in data["hosts"]:
        table.add_row(h["name"], h["address"], h["stack"], "yes" if h["ssh"] else "[red]no[/red]")
    out.print(table)
    for cname, cl in data["clusters"].items():
        ct = Table(title=f"{cname} (ha: {cl['ha']})")
        for col in ("member", "server role", "manager role", "state", "lag_bytes"):
            ct.add_column(col)
        for m in cl["members"]:
            ct.add_row(m["name"], m["role"], str(m["manager_role"] or "-"), str(m["state"] or "-"),
                       str(m["lag_bytes"]))
        if cl.get("error"):
            out.print(f"{cname}: {cl['error']}", highlight=False)
        out.print(ct)


@inventory_app.command("check")
def inventory_check(inventory: InventoryOpt, as_json: JsonOpt = False) -> None:
    """Reach every host in parallel: SSH round-trip, clock offset, capabilities, cluster roles."""
    from chaoskit.topology.check import check_inventory, render_check

    try:
        inv = _inventory(inventory)
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
    workload: Annotated[str, typer.Option(help="|".join(WORKLOADS))] = THROUGHPUT.workload,
    workers: Annotated[int, typer.Option(min=1, max=4096, help="Concurrent workers (one connection each).")
                       ] = THROUGHPUT.workers,
    rate: Annotated[float | None, typer.Option(help="Open loop: total arrivals per second.")] = None,
    duration: Annotated[str, typer.Option(help="How long, e.g. 60s.")] = "60s",
    processes: Annotated[int | None, typer.Option(help="Worker processes (default: one per core).")] = None,
    op_timeout: Annotated[str, typer.Option(help="Per-op deadline.")] = f"{THROUGHPUT.op_timeout_s:g}s",
    table_rows: Annotated[int, typer.Option(min=10, help="Rows in update/read/oltp tables.")] = THROUGHPUT.table_rows,
    sql: Annotated[Path | None, typer.Option("--sql", help="Your own SQL file as the workload (README: 'Your own "
                                                           "SQL'); implies --workload sql.")] = None,
    isolation: Annotated[str | None, typer.Option(help="list-append: the level its transactions run and are "
                                                       "judged at (read committed | repeatable read | serializable)")
                         ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Directory for timeline.csv.")] = None,
    allow_production: Annotated[bool, typer.Option("--allow-production",
                                                   help="Allow a writing load on production-tagged targets.")] = False,
) -> None:
    """Run a steady load and report TPS, latency percentiles and errors by class (list-append: and
    the transactional anomalies in its history)."""
    import math

    from rich.live import Live

    from chaoskit.guard import cluster_hosts, refuse_production
    from chaoskit.recorder import Recorder
    from chaoskit.workload.progress import live_line, summary, summary_table
    from chaoskit.workload.runner import LoadRunner
    from chaoskit.workload.spec import LoadSpec
    from chaoskit.workload.workloads import WORKLOADS, WorkloadParams

    _controller()
    try:
        seconds = _duration(duration, "--duration")
        timeout = _duration(op_timeout, "--op-timeout")
        if workload not in WORKLOADS:
            raise InputError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}",
                             source="command line", field="--workload")
        script = None
        if sql is not None or workload == "sql":
            from chaoskit.workload.sql_script import load_script

            if sql is None:
                raise InputError("the sql workload runs your file: --sql FILE", source="command line",
                                 field="--workload")
            script, workload = load_script(sql), "sql"
        if rate is not None and not (math.isfinite(rate) and 0 < rate <= 1_000_000):
            raise InputError("must be a finite number in (0, 1000000]", source="command line", field="--rate")
        inv = _inventory(inventory)
        try:
            cl = inv.cluster(cluster)
        except KeyError as exc:
            raise InputError(str(exc.args[0]), source="command line", field="--cluster") from None
        # a script's setup (its DDL) writes too, whatever its transactions do
        writes = (script.writes or bool(script.setup)) if script is not None else WORKLOADS[workload].writes
        if writes:
            refuse_production(inv, cluster_hosts(inv, cluster), [cluster], allow=allow_production)
        if isolation is not None and workload != "list-append":
            raise InputError("only the list-append workload runs at a level of its own", source="command line",
                             field="--isolation")
        params = WorkloadParams(table_rows=table_rows, sql=script, isolation=isolation)
        refusal = WORKLOADS[workload].engine_refusal(cl.engine, params) or \
            WORKLOADS[workload].level_refusal(cl.engine, params)
        if refusal:
            raise InputError(escaped(refusal), source="command line", field="--isolation")
        if cl.read_route:  # the tables are set up through the writer, which a read route never reaches
            raise InputError(f"cluster {cluster} is a read route (read_route: true): load runs through the writer's "
                             "cluster; a playbook routes a group's reads through it (load.groups[].route)",
                             source="command line", field="--cluster")
        routed = WORKLOADS[workload].route_refusal(0, 1)
        if routed:
            raise InputError(escaped(routed) + " (a playbook's load.groups gives a group a read route)",
                             source="command line", field="--workload")
        spec = LoadSpec(workload=workload, workers=workers, rate=rate, processes=processes, op_timeout=timeout,
                        params=params)
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
        runner.run_for(seconds, on_tick=lambda r: live.update(Text(live_line(r.recorder, r.t_start))))
    assert runner.t_start is not None and runner.t_end is not None
    s = summary(recorder, runner.t_start, min(runner.t_end, runner.t_start + seconds))
    out.print(summary_table(s, f"{workload} on {cluster}: {workers} workers"
                               + (f", open loop {rate:g}/s" if rate else ", closed loop")))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        recorder.write_timeline_csv(str(out_dir / "timeline.csv"), t0=runner.t_start)
        out.print(f"timeline: {out_dir / 'timeline.csv'}")
    if recorder.txns.count:
        _judge_transactions(runner, recorder, out_dir)


def _judge_transactions(runner: Any, recorder: Any, out_dir: Path | None) -> None:
    """A list-append load's history read back and judged (and kept for Elle with --out)."""
    from chaoskit.db.base import Driver
    from chaoskit.elle.edn import to_edn
    from chaoskit.workload.checks import Judging
    from chaoskit.workload.kinds.list_append import Anomalies, history_of

    conn = runner.driver.connect_writer()
    try:
        truth = Anomalies.read(runner.workload, conn, None)
    finally:
        Driver.close_quietly(conn)
    judged = Anomalies.judge(truth, Judging(recorder, None, None, 1, None))
    out.print(f"anomalies: {judged['text']}", highlight=False, markup=False)
    if out_dir is not None:
        (out_dir / "list-append.edn").write_text(to_edn(history_of(recorder, truth)))
        out.print(f"history for Elle: {out_dir / 'list-append.edn'}")
    if not judged["valid"]:
        raise typer.Exit(1)


def _fault_spec(settings: list[str], **fields: object) -> Any:
    """The kind's spec from the named options and `--set FIELD=VALUE` (any field of the kind, the
    value read as one YAML scalar or flow collection); errors name the option as typed."""
    from pydantic import ValidationError

    from chaoskit.faults.spec import parse_fault
    from chaoskit.yamlsrc import parse_yaml

    data = {k: v for k, v in fields.items() if v not in (None, (), [])}
    flags = {k: "--" + k.replace("_", "-") for k in data}
    for item in settings:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise InputError(f"expected FIELD=VALUE, got {item[:60]!r}", source="command line", field="--set")
        try:  # the same hardened reader as playbooks and inventories (depth, aliases, sizes bounded)
            value = parse_yaml(text, "--set").data if text else ""
        except InputError as exc:
            raise InputError(f"not a YAML value: {exc.detail}", source="command line", field=f"--set {name}") from None
        if name in data:
            raise InputError(f"{name} is given twice", source="command line", field=f"--set {name}")
        data[name], flags[name] = value, f"--set {name}"
    try:
        return parse_fault(data)
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        loc = [p for p in e["loc"] if p != data.get("kind")]
        name = flags.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-")) if loc else "--kind"
        msg = "not an option of this fault kind" if e["type"] == "extra_forbidden" else \
            e["msg"].removeprefix("Value error, ")
        raise InputError(msg, source="command line", field=name) from None


@fault_app.command("kinds")
def fault_kinds(as_json: JsonOpt = False) -> None:
    """Every fault kind: its family, what its host needs, and its fields with their defaults (each is
    settable in a playbook step and with `fault inject --set FIELD=VALUE`)."""
    from chaoskit.faults.registry import REGISTRY

    rows: list[dict[str, Any]] = []
    for kind in REGISTRY.values():
        fields = {name: "required" if f.is_required() else f.get_default(call_default_factory=True)
                  for name, f in kind.spec.model_fields.items() if name != "kind"}
        rows.append({"kind": kind.name, "family": kind.family, "needs": sorted(kind.needs), "fields": fields})
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
        return
    table = Table("kind", "family", "host needs", "fields (default)")
    for r in rows:
        table.add_row(r["kind"], r["family"], ", ".join(r["needs"]),
                      Text(", ".join(f"{k}" if v is None else f"{k} ({v})" for k, v in r["fields"].items())))
    out.print(table)


@fault_app.command("inject")
def fault_inject(
    inventory: InventoryOpt,
    kind: Annotated[str, typer.Option(help="|".join(FAULT_KINDS) + " (each kind's fields: chaoskit fault kinds)")],
    target: Annotated[str, typer.Option(help="host, or role:primary|replica|sync_standby|any[@one|@all|@minority]")],
    cluster: Annotated[str | None, typer.Option(help="Cluster for role targets and process lookup.")] = None,
    ttl: Annotated[str, typer.Option(help="The host reverts the fault itself after this long at the latest.")] = "30s",
    duration: Annotated[str | None, typer.Option(help="Planned length: the host reverts it then (+2 s).")] = None,
    processes: Annotated[str | None, typer.Option(help="Comma list of member processes (patroni,postgres).")] = None,
    signal: Annotated[str | None, typer.Option(help="Signal for kill.")] = None,
    peers: Annotated[str | None, typer.Option(help="Comma list of hosts/roles the network fault applies to.")] = None,
    peer_port: Annotated[int | None, typer.Option(help="latency/proxy: the peer's port.")] = None,
    direction: Annotated[str | None, typer.Option(help="partition/loss: both|in|out")] = None,
    action: Annotated[str | None, typer.Option(help="partition: drop|reject")] = None,
    interface: Annotated[str | None, typer.Option(help="Interface for tc faults.")] = None,
    delay_ms: Annotated[float | None, typer.Option(help="netem/latency/proxy delay.")] = None,
    jitter_ms: Annotated[float | None, typer.Option(help="netem/latency/proxy jitter.")] = None,
    loss_pct: Annotated[float | None, typer.Option(help="loss / netem loss percent.")] = None,
    rate: Annotated[str | None, typer.Option(help="bandwidth/proxy rate, e.g. 1mbit.")] = None,
    cpu: Annotated[int | None, typer.Option(help="stress: CPU workers.")] = None,
    io: Annotated[int | None, typer.Option(help="stress: IO workers.")] = None,
    field: Annotated[list[str] | None, typer.Option("--set", help="Any field of the kind, as FIELD=VALUE (repeat; "
                                                    "YAML values: --set down=true --set corrupt_pct=5).")] = None,
    allow_production: Annotated[bool, typer.Option("--allow-production", help="Allow production-tagged hosts.")
                                ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the staging script per host; touch nothing.")
                       ] = False,
) -> None:
    """Inject one fault and exit, leaving it under its TTL (revert with `fault revert` or `recover`)."""
    from chaoskit.faults.manager import FaultManager
    from chaoskit.faults.targets import validate_target
    from chaoskit.guard import refuse_production
    from chaoskit.inventory.reach import refuse_unreachable_lab

    try:
        inv = _inventory(inventory, reach=False)
        spec = _fault_spec(field or [], kind=kind, target=target, cluster=cluster, ttl=ttl, duration=duration,
                           signal=signal, processes=tuple(p for p in (processes or "").split(",") if p),
                           peers=tuple(p for p in (peers or "").split(",") if p), peer_port=peer_port,
                           direction=direction, action=action, interface=interface, delay_ms=delay_ms,
                           jitter_ms=jitter_ms, loss_pct=loss_pct, rate=rate, cpu_workers=cpu, io_workers=io)
        validate_target(spec, inv)
        fm = FaultManager(inv)
        try:
            fm.rehearse(spec)  # what the planner would refuse from spec and inventory, before any host
            refuse_unreachable_lab(inv)
            hosts = fm.resolve(spec)
            refuse_production(inv, hosts, [spec.cluster] if spec.cluster else [], allow=allow_production)
            if dry_run:
                from chaoskit.drill.dryrun import planned_lines

                fault_id, planned = fm.plan(spec, hosts=hosts)
                for p in planned:
                    sys.stdout.write("".join(f"{line}\n" for line in planned_lines(p.host, f"fault {fault_id}",
                                                                                   fault_id, p.files)))
                return
            faults = [fm.trigger(st) for st in fm.stage(spec, hosts=hosts)]
        finally:
            fm.close()
    except ChaoskitError as exc:
        _fail(exc)
    for f in faults:
        ends = f" (planned end {f.planned_end - f.t_effect:g}s after that)" if f.planned_end else ""
        out.print(f"{f.id} {f.kind} on {f.host}: in effect at {f.t_effect:.3f} "
                  f"(±{f.offset_uncertainty_s * 1000:.1f} ms)"
                  f"{ends}; the host reverts it itself after {spec.ttl:g}s at the latest", highlight=False)


def _with_faults(inventory: Path | Any, fn: Any) -> Any:
    """Load the inventory (unless given loaded), run fn(FaultManager), always close; input errors exit 2."""
    from chaoskit.faults.manager import FaultManager

    try:
        fm = FaultManager(_inventory(inventory) if isinstance(inventory, Path) else inventory)
        try:
            return fn(fm)
        finally:
            fm.close()
    except ChaoskitError as exc:
        _fail(exc)


@fault_app.command("list")
def fault_list(inventory: InventoryOpt, as_json: JsonOpt = False) -> None:
    """Every journaled fault on every host, with whether it is in effect and its time left."""
    data = _with_faults(inventory, lambda fm: fm.journaled())
    rows = [e for entries in data.values() if not isinstance(entries, BaseException) for e in entries]
    errors = {h: str(e) for h, e in data.items() if isinstance(e, BaseException)}
    if as_json:
        sys.stdout.write(json.dumps({"faults": rows, "unreachable": errors}) + "\n")
        return
    table = Table(title="journaled faults")
    for col in ("id", "host", "kind", "target", "state", "in effect", "reverts in"):
        table.add_column(col)
    for r in rows:
        active = {True: "yes", False: "no"}.get(r["active"], "UNKNOWN")
        table.add_row(r["id"], r.get("host", "?"), r.get("kind", "?"), r.get("target", "?"), r.get("state", "?"),
                      active, f"{r['remaining_s']}s")
    out.print(table)
    for host, e in errors.items():
        err.print(f"unreachable {host}: {e}", highlight=False)


@fault_app.command("revert")
def fault_revert(inventory: InventoryOpt, fault_id: Annotated[str, typer.Argument(help="Fault id.")]) -> None:
    """Revert one journaled fault wherever it is, and verify it is gone."""
    from chaoskit.validation import is_fault_id

    if not is_fault_id(fault_id):
        _fail(InputError("not a fault id (12 hex digits, as `fault list` shows them)", source="command line",
                         field="ID"))
    result = _with_faults(inventory, lambda fm: fm.revert_by_id(fault_id))
    if not result:
        _fail(InputError(f"no host has a journaled fault {fault_id}", source="command line", field="ID"))
    for host, what in result.items():
        out.print(f"{host}: {what}", highlight=False)
    if any(not v.startswith(("reverted", "already reverted")) for v in result.values()):
        raise typer.Exit(1)


@app.command("recover")
def recover(
    inventory: InventoryOpt,
    force: Annotated[bool, typer.Option("--force", help="Also revert faults of a controller still running here.")
                     ] = False,
) -> None:
    """Revert every journaled fault on every host, restore every journaled HA setting, and end the
    load agents left on loader hosts (after a crashed controller, or to be sure). What belongs to a
    drill still running on this machine is left to it unless --force."""
    from chaoskit.ha import settings as ha_settings

    try:
        inv = _inventory(inventory)  # once, for the faults and the load agents
    except ChaoskitError as exc:
        _fail(exc)
    report = _with_faults(inv, lambda fm: fm.recover(force=force))
    failed = False
    for host, done in report.items():
        if "error" in done:
            failed = True
            err.print(f"{host}: unreachable: {done['error']}", highlight=False)
            continue
        for fid, what in done.items():
            failed |= not what.startswith(("reverted", "skipped"))
            out.print(f"{host}: {fid} {what}", highlight=False)
    for sid, what in ha_settings.recover(force=force).items():
        failed |= what.startswith("failed")
        out.print(f"settings {sid}: {what}", highlight=False)
    failed |= _recover_agents(inv, force)
    out.print("recover: done" + (" with failures" if failed else ""))
    if failed:
        raise typer.Exit(1)


def _recover_agents(inv: Any, force: bool) -> bool:
    """End the load agents left on the inventory's loader hosts; whether any could not be."""
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.workload.leftovers import recover_agents

    failed = False
    with RemotePool(inv) as pool:
        for host, done in recover_agents(inv, pool, force=force).items():
            if "error" in done:
                failed = True
                err.print(f"{host}: unreachable: {done['error']}", highlight=False)
                continue
            for directory, what in done.items():
                failed |= what.startswith("failed")
                out.print(f"{host}: agent {directory} {what}", highlight=False, markup=False)
    return failed


@app.command("validate")
def validate(playbook: Annotated[Path, typer.Argument(help="Playbook YAML.")], inventory: InventoryOpt) -> None:
    """Check a playbook (a drill, or an experiment: `kind: sweep | ramp | compare`) against an
    inventory without touching any host."""
    from chaoskit.inventory.loader import load_inventory
    from chaoskit.playbook.experiment import is_experiment, load_experiment
    from chaoskit.playbook.loader import load_playbook

    try:
        inv = load_inventory(inventory)
        if is_experiment(playbook):
            exp = load_experiment(playbook, inv)
            grid = "; ".join(f"{k} {', '.join(str(x) for x in v)}"
                             for k, v in exp.grid.model_dump(exclude_none=True).items() if v and tuple(v) != (0.0,))
            on = ", ".join(dict.fromkeys((exp.cluster, *exp.targets)))
            out.print(f"{playbook}: ok ({exp.name}: {exp.kind} on {on}; {grid})", highlight=False, markup=False)
            return
        pb = load_playbook(playbook, inv).playbook
    except ChaoskitError as exc:
        _fail(exc)
    out.print(f"{playbook}: ok ({pb.name}: {len(pb.steps)} steps over {pb.duration:g}s on cluster {pb.cluster})",
              highlight=False)
    from chaoskit.faults.targets import fault_hosts

    hosts = {m.host for m in inv.clusters[pb.cluster].members} | set(fault_hosts(pb.steps, inv))
    commands = sorted(f"{host}.{name}" for host in hosts for name, ref in inv.processes_on(host).items()
                      if ref.start or ref.stop)
    if commands:
        out.print(f"note: the start/stop commands of {', '.join(commands)} are shell commands from {inventory}, run "
                  "as root on their hosts as written (code by design: trust the inventory like a script)",
                  highlight=False)
    from chaoskit.workload.engine import engine
    from chaoskit.workload.tool_group import describe_tool

    sql = pb.load.workload_params().sql
    if sql is not None and pb.load.builtin_clients:
        from chaoskit.workload.sql_script import describe

        out.print(f"load workload {sql.path} runs as written on the writer of cluster {pb.cluster} (your SQL: code "
                  "by design):", highlight=False, markup=False)
        for line in describe(sql):
            out.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    placed = {g.group_name: (g.loader_hosts(inv)[:1] if not g.where.live else
                             [f"the first whose Ray node matches {g.where.said()}"])
              for g in pb.load.groups or () if g.where is not None}
    for group in pb.load.to_spec().client_groups():
        if engine(group.tool).external():
            where = (f"on loader host {placed[group.name][0]} (its tables made from this machine first)"
                     if placed.get(group.name) else "on this machine")
            out.print(f"load group {group.name} runs {group.tool} {where}:", highlight=False)
            for line in describe_tool(group, inv.clusters[group.route or pb.cluster]):
                out.print(f"  {line}", highlight=False, soft_wrap=True)


@app.command("run")
def run(
    playbook: Annotated[Path, typer.Argument(help="Playbook YAML.")],
    inventory: InventoryOpt,
    out_root: Annotated[Path, typer.Option("--out", help="Where run directories go.")] = Path("reports"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the plan; touch nothing.")] = False,
    allow_production: Annotated[bool, typer.Option("--allow-production", help="Allow production-tagged targets.")
                                ] = False,
    sign_key: Annotated[Path | None, typer.Option("--sign-key", envvar="CHAOSKIT_SIGN_KEY",
                                                  help="SSH private key: sign manifest.json (ssh-keygen -Y sign, "
                                                  "namespace chaoskit); signing is the default where "
                                                  "CHAOSKIT_SIGN_KEY names a key.")] = None,
    operator: Annotated[str | None, typer.Option("--operator", help="Who ran it (default user@host).")] = None,
    participant: Annotated[list[str] | None, typer.Option("--participant", help="Who took part (repeat).")] = None,
    change_ref: Annotated[str | None, typer.Option("--change-ref", help="Change / ticket reference.")] = None,
    no_pdf: Annotated[bool, typer.Option("--no-pdf", help="Write no report.pdf (no WeasyPrint/pango needed; "
                                         "`chaoskit report` makes it later from run.json).")] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Draw no plots (the report has none).")] = False,
) -> None:
    """Run a drill and write its run directory. Exit 0: SLOs held; 1: an SLO or check failed; 3: aborted."""
    from chaoskit.inventory.reach import refuse_unreachable_lab
    from chaoskit.playbook.loader import load_playbook

    _controller(evidence=True)
    try:
        inv = _inventory(inventory, reach=False)
        loaded = load_playbook(playbook, inv)
        pb = loaded.playbook
        audit = _audit(pb, operator, participant, change_ref)
        _check_sign_key(sign_key)  # a key named by --sign-key or CHAOSKIT_SIGN_KEY must exist, dry run or not
        if dry_run:  # plain lines on stdout: scripts are shown as they are, never re-wrapped
            from chaoskit.drill.dryrun import dry_run_lines

            sys.stdout.write("\n".join(dry_run_lines(pb, inv)) + "\n")
            return
        refuse_unreachable_lab(inv)
    except ChaoskitError as exc:
        _fail(exc)
    sealed = _drill_once(loaded, inv, playbook, inventory, out_root, allow_production, sign_key, audit,
                         _outputs(no_pdf, no_plots))
    _said(sealed)
    if sealed.aborted or sealed.incomplete:
        raise typer.Exit(3)
    raise typer.Exit(0 if (sealed.evidence.get("results") or {}).get("verdict") is True else 1)


def _said(sealed: Any) -> None:
    """A drill's summary on the terminal; an incomplete run's one line on stderr (its traceback is in
    the run directory, never here)."""
    from chaoskit.report.summary import print_drill_summary

    if sealed.incomplete:
        with contextlib.suppress(Exception):  # what is known of an incomplete run, as far as it can be said
            print_drill_summary(out, sealed.evidence, sealed.path)
        _say_incomplete(sealed.incomplete, sealed.path)
        return
    print_drill_summary(out, sealed.evidence, sealed.path)


def _say_incomplete(line: str, run_dir: Path) -> None:
    """An incomplete run's one line on stderr, for a drill, an experiment or an import alike."""
    from chaoskit.incomplete import ERROR_FILE

    err.print(f"incomplete: {line} (run directory {run_dir}, sealed; traceback in {ERROR_FILE})",
              highlight=False, markup=False, soft_wrap=True)


def _audit(pb: Any, operator: str | None, participants: list[str] | None, change_ref: str | None) -> Any:
    """The playbook's `evidence:` with what the command line adds (validated like the playbook)."""
    from pydantic import ValidationError

    from chaoskit.playbook.models import Audit

    data = pb.evidence.model_dump()
    if operator is not None:
        data["operator"] = operator
    if participants:
        data["participants"] = (*data["participants"], *participants)
    if change_ref is not None:
        data["change_ref"] = change_ref
    try:
        return Audit.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        msg = str(e["msg"]).removeprefix("Value error, ")
        where = str(e["loc"][0]) if e["loc"] else msg.split("[", 1)[0].split(":", 1)[0]
        field = {"operator": "--operator", "participants": "--participant", "change_ref": "--change-ref"}.get(
            where, f"evidence.{where}")
        raise InputError(msg, source="command line", field=field) from None


def _outputs(no_pdf: bool, no_plots: bool) -> Any:
    from chaoskit.report.writer import Outputs

    return Outputs(pdf=not no_pdf, plots=not no_plots)


def _drill_once(loaded: Any, inv: Any, playbook: Path, inventory: Path, out_root: Path, allow_production: bool,
                sign_key: Path | None, audit: Any = None, outputs: Any = None) -> Any:
    """One drill into a new, sealed run directory (`chaoskit.drill.session`), with the live view."""
    import time as _t

    from rich.live import Live

    from chaoskit.drill.session import drill_into
    from chaoskit.playbook.record import DrillInputs

    inputs = DrillInputs(loaded.playbook, inv, str(playbook), str(inventory), playbook_sha256=loaded.sha256,
                         allow_production=allow_production, audit=audit)
    with Live(console=err, refresh_per_second=4, transient=True) as live:
        def progress(record: Any, roles: dict[str, str], w: dict) -> None:
            marks = [e for e in record.events_now() if e["kind"] in ("fault_injected", "fault_reverted", "action")]
            last = f"{marks[-1]['kind']} {marks[-1].get('host') or marks[-1].get('member') or ''}" if marks else "-"
            # plain text, never rich markup, control characters escaped: names come from input
            live.update(Text(escaped(f"t={_t.time() - record.t0:6.1f}s  tps={w['tps']:7.0f}  p99={w['p99_ms']:7.1f} "
                                     f"ms  errors={w['fail'] + w['info']}  roles={roles}  last: {last}")))

        try:
            return drill_into(out_root, inputs, sign_key=sign_key, progress=progress,
                              outputs=outputs or _outputs(no_pdf=False, no_plots=False))
        except ChaoskitError as exc:
            live.stop()
            _fail(exc)


@app.command("campaign")
def campaign(
    playbook: Annotated[Path, typer.Argument(help="Playbook YAML.")],
    inventory: InventoryOpt,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=1000, help="How many runs.")] = 3,
    out_root: Annotated[Path, typer.Option("--out", help="Where the campaign directory goes.")] = Path("reports"),
    settle: Annotated[str, typer.Option("--settle", help="How long to wait for a healthy cluster between runs.")
                      ] = "120s",
    allow_production: Annotated[bool, typer.Option("--allow-production", help="Allow production-tagged targets.")
                                ] = False,
    sign_key: Annotated[Path | None, typer.Option("--sign-key", envvar="CHAOSKIT_SIGN_KEY",
                                                  help="SSH private key to sign each run (default: "
                                                  "CHAOSKIT_SIGN_KEY).")] = None,
    no_pdf: Annotated[bool, typer.Option("--no-pdf", help="Write no report.pdf (no WeasyPrint/pango needed; "
                                         "`chaoskit report` makes it later from run.json).")] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Draw no plots (the report has none).")] = False,
) -> None:
    """Run one drill N times (waiting for a healthy cluster between runs) and report the RTO/RPO
    distribution: min / median / p95 / max, pass rate, a plot. Exit 0 all passed, 1 not, 3 aborted."""
    import time as _t

    from chaoskit.db.roles import observed
    from chaoskit.drill.campaign import run_campaign
    from chaoskit.inventory.reach import refuse_unreachable_lab
    from chaoskit.playbook.loader import load_playbook
    from chaoskit.report.campaign import summarise, write_campaign
    from chaoskit.report.rundir import run_dir_name
    from chaoskit.report.vocabulary import shown, verdict_word
    from chaoskit.topology.roles import writer_roles
    from chaoskit.units import parse_duration

    _controller(evidence=True)
    try:
        try:
            settle_s = parse_duration(settle)
        except (ValueError, TypeError):
            raise InputError(f"not a duration: {settle[:40]!r}", source="command line", field="--settle") from None
        inv = _inventory(inventory, reach=False)
        loaded = load_playbook(playbook, inv)
        refuse_unreachable_lab(inv)
        _check_sign_key(sign_key)
        root = out_root / f"{run_dir_name(loaded.playbook.name, _t.time())}-campaign"
        root.mkdir(parents=True, mode=0o700)
    except (ChaoskitError, OSError) as exc:
        _fail(exc if isinstance(exc, ChaoskitError) else InputError(str(exc), source=str(out_root), field="--out"))
    cluster = observed(inv.clusters[loaded.playbook.cluster], inv)  # a managed service: its endpoints

    def said(i: int, sealed: Any, r: dict[str, Any]) -> None:
        if sealed.incomplete:
            err.print(f"run {i + 1}: incomplete: {sealed.incomplete} (run directory {sealed.path}, sealed)",
                      highlight=False, markup=False, soft_wrap=True)
        out.print(f"run {i + 1}/{repeat}: {verdict_word(r['verdict'])}, all clients back "
                  f"{shown('rto_all_clients_s', r['rto_all_clients_s'])}, {shown('lost_acknowledged', r['lost'])} lost",
                  highlight=False)

    done = run_campaign(repeat, lambda: _drill_once(loaded, inv, playbook, inventory, root, allow_production, sign_key,
                                                    outputs=_outputs(no_pdf, no_plots)),
                        lambda: writer_roles(cluster, inv), len(cluster.members), settle_s, said)
    if done.unsettled_after is not None:
        err.print(f"the cluster was not healthy within {settle} after run {done.unsettled_after}: campaign stopped",
                  highlight=False)
    runs, aborted = done.runs, done.aborted
    summary = summarise(loaded.playbook.name, runs)
    write_campaign(summary, root)
    _seal(root, None)
    d = summary["rto_all_clients_s"]
    out.print(f"{summary['passed']} of {len(runs)} runs passed; all clients back min {d.get('min')} / median "
              f"{d.get('median')} / p95 {d.get('p95')} / max {d.get('max')} s; report: {root / 'campaign.html'}",
              highlight=False)
    if aborted:
        raise typer.Exit(3)
    raise typer.Exit(0 if summary["passed"] == repeat else 1)


experiment_app = typer.Typer(no_args_is_help=True, help="Sweeps, load ramps, comparisons.")
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("run")
def experiment_run(
    experiment: Annotated[Path, typer.Argument(help="Experiment YAML (kind: sweep | ramp | compare).")],
    inventory: InventoryOpt,
    out_root: Annotated[Path, typer.Option("--out", help="Where run directories go.")] = Path("reports"),
    allow_production: Annotated[bool, typer.Option("--allow-production", help="Allow production-tagged targets.")
                                ] = False,
) -> None:
    """Run an experiment cell by cell (progress with ETA) and write its run directory."""
    import time as _t

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from chaoskit.drill.experiment import check_required, run_experiment
    from chaoskit.guard import cluster_hosts, refuse_production
    from chaoskit.incomplete import Failures
    from chaoskit.inventory.reach import refuse_unreachable_lab
    from chaoskit.playbook.experiment import load_experiment
    from chaoskit.report.experiment import write_experiment
    from chaoskit.report.rundir import RunDirectory

    _controller(evidence=True)
    try:
        inv = _inventory(inventory, reach=False)
        exp = load_experiment(experiment, inv)
        hosts = [h for c in (exp.cluster, *exp.targets) for h in cluster_hosts(inv, c)]
        refuse_production(inv, hosts, [exp.cluster, *exp.targets], allow=allow_production)
        refuse_unreachable_lab(inv)
        check_required(exp, inv)  # refused with the setting named, before a run directory exists
        rd = RunDirectory.create(out_root, exp.name, _t.time())
        from chaoskit.drill.experiment import MANAGED_NOTE

        for name in dict.fromkeys((exp.cluster, *exp.targets)):
            if inv.clusters[name].managed:
                err.print(f"{name}: {MANAGED_NOTE}", markup=False, highlight=False)
    except ChaoskitError as exc:
        _fail(exc)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task("cells", total=None)

        def progress(i: int, n: int, eta: float, what: str) -> None:
            bar.update(task, total=n, completed=i, description=what)

        try:
            result = run_experiment(exp, inv, str(inventory), progress, tool_dir=rd.path / "tools")
        except BaseException as exc:  # outside the runner's own guards: what is known is still sealed
            failures = Failures()
            failures.add("experiment", exc)
            result = {"experiment": exp.model_dump(mode="json"), "cells": [], "rows": [], "failures": failures,
                      "aborted": "interrupted" if isinstance(exc, KeyboardInterrupt) else None}
    result["allow_production"] = allow_production
    run_dir = rd.path
    rd.close()
    try:
        written = write_experiment(result, run_dir)
    except BaseException as exc:  # outside the writing's own stages
        from chaoskit.report.writer import write_incomplete

        failures = Failures()
        failures.add("writing the run directory", exc)
        written = write_incomplete(run_dir, {"name": exp.name, **{k: v for k, v in result.items() if k != "failures"}},
                                   failures, "Experiment")
    _seal(run_dir, None)
    if written.get("incomplete"):
        _say_incomplete(written["incomplete"], run_dir)
        raise typer.Exit(3)
    table = Table(title=f"{exp.name} ({exp.kind})")
    cols = [k for k in result["cells"][0] if k not in ("tps_min", "tps_max", "client_saturated_why")] \
        if result["cells"] else []
    for c in cols:
        table.add_column(c)
    for c in result["cells"]:
        table.add_row(*[("—" if c.get(k) is None else f"{c[k]:.2f}" if isinstance(c[k], float) else str(c[k]))
                        for k in cols])
    out.print(table)
    for c in result["cells"]:
        if c.get("client_saturated"):
            where = f"{c.get('target', '')} {c['workload']} x{c['workers']}".strip()
            out.print(f"client-bound: {where}: {c['client_saturated_why']} (the knee ignores this cell)",
                      highlight=False)
    for wl, knee in (result.get("knees") or ({"": result["knee"]} if result.get("knee") else {})).items():
        n = knee["recommended_workers"]
        out.print(f"knee{' (' + wl + ')' if wl else ''}: {knee['shape']}; recommended workers: "
                  f"{'none' if n is None else n}", highlight=False)
    for line in result.get("headlines") or []:
        out.print(f"- {line}", highlight=False)
    for line in result.get("conditions") or []:
        out.print(f"note: {line}", highlight=False)
    out.print(f"report: {run_dir / 'report.html'}")
    if result.get("aborted"):
        err.print(f"aborted: {result['aborted']}", highlight=False)
        raise typer.Exit(3)
    if result.get("settings_restore_errors"):
        err.print(f"settings not restored (its dead-man and `chaoskit recover` retry): "
                  f"{result['settings_restore_errors']}", highlight=False)
        raise typer.Exit(1)


loaders_app = typer.Typer(no_args_is_help=True, help="The inventory's loader hosts and their Ray cluster.")
app.add_typer(loaders_app, name="loaders")


def _plane(inventory: Path, verb: str) -> None:
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.workload import ray_plane

    try:
        inv = _inventory(inventory)
    except ChaoskitError as exc:
        _fail(exc)
    if inv.loaders is None or inv.loaders.ray is None:
        _fail(InputError("the inventory has no loaders.ray: section (agents go over SSH: nothing to start)",
                         source=str(inventory), field="loaders.ray"))
    try:
        with RemotePool(inv) as pool:
            report = ray_plane.up(inv, pool) if verb == "up" else ray_plane.down(inv, pool)
    except ray_plane.RayUnavailable as exc:
        err.print(f"loaders {verb}: {exc}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    done, idle = ("started", "already running") if verb == "up" else ("stopped", "not running")
    head = "head " + (done if report.head_started else idle)
    nodes = ", ".join(f"{n.host} {done if n.started else idle}" for n in report.nodes)
    out.print(f"loaders {verb} in {report.seconds:.1f}s: {head} (pid {report.head_pid or '-'}); {nodes}",
              highlight=False)


@loaders_app.command("up")
def loaders_up(inventory: InventoryOpt) -> None:
    """Start the Ray cluster the loaders' agents are placed through: its head on this node, a node
    on every loader host (each checked first: the pinned Ray, this chaoskit). Exit 1 when one fails."""
    _plane(inventory, "up")


@loaders_app.command("down")
def loaders_down(inventory: InventoryOpt) -> None:
    """Stop the loaders' Ray cluster by its pid files (never `ray stop`)."""
    _plane(inventory, "down")


@loaders_app.command("status")
def loaders_status(inventory: InventoryOpt, as_json: JsonOpt = False) -> None:
    """Each loader host: its zone, the chaoskit and Python its python runs, its clock against this
    node's, and whether it can take this controller's agents (exit 1 when one cannot)."""
    from chaoskit import __version__
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.workload.ssh_loader import host_status

    try:
        inv = _inventory(inventory)
    except ChaoskitError as exc:
        _fail(exc)
    if inv.loaders is None:
        _fail(InputError("the inventory has no loaders: section", source=str(inventory), field="loaders"))
    with RemotePool(inv) as pool:
        statuses = [host_status(pool.get(h), inv.loaders.python) for h in inv.loaders.hosts]
    plane = inv.loaders.ray
    ray_nodes: dict[str, Any] = {}
    ray_why = None
    if plane is not None:
        from chaoskit.workload import ray_plane

        try:
            ray_nodes = {n.address: n for n in ray_plane.cluster_nodes(plane) if n.alive}
        except ray_plane.RayUnavailable as exc:
            ray_why = str(exc)
    pinned = None if plane is None else ray_plane.RAY_VERSION
    rows = [{"host": st.host, "az": inv.hosts[st.host].tags.get("az"), "chaoskit": st.chaoskit,
             "python": st.python_version, "ray": st.ray,
             "ray_node": None if plane is None else inv.hosts[st.host].address in ray_nodes,
             "clock_offset_ms": None if st.offset is None else round(st.offset.offset_s * 1000, 3),
             "clock_uncertainty_ms": None if st.offset is None else round(st.offset.uncertainty_s * 1000, 3),
             "refused": st.refusal(__version__, pinned) or (
                 None if plane is None or inv.hosts[st.host].address in ray_nodes else
                 f"loader host {st.host}: not a live node of the Ray cluster at {plane.gcs}"
                 + (f" ({ray_why})" if ray_why else ""))} for st in statuses]
    if as_json:
        sys.stdout.write(json.dumps({"controller_chaoskit": __version__, "ray": None if plane is None else
                                     {"gcs": plane.gcs, "pinned": pinned, "reachable": ray_why is None},
                                     "loaders": rows}) + "\n")
    else:
        title = f"loader hosts (controller: chaoskit {__version__}" + \
            (f"; Ray {pinned} at {plane.gcs})" if plane is not None else ")")
        table = Table(title=title)
        for col in ("host", "az", "chaoskit", "python", "ray", "ray node", "clock offset", "ready"):
            table.add_column(col)
        for r in rows:
            clock = "-" if r["clock_offset_ms"] is None else \
                f"{r['clock_offset_ms']:+.2f} ms +/- {r['clock_uncertainty_ms']:.2f}"
            node = "-" if r["ray_node"] is None else "alive" if r["ray_node"] else "NO"
            table.add_row(r["host"], r["az"] or "-", r["chaoskit"] or "-", r["python"] or "-", r["ray"] or "-",
                          node, clock, "yes" if r["refused"] is None else "NO")
        out.print(table)
        for r in rows:
            if r["refused"]:
                err.print(r["refused"], highlight=False, markup=False)
    if any(r["refused"] for r in rows):
        raise typer.Exit(1)


import_app = typer.Typer(no_args_is_help=True, help="Read a run made elsewhere into a run directory.")
app.add_typer(import_app, name="import")


@import_app.command("jtl")
def import_jtl(
    jtl: Annotated[Path, typer.Argument(help="JMeter's results file (CSV, with its header line).")],
    fault_at: Annotated[list[str] | None, typer.Option("--fault-at", help="A fault's instant, UTC, e.g. "
                                                       "2026-12-03T19:02:36.298Z (repeat for several).")] = None,
    faults: Annotated[Path | None, typer.Option("--faults", help="A chaoskit run's events.jsonl: its "
                                                "fault_injected events are the instants.")] = None,
    out_root: Annotated[Path, typer.Option("--out", help="Where the run directory goes.")] = Path("reports"),
    name: Annotated[str, typer.Option(help="The run's name.")] = "jmeter-import",
    timestamp: Annotated[str, typer.Option(help="What the file's timeStamp is: start (JMeter's default) or end.")
                         ] = "start",
    reads: Annotated[bool, typer.Option("--reads", help="The samples only read (a failure is never an unknown "
                                        "commit).")] = False,
    engine: Annotated[str | None, typer.Option(help="postgres | mysql: whose words class a failure without an "
                                               "SQLSTATE (default: either).")] = None,
    warmup: Annotated[str, typer.Option(help="Start of the file left out of the baseline.")] = "5s",
    stall: Annotated[str, typer.Option(help="An ok sample longer than this was an outage for its thread (as a "
                                       "drill counts a stall; a drill's default).")] = "2.25s",
) -> None:
    """A JMeter run made elsewhere becomes a run directory: timeline, throughput dips, outage
    figures (RTO first client / all clients, per thread) against the given fault instants, report."""
    from chaoskit.imports.jtl import GivenFault, ImportSettings, faults_from_events, import_jtl, parse_instant
    from chaoskit.validation import Name

    try:
        given: list[GivenFault] = [GivenFault(f"fault{i}", parse_instant(t)) for i, t in enumerate(fault_at or [])]
        if faults is not None:
            given += faults_from_events(faults)
        if not given:
            raise InputError("give the fault instants: --fault-at UTC (repeatable) or --faults events.jsonl",
                             source="command line", field="--fault-at")
        if timestamp not in ("start", "end"):
            raise InputError(f"{timestamp[:20]!r}: start or end", source="command line", field="--timestamp")
        if engine not in (None, "postgres", "mysql"):
            raise InputError(f"{engine[:20]!r}: postgres or mysql", source="command line", field="--engine")
        from pydantic import TypeAdapter, ValidationError

        try:
            TypeAdapter(Name).validate_python(name)
        except ValidationError:
            raise InputError(f"{name[:40]!r} is not a name (letters, digits, _ . -)", source="command line",
                             field="--name") from None
        settings = ImportSettings(name=name, timestamp=timestamp, writes=not reads, engine=engine,
                                  warmup_s=_duration(warmup, "--warmup"), stall_s=_duration(stall, "--stall"))
        path, incomplete = import_jtl(jtl, given, out_root, settings)
    except ChaoskitError as exc:
        _fail(exc)
    _seal(path, None)
    if incomplete:
        _say_incomplete(incomplete, path)
        raise typer.Exit(3)
    ev = json.loads((path / "run.json").read_text())
    for f in ev["results"]["faults"]:
        rto = f.get("rto_first_client_s")
        every = f.get("rto_all_clients_s")
        out.print(f"{f['id']} at {f['t_fault']:.6f}: " + (
            "no write outage" if not f.get("outage") else
            f"RTO first client back {rto:.2f} s, all clients back "
            + (f"{every:.2f} s" if every is not None else "not all back") + f" ({f['workers_in_outage']} clients)"),
            highlight=False, markup=False)
    out.print(f"{ev['source']['samples']:,} samples, {len(ev['source']['threads'])} threads; RPO not measured "
              f"(JMeter does not say which writes it had acknowledged); report: {path / 'report.html'}",
              highlight=False, markup=False)


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    reseal: Annotated[bool, typer.Option("--reseal", help="Re-render and seal again a run that no longer verifies; "
                                         "the report says it was re-sealed, with run.json's old and new "
                                         "digests, and so does manifest.json.")] = False,
) -> None:
    """Re-render report.html, summary.md and junit.xml from a run directory's files. The run is
    verified first: an altered run is refused (exit 1, each change named) unless --reseal."""
    import time as _t

    from chaoskit.lifeline import controller_user
    from chaoskit.report.manifest import verify as verify_run
    from chaoskit.report.writer import render

    if not (run_dir / "run.json").exists():
        _fail(InputError("no run.json here", source=str(run_dir), field="RUN_DIR"))
    checked = verify_run(run_dir)
    resealed = None
    if checked.problems and not reseal:
        for p in checked.problems:
            err.print(f"{run_dir}: {p}", highlight=False, markup=False, soft_wrap=True)
        err.print(f"{run_dir}: not re-rendered: the run no longer matches its seal (--reseal re-renders it and "
                  "marks the report and manifest as re-sealed)", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)
    if checked.problems:
        sealed = _sealed_ids(run_dir)
        resealed = {"at": _t.time(), "by": controller_user(), "problems": checked.problems,
                    "sealed_run_json_sha256": sealed.get("run_json_sha256"),
                    "run_json_sha256": checked.ids.get("run_json_sha256")}
    failed = render(run_dir, resealed=resealed, signed=False)  # sealing again drops a signature
    signed = (run_dir / "manifest.json.sig").exists()
    _seal(run_dir, None, resealed=resealed)
    out.print(f"rendered {run_dir / 'report.html'}; manifest.json rewritten"
              + (" and marked RE-SEALED" if resealed else "")
              + (" (the signature of the old one was removed: sign again to keep it signed)" if signed else ""),
              highlight=False, soft_wrap=True)
    if failed:
        for line in failed.lines:
            err.print(f"{run_dir}: not rendered: {line}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)


def _sealed_ids(run_dir: Path) -> dict[str, Any]:
    """What the run's manifest recorded of run.json and the events chain ({} if nothing)."""
    try:
        sealed = json.loads((run_dir / "manifest.json").read_text()).get("evidence")
    except (OSError, ValueError, AttributeError):
        return {}
    return sealed if isinstance(sealed, dict) else {}


@app.command("verify")
def verify(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    allowed_signers: Annotated[Path | None, typer.Option("--allowed-signers", help="ssh allowed_signers file: "
                                                         "a valid signature by one of them is required.")] = None,
) -> None:
    """Check a run directory against its manifest.json (every file's SHA-256, nothing missing or
    added), the events' hash chain against its sealed head, the attestation's subjects and the
    report's footer against the files and, with --allowed-signers, the signature; say how strongly
    an intact run holds (signed or not). Exit 0 intact; 1 altered or not signed as required (each
    problem named); 2 bad input."""
    from chaoskit.report.manifest import verify as verify_run

    if not run_dir.is_dir():
        _fail(InputError("not a directory", source=str(run_dir), field="RUN_DIR"))
    if allowed_signers is not None and not allowed_signers.is_file():
        _fail(InputError("no such file", source=str(allowed_signers), field="--allowed-signers"))
    checked = verify_run(run_dir, allowed_signers)
    for p in checked.problems:
        err.print(f"{run_dir}: {p}", highlight=False, markup=False, soft_wrap=True)
    if checked.problems:
        raise typer.Exit(1)
    out.print(f"{run_dir}: {checked.summary()}", highlight=False, markup=False, soft_wrap=True)


def _check_sign_key(key: Path | None) -> None:
    if key is not None and not key.is_file():
        raise InputError("no such key file", source=str(key), field="--sign-key")


def _seal(run_dir: Path, sign_key: Path | None, resealed: dict[str, Any] | None = None) -> None:
    from chaoskit.drill.session import seal

    try:
        seal(run_dir, sign_key, resealed=resealed)
    except ChaoskitError as exc:
        _fail(exc)


@app.command("compare")
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="Drill or experiment run directories.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Also write compare.csv and compare.html here.")
                       ] = None,
) -> None:
    """A table across runs (drills: verdict, RTO and phases, RPO; experiments: each cell), with
    what differs between them (chaoskit, server and HA manager versions, settings, inventory)."""
    from chaoskit.report.runs import CONTEXT, compare_rows, write_compare

    try:
        rows, differing = compare_rows(run_dirs)
    except ChaoskitError as exc:
        _fail(exc)
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in CONTEXT or c in differing]
    table = Table(title="runs" + (f" (differing: {', '.join(differing)})" if differing else ""))
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(*["—" if r.get(c) is None else f"{r[c]:.3f}" if isinstance(r.get(c), float) else
                        str(r[c])[:40] for c in columns])  # full values in compare.csv / .html
    out.print(table)
    if out_dir is not None:
        write_compare(rows, differing, out_dir)
        out.print(f"wrote {out_dir / 'compare.csv'} and {out_dir / 'compare.html'}")


@app.command("history")
def history_cmd(
    root: Annotated[Path, typer.Argument(help="A directory of run directories (e.g. reports/).")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write history.html and history.json here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per cluster and playbook: how often it was drilled, when last, the pass rate and the trend of
    all clients back; and the DR-test register: each cluster's last restore test (when, to what, how
    long, what was lost, against the playbook's objectives)."""
    from chaoskit.report.runs import REGISTER_COLUMNS, history, register_row, write_history
    from chaoskit.report.vocabulary import verdict_word
    from chaoskit.report.writer import _ts

    if not root.is_dir():
        _fail(InputError("not a directory", source=str(root), field="ROOT"))
    data = history(root)
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        table = Table(title=f"drills under {root}")
        for col in ("cluster", "playbook", "runs", "last drilled", "last verdict", "pass rate",
                    "all clients back, trend s", "not verified"):
            table.add_column(col)
        for e in data["playbooks"].values():
            table.add_row(str(e["cluster"]), e["playbook"], str(len(e["runs"])), _ts(e["last_drilled"]),
                          verdict_word(e["last_verdict"]), "—" if e["pass_rate"] is None else f"{e['pass_rate']:.0%}",
                          " ".join("—" if v is None else f"{v:.2f}" for v in e["rto_all_clients_trend_s"][-8:]),
                          ", ".join(e["not_verified"]) or "none")
        out.print(table)
        if data["dr_register"]:
            reg = Table(title="DR-test register: each cluster's last restore test")
            for col in REGISTER_COLUMNS:
                reg.add_column(col)
            for cluster, e in data["dr_register"].items():
                row = {"cluster": cluster, **register_row(e["last_restore_test"])}
                row["last restore test"] = _ts(row["last restore test"])
                reg.add_row(*("—" if row[c] is None else str(row[c]) for c in REGISTER_COLUMNS))
            out.print(reg)
    if out_dir is not None:
        write_history(data, out_dir)
        err.print(f"wrote {out_dir / 'history.html'}, {out_dir / 'dr-register.html'} and {out_dir / 'history.json'}")


@app.command("anomalies")
def anomalies(
    history_file: Annotated[Path, typer.Argument(help="A list-append history in Jepsen's EDN (chaoskit's export, "
                                                      "or a Jepsen test's history.edn).")],
    isolation: Annotated[str, typer.Option(help="The level the database claims: read-committed, "
                                                "snapshot-isolation, repeatable-read or serializable.")
                         ] = "serializable",
    order: Annotated[list[str] | None, typer.Option(
        help="Also order transactions by each client's order (process) or real time (realtime); repeatable.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Transactional anomalies in a list-append history (Elle's method): exit 1 when the claimed
    level forbids one that was found."""
    from chaoskit.elle.edn import read_edn
    from chaoskit.elle.list_append import LEVELS, HistoryError, check, cycle_text, forbidden_at

    orders = order or []
    if isolation not in LEVELS:
        _fail(InputError(f"unknown level {escaped(isolation)} (one of {', '.join(LEVELS)})", field="--isolation"))
    for o in orders:
        if o not in ("process", "realtime"):
            _fail(InputError(f"unknown order {escaped(o)} (process or realtime)", field="--order"))
    try:
        txns = read_edn(history_file.read_text(errors="replace"))
        got = check(txns, forbidden_at(isolation, orders), orders)  # type: ignore[arg-type]
    except OSError as exc:
        _fail(InputError(f"cannot be read ({exc.strerror})", source=str(history_file)))
    except HistoryError as exc:
        _fail(InputError(escaped(str(exc)), source=str(history_file), line=exc.line))
    if as_json:
        from dataclasses import asdict

        print(json.dumps({"isolation": isolation, "orders": orders, "transactions": got.txns, "ok": got.ok,
                          "failed": got.failed, "indeterminate": got.indeterminate, "counts": got.counts,
                          "violations": [asdict(x) for x in got.violations],
                          "allowed": [asdict(x) for x in got.allowed]}, indent=2))
    else:
        table = Table(title=f"{history_file}: {got.txns} transactions ({got.ok} ok, {got.failed} failed, "
                            f"{got.indeterminate} indeterminate), judged as {isolation}")
        for col in ("anomaly", "", "transactions", "what happened"):
            table.add_column(col)
        for x in got.anomalies:
            table.add_row(x.kind, "FORBIDDEN" if x.kind in got.forbidden else "allowed",
                          cycle_text(x.cycle) or " ".join(f"T{t}" for t in x.txns[:8]), x.explanation)
        if got.anomalies:
            out.print(table)
        n = len(got.violations)
        verdict = (f"{n} {'anomaly' if n == 1 else 'anomalies'} {isolation} forbids" if n else
                   f"no anomaly {isolation} forbids" + (f" ({len(got.allowed)} it allows)" if got.allowed else ""))
        out.print(verdict, highlight=False)
    if got.violations:
        raise typer.Exit(1)


def main() -> None:
    try:
        app()
    except ChaoskitError as exc:  # anything a command did not map itself
        err.print(f"error: {exc}", highlight=False, markup=False)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
