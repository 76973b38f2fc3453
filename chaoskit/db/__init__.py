"""Driver adapters: one small interface (`Driver`), one adapter per wire protocol family."""

from chaoskit.db.base import Driver, ErrorClass, driver_for

__all__ = ["Driver", "ErrorClass", "driver_for"]
