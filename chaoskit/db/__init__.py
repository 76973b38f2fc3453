"""Driver adapters: one small interface (`Driver`), one adapter per wire protocol family, found
by the cluster's engine (`registry.driver_for`)."""

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.db.registry import driver_for

__all__ = ["Driver", "ErrorClass", "driver_for"]
