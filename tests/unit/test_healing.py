"""The way out shared by drills and experiments (`chaoskit.drill.healing.Undo`): faults reverted first,
then every settings change restored newest first; a restore that fails is reported, never raised,
and does not stop the others."""

from __future__ import annotations

from typing import Any

import pytest

from chaoskit.drill import healing


class Change:
    def __init__(self, log: list[str], name: str, fails: bool = False) -> None:
        self.log, self.name, self.fails = log, name, fails

    def restore(self, ha: Any) -> dict[str, Any]:
        self.log.append(f"restore {self.name}")
        if self.fails:
            raise RuntimeError(f"{self.name}: the REST API did not answer")
        return {"setting": self.name}


class Faults:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def revert_all(self) -> list[str]:
        self.log.append("revert faults")
        return ["f1"]  # not verified


def test_undo_reverts_faults_then_restores_settings_newest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    made = iter([Change(log, "first"), Change(log, "second", fails=True), Change(log, "third")])
    monkeypatch.setattr(healing, "change_settings", lambda ha, path, values, ttl: next(made))
    undo = healing.Undo(Faults(log), ha=None, inventory_path="inv.yaml")  # type: ignore[arg-type]
    for values in ({"a": 1}, {"b": 2}, {"c": 3}):
        undo.change_settings(values, 60.0)
    report = undo.undo()
    assert log == ["revert faults", "restore third", "restore second", "restore first"]
    assert report.not_verified == ["f1"]
    assert report.restored == [{"setting": "third"}, {"setting": "first"}]
    assert report.errors == ["RuntimeError: second: the REST API did not answer"]
