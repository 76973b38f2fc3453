"""An experiment's `require:`: server settings compared as the servers spell them, a refusal that
names the setting and the target before anything runs, and names that can never be SQL."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaoskit.drill.experiment import check_required, setting_matches
from chaoskit.errors import PreflightError
from chaoskit.playbook.experiment import Experiment


@pytest.mark.parametrize(("actual", "wanted", "ok"), [
    ("1", 1, True), (1, 1, True), ("0", 1, False), ("2", 1, False), (None, 1, False),
    ("ON", True, True), ("on", True, True), ("1", True, True), ("OFF", True, False), ("OFF", False, True),
    ("0", False, True), ("ON", False, False), ("yes", True, True),
    ("1.0", 1, True), ("0.5", 0.5, True), ("abc", 1, False),
    ("ROW", "row", True), ("MIXED", "row", False), ("AFTER_SYNC", "after_sync", True),
])
def test_setting_matches(actual: Any, wanted: Any, ok: bool) -> None:
    assert setting_matches(actual, wanted) is ok


def _exp(**extra: Any) -> Experiment:
    return Experiment.model_validate({"name": "ladder", "kind": "ramp", "cluster": "mariadb", **extra})


def test_refused_with_the_setting_and_the_target_named() -> None:
    exp = _exp(require={"sync_binlog": 1, "innodb_flush_log_at_trx_commit": 1})
    asked = []

    def read(target: str, names: tuple[str, ...]) -> dict[str, Any]:
        asked.append((target, names))
        return {"sync_binlog": "1", "innodb_flush_log_at_trx_commit": "2"}

    with pytest.raises(PreflightError) as info:
        check_required(exp, None, read)  # type: ignore[arg-type]
    assert str(info.value) == ("experiment ladder requires innodb_flush_log_at_trx_commit = 1; on mariadb it is 2: "
                               "refused, nothing was run")
    assert asked == [("mariadb", ("sync_binlog", "innodb_flush_log_at_trx_commit"))]


def test_every_compared_target_is_checked_and_a_missing_setting_is_said_so() -> None:
    exp = _exp(kind="compare", targets=["a", "b"], require={"rpl_semi_sync_master_enabled": True})
    values = {"a": {"rpl_semi_sync_master_enabled": "ON"}, "b": {"rpl_semi_sync_master_enabled": None}}
    with pytest.raises(PreflightError, match="on b it is not set on this server"):
        check_required(exp, None, lambda t, names: values[t])  # type: ignore[arg-type]
    values["b"] = {"rpl_semi_sync_master_enabled": "ON"}
    assert check_required(exp, None, lambda t, names: values[t]) == values  # type: ignore[arg-type]


def test_nothing_required_reads_nothing() -> None:
    assert check_required(_exp(), None, lambda t, n: pytest.fail("read")) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["sync_binlog; DROP TABLE x", "a b", "@@x", "1abc", "x'--", ""])
def test_a_setting_name_is_an_identifier(name: str) -> None:
    with pytest.raises(ValidationError):
        _exp(require={name: 1})


def test_dotted_postgres_parameters_are_names() -> None:
    assert _exp(require={"pg_stat_statements.max": 5000}).require == {"pg_stat_statements.max": 5000}
