"""Which HA managers exist: every module of this package that defines an `HAManager` subclass
with a `kind` (`chaoskit.plugins`: a new manager is its module alone), and the cluster -> manager
factory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chaoskit.ha.base import HAManager
from chaoskit.plugins import Plugins

if TYPE_CHECKING:
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.inventory.models import Cluster, Inventory

MANAGERS: Plugins[type[HAManager]] = Plugins("chaoskit.ha", HAManager, "kind", "HA manager", skip=("base", "registry"))


def managers() -> dict[str, type[HAManager]]:
    return MANAGERS.all()


def is_multi_writer(cluster: Cluster) -> bool:
    """Every member of this cluster's quorum takes writes (its manager's `multi_writer`)."""
    return bool(getattr(managers().get(cluster.ha.kind), "multi_writer", False))


def manager_for(cluster: Cluster, inventory: Inventory, pool: RemotePool | None = None) -> HAManager:
    return managers()[cluster.ha.kind](cluster, inventory, pool)
