"""Load and validate a playbook against an inventory; errors name file, line and field."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from chaoskit.errors import InputError
from chaoskit.faults.targets import validate_target
from chaoskit.inventory.models import Inventory
from chaoskit.playbook.models import Playbook
from chaoskit.yamlsrc import load_yaml, raise_validation


def load_playbook(path: str | Path, inventory: Inventory | None = None) -> Playbook:
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "a playbook is a mapping")
    try:
        pb = Playbook.model_validate(doc.data)
    except ValidationError as exc:
        raise raise_validation(exc, doc) from None
    if inventory is not None:
        if pb.cluster not in inventory.clusters:
            raise doc.error(("cluster",), f"unknown cluster {pb.cluster!r}; inventory {inventory.source} has: "
                                          f"{', '.join(sorted(inventory.clusters)) or 'none'}")
        for i, step in enumerate(pb.steps):
            if step.fault is not None:
                spec = step.fault.model_copy(update={"cluster": step.fault.cluster or pb.cluster})
                field = ("steps", i, "fault", "target")
                try:
                    validate_target(spec, inventory, source=doc.source, field="target")
                except InputError as exc:
                    raise doc.error(field, exc.detail) from None
                known = {p for m in inventory.clusters[pb.cluster].members for p in m.processes}
                for name in step.fault.processes:
                    if name not in known:
                        raise doc.error(("steps", i, "fault", "processes"),
                                        f"no member of {pb.cluster} has a process {name!r} (known: "
                                        f"{', '.join(sorted(known)) or 'none'})")
            if step.action is not None:
                cl = inventory.clusters[pb.cluster]
                if step.action.kind in ("switchover", "rejoin") and cl.kind != "postgres-patroni":
                    raise doc.error(("steps", i, "action"), f"{step.action.kind} needs a postgres-patroni cluster")
                if step.action.target and step.action.target not in {m.host for m in cl.members}:
                    raise doc.error(("steps", i, "action", "target"),
                                    f"{step.action.target!r} is not a member of cluster {pb.cluster}")
    return pb
