"""Load and validate a playbook against an inventory; errors name file, line and field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from chaoskit.backup.registry import TOOLS
from chaoskit.errors import InputError
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import CLIENT, KINDS, STEP_TARGET, FaultBase
from chaoskit.faults.targets import live_target, named_hosts, split_target, validate_target
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import DR_ACTIONS, Playbook, Where
from chaoskit.plugins import UnknownPlugin
from chaoskit.workload.engine import tool_engine_refusal
from chaoskit.workload.workloads import WORKLOADS
from chaoskit.yamlsrc import load_yaml, raise_validation


@dataclass(frozen=True)
class LoadedPlaybook:
    playbook: Playbook
    path: str
    sha256: str  # of the bytes that were parsed


def load_playbook(path: str | Path, inventory: Inventory | None = None) -> LoadedPlaybook:
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "a playbook is a mapping")
    try:
        # a file a playbook names (a pgbench script) is found from the playbook's own directory
        pb = Playbook.model_validate(doc.data, context={"base_dir": str(Path(path).parent)})
    except ValidationError as exc:
        raise raise_validation(exc, doc, fault_tags=frozenset(KINDS)) from None
    if inventory is not None:
        check_against_inventory(pb, inventory, doc)
    return LoadedPlaybook(pb, str(path), doc.sha256)


def _rehearse(spec: FaultBase, inventory: Inventory, doc: object, path: tuple) -> None:
    """What the planner would refuse from this spec and the inventory alone, refused here."""
    fm = FaultManager(inventory)
    try:
        fm.rehearse(spec)
    except InputError as exc:
        field = (exc.field or "").removeprefix("--")
        raise doc.error((*path, field) if field else path, exc.detail) from None  # type: ignore[attr-defined]
    finally:
        fm.close()


def _processes_declared(spec: FaultBase, inventory: Inventory, cluster: str, doc: object, path: tuple) -> None:
    """A process fault names processes its target hosts declare: for a host or tag target, every
    host it names declares each one (or, when none is named, declares some); for a role target,
    some member of the cluster does (which member it is is known only at the instant)."""
    if spec.family != "process":
        return
    base, _ = split_target(spec.target)
    if base == CLIENT:
        return
    if live_target(base):
        known = {p for m in inventory.clusters[cluster].members for p in inventory.processes_on(m.host)}
        for name in spec.processes_wanted:
            if name not in known:
                raise doc.error((*path, "processes"), f"no member of {cluster} has a process {name!r} "  # type: ignore[attr-defined]
                                                      f"(known: {', '.join(sorted(known)) or 'none'})")
        return
    for host in named_hosts(spec.target, inventory):
        known = set(inventory.processes_on(host))
        missing = [n for n in spec.processes_wanted if n not in known]
        if missing or not known:
            what = f"no process {missing[0]!r}" if missing else "no process"
            raise doc.error((*path, "processes" if missing else "target"),  # type: ignore[attr-defined]
                            f"host {host} declares {what} (known: {', '.join(sorted(known)) or 'none'}; "
                            f"hosts.{host}.processes or a member's processes)")


def _dr_action(pb: Playbook, i: int, cl: Cluster, doc: object) -> None:
    """A backup, disaster or restore step against what the inventory's `backup:` offers."""
    action = pb.steps[i].action
    assert action is not None
    path = ("steps", i, "action")
    if cl.backup is None:
        raise doc.error((*path, "kind"), f"{action.kind} needs the cluster's backup: section in the inventory "  # type: ignore[attr-defined]
                                         f"(tool, repository, restore_to); cluster {cl.name} has none")
    try:
        tool = TOOLS.get(cl.backup.tool)
    except UnknownPlugin as exc:
        raise doc.error((*path, "kind"), f"cluster {cl.name}: backup.tool: {exc}") from None  # type: ignore[attr-defined]
    if cl.engine not in tool.ENGINES:
        raise doc.error((*path, "kind"), f"cluster {cl.name}: {tool.NAME} backs up "  # type: ignore[attr-defined]
                                         f"{'/'.join(sorted(tool.ENGINES))}, not {cl.engine}")
    if action.kind == "backup" and action.type not in tool.TYPES:
        raise doc.error((*path, "type"), f"{tool.NAME} takes {', '.join(tool.TYPES)} backups")  # type: ignore[attr-defined]
    ledger = pb.load.workload_name == "ledger" and pb.load.builtin_clients  # whose rows a restore is judged by
    if action.kind == "drop_table" and not ledger:
        raise doc.error((*path, "kind"), "drop_table drops the ledger workload's own table: the load's "  # type: ignore[attr-defined]
                                         "workload must be ledger (whose rows the restore is judged by)")
    if action.kind != "restore":
        return
    if cl.backup.restore_to is None:
        raise doc.error((*path, "kind"), f"restore needs backup.restore_to in the inventory (cluster {cl.name}): "  # type: ignore[attr-defined]
                                         "a host of no cluster to restore on")
    if len(pb.actions("restore")) > 1:
        raise doc.error((*path, "kind"), "one restore per drill: the restored server is what the data is "  # type: ignore[attr-defined]
                                         "judged on after the run")
    if not ledger:
        raise doc.error((*path, "kind"), "a restore is judged on the ledger workload's rows: the load's "  # type: ignore[attr-defined]
                                         "workload must be ledger")
    to = action.to
    if not isinstance(to, str) and to.step is not None:
        n = to.step
        mine = pb.steps[i]
        other = pb.steps[n] if n < len(pb.steps) else None
        earlier = other is not None and n < i and (other.at is None or mine.at is None or other.at <= mine.at)
        if not earlier:
            raise doc.error((*path, "to", "step"), f"steps[{n}] is not a step before this restore")  # type: ignore[attr-defined]


