"""The backup tools, one module each in this package, found by their `NAME`."""

from __future__ import annotations

from collections.abc import Callable

from chaoskit.backup.base import BackupTool
from chaoskit.inventory.clock import ClockOffset
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.inventory.remote import Remote
from chaoskit.plugins import Plugins

TOOLS: Plugins[type[BackupTool]] = Plugins("chaoskit.backup", BackupTool, "NAME", "backup tool",
                                           skip=("base", "registry"))


def tool_for(cluster: Cluster, inventory: Inventory, remote: Callable[[str], Remote],
             offset: Callable[[str], ClockOffset]) -> BackupTool:
    assert cluster.backup is not None
    return TOOLS.get(cluster.backup.tool)(cluster, inventory, remote, offset)
