"""What a run changed and must undo, in one place for drills and experiments: its faults (the
fault manager reverts and verifies them, newest first) and its HA settings changes (journaled on
the way in with their dead-man, restored newest first on the way out). `Undo.undo` never raises:
what it could not undo is in its report, and the journals' dead-men and `chaoskit recover` retry.
Together with `interrupts.stop_signals_interrupt` (Ctrl-C and SIGTERM always interrupt) this is
the way out of every run that touches a cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaoskit.faults.manager import FaultManager, InjectedFault
from chaoskit.ha.base import HAManager
from chaoskit.ha.settings import SettingsChange, change_settings


@dataclass
class UndoReport:
    """What the undo did: faults whose revert was not verified, each settings change restored (its
    previous values), and each one that could not be."""

    not_verified: list[InjectedFault] = field(default_factory=list)
    restored: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Undo:
    def __init__(self, fm: FaultManager, ha: HAManager, inventory_path: str) -> None:
        self.fm, self.ha, self.inventory_path = fm, ha, inventory_path
        self.settings: list[SettingsChange] = []

    def change_settings(self, values: dict[str, Any], ttl_s: float) -> SettingsChange:
        """Journal (with a dead-man at `ttl_s`), then apply; restored by `undo`."""
        change = change_settings(self.ha, self.inventory_path, values, ttl_s)
        self.settings.append(change)
        return change

    def undo(self) -> UndoReport:
        report = UndoReport(not_verified=self.fm.revert_all())
        for change in reversed(self.settings):
            try:
                report.restored.append(change.restore(self.ha))
            except Exception as exc:  # the journal entry stays; its dead-man and `recover` retry
                report.errors.append(f"{type(exc).__name__}: {exc}")
        return report