def _earlier_fault(pb: Playbook, i: int, target: str, doc: object, path: tuple) -> None:
    """`fault.N` in steps[i] names the host of steps[N]'s fault: a fault step scheduled before it
    (earlier by offset, or, with an event-triggered step on either side, earlier in the list). An
    action may share the fault's instant (it runs after the trigger); a fault is staged ahead, so
    it may not."""
    n = int(target.split(".")[1])
    step = pb.steps[i]
    fault_step = pb.steps[n] if n < len(pb.steps) else None
    offsets = fault_step is not None and fault_step.at is not None and step.at is not None
    before = fault_step is not None and (
        (fault_step.at < step.at or (step.action is not None and fault_step.at == step.at)) if offsets  # type: ignore[operator]
        else n < i)
    if fault_step is None or not fault_step.specs or not before:
        raise doc.error(path, f"{target}: steps[{n}] is not a fault scheduled before this step")  # type: ignore[attr-defined]


MANAGED_STEPS = ("is managed (no host to SSH into): a drill on it runs the load, faults on its client link "
                 "(target: client, relays on this machine) and SQL probes of its endpoints only")


def _managed_drill(pb: Playbook, doc: object) -> None:
    """A drill on a managed service: what needs a host (a fault on a member or any host, an action
    on a member) or reads the members one by one (replica_convergence) is refused; its client link,
    the load and the endpoints' SQL roles are all it has."""
    for i, step in enumerate(pb.steps):
        if step.action is not None:
            raise doc.error(("steps", i, "action"), f"cluster {pb.cluster!r} {MANAGED_STEPS}; "  # type: ignore[attr-defined]
                                                    f"{step.action.kind} needs a member's host or its HA manager")
        for j, fault in enumerate(step.specs):
            if split_target(fault.target)[0] != CLIENT or fault.cluster not in (None, pb.cluster):
                where = ("steps", i, "fault", "target") if step.fault else ("steps", i, "faults", j, "target")
                raise doc.error(where, f"cluster {pb.cluster!r} {MANAGED_STEPS}; not "  # type: ignore[attr-defined]
                                       f"{fault.target!r}")
    if "replica_convergence" in pb.checks:
        raise doc.error(("checks",), f"cluster {pb.cluster!r} is managed: replica_convergence reads each member "  # type: ignore[attr-defined]
                                     "on its own, and a service's replicas are not reachable one by one (rpo and "
                                     "split_brain are judged through its endpoints)")


