"""`chaoskit run --dry-run`: a drill's plan as it would run, printed without touching anything.

For each step: when it runs, each fault and action, and for a fault whose target names a host
(a host, or the hosts carrying a tag) the commands that host would get: the journal files its
stage writes (the fault's apply, its revert, its check), exactly as a real run builds them, from
the playbook and the inventory alone. A live role (`role:primary`), an earlier step's host
(`fault.N`) or a peer chosen by role is known only at the fault's instant: it is said to be
resolved at run time, never guessed. The client link runs on this machine (no host command).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import yaml

from chaoskit.errors import InputError, escaped
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import CLIENT, FaultBase
from chaoskit.faults.targets import fault_hosts, live_target, named_hosts, split_target
from chaoskit.ha.registry import managers
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import Playbook

SHARED = ("lib", "deadman", "proxy.py")  # the prelude every journal carries and chaoskit's own relay code
DRY_ID = "0" * 12  # a real run draws a random id per fault


def planned_lines(host: str, label: str, fault_id: str, files: dict[str, str], note: str = "") -> Iterator[str]:
    """A planned fault as printed, line by line: a header naming the host (and `label`: the fault,
    or the step it belongs to), then each journal file under its name, the shared prelude left out
    (the same for every fault). `fault inject --dry-run` and `run --dry-run` both print this."""
    yield (f"# host {host}, {label}: the journal it would get (staged ahead, sent base64-encoded and checked by "
           f"SHA-256), then `{fault_id}.inject` at the instant{note}")
    for name, content in files.items():
        if name not in SHARED:
            yield f"## {fault_id}.{name}"
            yield from content.rstrip().splitlines()


def dry_run_lines(pb: Playbook, inventory: Inventory, *, commands: bool = True) -> list[str]:
    """The plan of `pb` on `inventory`, line by line (see the module's docstring)."""
    from chaoskit.drill.triggers import describe_trigger

    # a peer by role is a fact of the instant: planning must not guess it
    fm = FaultManager(inventory, roles=_no_live_roles)
    lines = [f"{pb.name} on {pb.cluster}: load {pb.load.workload_name} x {pb.load.workers}, duration {pb.duration:g}s"]
    lines += settings_lines(pb, inventory)
    for i, step in enumerate(pb.steps):
        when = f"at {step.at:>6g}s" if step.at is not None else describe_trigger(step.after)  # type: ignore[arg-type]
        for spec in step.specs:
            lines.append(f"  {when}  fault {spec.kind}: {fields(spec.model_dump(mode='json', exclude_defaults=True))}")
            if commands:
                lines += [f"    {line}" for line in _fault_commands(fm, spec if spec.cluster else
                                                                     spec.replace(cluster=pb.cluster), i)]
        if step.action is not None:
            action = step.action
            lines.append(f"  {when}  action {action.kind}: {fields(action.model_dump(mode='json', exclude_none=True))}")
            if commands:
                lines.append(f"    {_action_commands(action.kind, action.target, inventory, pb.cluster)}")
    lines.append(f"  checks {', '.join(pb.checks)}; SLOs {fields(pb.slo.model_dump(mode='json', exclude_none=True))}")
    lines += login_lines(pb, inventory)
    return lines


def fields(data: dict[str, Any]) -> str:
    """A model's fields as YAML flow text (`target: role:primary, processes: [patroni, postgres]`),
    its `kind` left out (said first by the caller), control characters shown escaped."""
    data = {k: v for k, v in data.items() if k != "kind"}
    if not data:
        return "(defaults)"
    text = yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return escaped(text.removeprefix("{").removesuffix("}"))


def settings_lines(pb: Playbook, inventory: Inventory) -> list[str]:
    """The HA manager's settings the drill changes for its duration (journaled on the hosts with a
    dead-man, restored at the end: `healing.Undo`)."""
    if not pb.settings:
        return []
    ha = inventory.clusters[pb.cluster].ha.kind
    return [f"  settings changed on {ha} for the drill (journaled, restored at its end; the values before are "
            f"read at run time): {fields(dict(pb.settings))}"]


def login_lines(pb: Playbook, inventory: Inventory) -> list[str]:
    """Every login the drill uses: SSH to each host it reaches (the cluster's members, the hosts its
    faults name), the database's user for the load, the probe and the checks (and each client group's
    route), and the HA manager's own credentials where the inventory gives them. Secrets are shown as
    their references, never their values."""
    out = ["  logins:"]
    hosts = list(dict.fromkeys([m.host for m in inventory.clusters[pb.cluster].members if m.host in inventory.hosts]
                               + fault_hosts(pb.steps, inventory)))
    for name in hosts:
        h = inventory.hosts[name]
        how = [f"key {h.key_file}" if h.key_file else "the ssh agent or default keys",
               f"known_hosts {h.known_hosts}" if h.known_hosts else "the default known_hosts",
               *([f"through {h.jump}"] if h.jump else []),
               *([f"then sudo to {h.become_user}"] if h.become else [])]
        out.append(f"    ssh {h.user}@{h.address}:{h.port} ({name}): {', '.join(how)}")
    routes = dict.fromkeys([pb.cluster, *(g.route for g in pb.load.to_spec().client_groups() if g.route)])
    for name in routes:
        c = inventory.clusters[name]
        secret = c.password.describe() if c.password else "no password given"
        out.append(f"    database {c.engine} cluster {name}: user {c.user}, password {secret}")
    api = getattr(inventory.clusters[pb.cluster].ha, "api", None)
    if api is not None and getattr(api, "username", None):
        secret = api.password.describe() if getattr(api, "password", None) is not None else "no password given"
        out.append(f"    {inventory.clusters[pb.cluster].ha.kind} API: user {api.username}, password {secret}")
    return [escaped(line) for line in out]


def _action_commands(kind: str, target: str | None, inventory: Inventory, cluster: str) -> str:
    """Where an action acts: the HA manager's own switchover or rejoin (its API or command, as its
    module in chaoskit.ha issues it), and a restart's start commands on the member's host."""
    ha = inventory.clusters[cluster].ha.kind
    on = "the host of an earlier step's fault, resolved at run time" if target and target.startswith("fault.") \
        else target
    if kind in ("switchover", "takeover"):
        return f"through {ha} at the instant (its own {kind}; no journal on any host)"
    if kind == "rejoin" and managers()[ha].rejoin_after_restart:
        return f"on {on}: every declared process not running is started; then through {ha}: rejoin {on}"
    if kind == "rejoin":
        return f"through {ha} at the instant: rejoin {on}; then, on it, every declared process not running is started"
    return f"on {on}: every declared process of the member that is not running is started (its start command)"


def _fault_commands(fm: FaultManager, spec: FaultBase, step: int) -> list[str]:
    base = split_target(spec.target)[0]
    if base == CLIENT:
        return ["on this machine: the load's relays change their toxics (no host command)"]
    if live_target(base):
        return [f"host: resolved at run time ({spec.target} is known only at the fault's instant); "
                "commands as for a named host"]
    hosts = named_hosts(spec.target, fm.inventory)
    out = []
    if "@" in spec.target and not spec.target.endswith("@all"):
        out.append(f"hosts: {spec.target.rsplit('@', 1)[1]} of {', '.join(hosts)}, chosen at run time; "
                   "the commands each would get:")
    for host in hosts:
        try:
            fault_id, (planned,) = fm.plan(spec, fault_id=DRY_ID, hosts=[host])
        except _LiveRoleNeeded:
            out.append(f"# host {host}: its commands name peers chosen by role: resolved at run time")
            continue
        except InputError as exc:  # what the run would refuse (validate refuses most of it first)
            out.append(f"# host {host}: would be refused: {exc.detail}")
            continue
        out += planned_lines(host, f"steps[{step}]", fault_id, planned.files, "; the fault's id is drawn at run time")
    return out


class _LiveRoleNeeded(Exception):
    """Planning asked for the cluster's live roles (a peer chosen by role)."""


def _no_live_roles(cluster: Cluster) -> NoReturn:
    raise _LiveRoleNeeded
