"""Which HA managers exist: every module of this package that defines an `HAManager` subclass
with a `kind` (`chaoskit.plugins`: a new manager is its module alone), and the cluster -> manager
factory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chaoskit.ha.base import HaConfig, HAManager
from chaoskit.plugins import Plugins

if TYPE_CHECKING:
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.inventory.models import Cluster, Inventory

MANAGERS: Plugins[type[HAManager]] = Plugins("chaoskit.ha", HAManager, "kind", "HA manager", skip=("base", "registry"))


def managers() -> dict[str, type[HAManager]]:
    return MANAGERS.all()


def validate_config(value: Any) -> HaConfig:
    """The manager's own config model from an inventory's `ha:` mapping; errors as ValueError
    naming the field inside `ha`."""
    if isinstance(value, HaConfig):
        return value
    if value is None:
        value = {"kind": "none"}
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping with kind (e.g. {kind: patroni})")
    manager = MANAGERS.get(value.get("kind"))  # UnknownPlugin is a ValueError naming the known ones
    try:
        return manager.Config.model_validate(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}: {msg}" if where else msg) from None


def is_multi_writer(cluster: Cluster) -> bool:
    """Every member of this cluster's quorum takes writes (its manager's `multi_writer`)."""
    return bool(getattr(managers().get(cluster.ha.kind), "multi_writer", False))


def manager_for(cluster: Cluster, inventory: Inventory, pool: RemotePool | None = None) -> HAManager:
    return managers()[cluster.ha.kind](cluster, inventory, pool)