def where_refusal(where: Where, loaders: int | None, inventory: Inventory, route: str
                  ) -> tuple[tuple[str, ...], str] | None:
    """Why clients cannot be placed by `where` (and `loaders: N`) with this inventory, as (the
    field below the group, the message); None: they can. The inventory must have loader hosts
    (with `ray:` for labels and resources, which match live nodes at the start), the clients
    must read their password from a file there, and a zone or name must match N hosts at least."""
    if inventory.loaders is None:
        return ("where",), f"where: needs loader hosts, and inventory {inventory.source} has no loaders: section"
    cluster = inventory.clusters.get(route)
    secret = cluster.password if cluster is not None else None
    if secret is not None and secret.env is not None:
        return ("where",), ("clients on loader hosts read the database password there, and password: {env: "
                            f"{secret.env}}} is the controller's environment: use password: {{file: ...}}, the file "
                            "present on each loader host")
    if where.live:  # labels, resources: matched on the Ray cluster's live nodes at the start
        if inventory.loaders.ray is None:
            return ("where",), f"where: {where.said()} matches Ray nodes, and inventory {inventory.source}'s " \
                               "loaders: has no ray:"
        return None
    matched = where.hosts(inventory)
    if not matched:
        zones = sorted({f"{inventory.hosts[h].tags.get('az', '(none)')} ({h})" for h in inventory.loaders.hosts})
        return ("where",), f"no loader host matches {where.said()}; the loader hosts and their az: {', '.join(zones)}"
    if loaders is not None and loaders > len(matched):
        return ("loaders",), f"loaders: {loaders}, and {len(matched)} loader host(s) match {where.said()}: " \
                             f"{', '.join(matched)}"
    return None


def _placed_groups(pb: Playbook, inventory: Inventory, doc: object) -> None:
    """Groups with `where:` run on loader hosts: the inventory must have them, one at least must
    match, and the load is then not behind the control node's client link."""
    placed = [(i, g) for i, g in enumerate(pb.load.groups or ()) if g.where is not None]
    for i, group in placed:
        assert group.where is not None
        refused = where_refusal(group.where, group.loaders, inventory, group.route or pb.cluster)
        if refused:
            raise doc.error(("load", "groups", i, *refused[0]), refused[1])  # type: ignore[attr-defined]
    if not placed:
        return
    for i, step in enumerate(pb.steps):
        for j, fault in enumerate(step.specs):
            if split_target(fault.target)[0] == CLIENT:
                where = ("steps", i, "fault", "target") if step.fault else ("steps", i, "faults", j, "target")
                raise doc.error(where, "target: client acts on the control node's client link, and group "  # type: ignore[attr-defined]
                                       f"{placed[0][1].group_name} runs on loader hosts (where:); cut the loader "
                                       "hosts with a partition fault instead")


def _read_routes(pb: Playbook, inventory: Inventory, doc: object) -> None:
    """The workload must be one that reads through the read routes its groups name (and, for one
    that needs them, has groups on both kinds of route)."""
    if not pb.load.builtin_clients or pb.load.workload_name not in WORKLOADS:
        return
    groups = [g for g in pb.load.to_spec().client_groups() if g.tool == "builtin"]
    reading = [g.route is not None and inventory.clusters[g.route].read_route for g in groups]
    refusal = WORKLOADS[pb.load.workload_name].route_refusal(sum(reading), len(reading) - sum(reading))
    if refusal:
        where: tuple[str | int, ...] = ("load", "groups") if pb.load.groups else ("load", "workload")
        raise doc.error(where, refusal)  # type: ignore[attr-defined]


