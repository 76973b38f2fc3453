"""Which database drivers exist (`chaoskit.plugins`: every `Driver` subclass of this package with
an `engine`), and the cluster -> driver factory, chosen by the cluster's `engine` like Patroni's
DCS classes. A new engine is its driver module alone."""

from __future__ import annotations

from typing import Any

from chaoskit.db.base import Driver
from chaoskit.errors import InputError
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.plugins import Plugins, UnknownPlugin

DRIVERS: Plugins[type[Driver]] = Plugins("chaoskit.db", Driver, "engine", "database engine", skip=("base", "registry"))


def driver_for(cluster: Cluster, inventory: Inventory, **kwargs: Any) -> Driver:
    """The adapter for a cluster's engine."""
    try:
        driver = DRIVERS.get(cluster.engine)
    except UnknownPlugin as exc:
        raise InputError(f"no driver for engine {cluster.engine!r} ({exc})", source=inventory.source,
                         field=f"clusters.{cluster.name}.engine") from None
    return driver(cluster, inventory, **kwargs)