def check_against_inventory(pb: Playbook, inventory: Inventory, doc: object) -> None:
    from chaoskit.ha.registry import managers

    if pb.cluster not in inventory.clusters:
        raise doc.error(("cluster",), f"unknown cluster {pb.cluster!r}; inventory {inventory.source} has: "  # type: ignore[attr-defined]
                                      f"{', '.join(sorted(inventory.clusters)) or 'none'}")
    cl = inventory.clusters[pb.cluster]
    if cl.read_route:
        raise doc.error(("cluster",), f"cluster {pb.cluster!r} is a read route (read_route: true): a drill's "  # type: ignore[attr-defined]
                                      "cluster is the writer's; name the read route as a client group's route")
    if cl.managed:
        _managed_drill(pb, doc)
    manager = managers()[cl.ha.kind]
    unknown = set(pb.settings) - manager.changeable_settings
    if unknown:
        raise doc.error(("settings",), f"ha: {cl.ha.kind} cannot change {', '.join(sorted(unknown))} "  # type: ignore[attr-defined]
                                       f"(changeable: {', '.join(sorted(manager.changeable_settings)) or 'none'})")
    _placed_groups(pb, inventory, doc)
    if pb.load.builtin_clients and pb.load.workload_name in WORKLOADS:
        kind, params = WORKLOADS[pb.load.workload_name], pb.load.workload_params()
        refusal = kind.engine_refusal(cl.engine, params)
        if refusal:
            raise doc.error(("load", "workload"), refusal)  # type: ignore[attr-defined]
        refusal = kind.level_refusal(cl.engine, params)
        if refusal:
            raise doc.error(("load", "isolation"), refusal)  # type: ignore[attr-defined]
    for i, group in enumerate(pb.load.groups or ()):
        engine = inventory.clusters[group.route].engine if group.route in inventory.clusters else cl.engine
        refusal = tool_engine_refusal(group.tool, group.route or pb.cluster, engine)
        if refusal:
            raise doc.error(("load", "groups", i, "tool"), refusal)  # type: ignore[attr-defined]
        if group.route is None:
            continue
        other = inventory.clusters.get(group.route)
        if other is None or other.engine != cl.engine or \
                sorted(m.host for m in other.members) != sorted(m.host for m in cl.members):
            why = "not in the inventory" if other is None else "not the same engine and members"
            raise doc.error(("load", "groups", i, "route"), f"route {group.route!r} must be a cluster of the "  # type: ignore[attr-defined]
                                                            f"inventory with the members of {pb.cluster}: {why}")
        if other.read_route and group.tool != "builtin":
            raise doc.error(("load", "groups", i, "route"), f"route {group.route!r} is a read route: "  # type: ignore[attr-defined]
                                                            f"{group.tool} writes; only chaoskit's own clients "
                                                            "read through one")
    _read_routes(pb, inventory, doc)
    for i, step in enumerate(pb.steps):
        for j, fault in enumerate(step.specs):
            where: tuple[str | int, ...] = ("steps", i, "fault") if step.fault else ("steps", i, "faults", j)
            try:
                validate_target(fault, inventory, source=doc.source, field="target")  # type: ignore[attr-defined]
            except InputError as exc:
                field = "target" if exc.field in ("target", "--target") else exc.field or "target"
                raise doc.error((*where, field.removeprefix("--")), exc.detail) from None  # type: ignore[attr-defined]
            if STEP_TARGET.match(fault.target):
                _earlier_fault(pb, i, fault.target, doc, (*where, "target"))
            _processes_declared(fault, inventory, fault.cluster or pb.cluster, doc, where)
            _rehearse(fault, inventory, doc, where)
        if step.action is not None:
            can = {kind: getattr(manager, kind) is not getattr(managers()["none"], kind)
                   for kind in ("switchover", "takeover", "rejoin")}
            if step.action.kind in can and not can[step.action.kind]:
                raise doc.error(("steps", i, "action"), f"{step.action.kind} needs an HA manager that can do it; "  # type: ignore[attr-defined]
                                                        f"cluster {pb.cluster} has ha: {cl.ha.kind}")
            if step.action.kind in DR_ACTIONS:
                _dr_action(pb, i, cl, doc)
            target = step.action.target
            if target and target.startswith("fault."):
                _earlier_fault(pb, i, target, doc, ("steps", i, "action", "target"))
            elif target and target not in {m.host for m in cl.members}:
                raise doc.error(("steps", i, "action", "target"),  # type: ignore[attr-defined]
                                f"{target!r} is not a member of cluster {pb.cluster}")
