"""Disaster-recovery playbooks and inventories: what is refused at validate, with file, line and
field, before any host is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from refusal import assert_refused

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.playbook.loader import load_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
PITR = ROOT / "playbooks" / "dr" / "pg-restore-pitr.yaml"
BASE = PITR.read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "playbooks" / "dr").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_dr_playbooks_validate(path: Path) -> None:
    pb = load_playbook(path, LAB).playbook
    assert pb.name == path.stem and pb.cluster == "pg-dr" and pb.slo.rto_max == 60.0


def test_the_shipped_restore_playbook_validates() -> None:
    pb = load_playbook(PITR, LAB).playbook
    kinds = [st.action.kind for st in pb.steps if st.action is not None]
    assert kinds == ["backup", "drop_table", "restore"]
    restore = pb.steps[2].action
    assert restore is not None and not isinstance(restore.to, str) and (restore.to.step, restore.to.before) == (1, 2.0)


@pytest.mark.parametrize(("old", "new", "at_line_of", "field", "message"), [
    ("cluster: pg-dr", "cluster: pg", "action: {kind: backup", "steps[0].action.kind",
     "backup needs the cluster's backup: section in the inventory"),
    ("{kind: backup, type: full}", "{kind: backup, type: weekly}", "kind: backup", "steps[0].action.type",
     "Input should be 'full', 'diff' or 'incr'"),
    ("to: {step: 1, before: 2s}", "to: {step: 2, before: 2s}", "kind: restore", "steps[2].action.to.step",
     "steps[2] is not a step before this restore"),
    ("to: {step: 1, before: 2s}", "to: {step: 1, time: 2026-01-01T00:00:00Z}", "kind: restore", "steps[2].action.to",
     "a restore target is {step: N, before: 2s}"),
    ("to: {step: 1, before: 2s}", "to: {time: 2026-01-01T00:00:00Z, before: 2s}", "kind: restore",
     "steps[2].action.to", "before goes with step"),
    ("to: {step: 1, before: 2s}", "to: {time: 2026-01-01T00:00:00}", "kind: restore", "steps[2].action.to.time",
     "timezone"),
    ("workload: ledger", "workload: bank", "kind: drop_table", "steps[1].action.kind",
     "drop_table drops the ledger workload's own table"),
    ("{kind: drop_table}", "{kind: drop_table, target: dr1}", "kind: drop_table", "steps[1].action",
     "drop_table takes no target"),
])
def test_restore_refusals(tmp_path: Path, old: str, new: str, at_line_of: str, field: str, message: str) -> None:
    assert old in BASE
    text = BASE.replace(old, new, 1)
    if "workload: bank" in text:
        text = text.replace("checks: [rpo]", "checks: [bank]")
    assert_refused(tmp_path / "pb.yaml", text, at_line_of, field, message, lambda path: load_playbook(path, LAB))


def test_two_restores_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    doc = yaml.safe_load(BASE)
    doc["steps"].append({"at": "26s", "action": {"kind": "restore"}})
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="one restore per drill"):
        load_playbook(path, LAB)


def _lab_doc() -> dict:
    return yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())


@pytest.mark.parametrize(("change", "field", "message"), [
    (lambda d: d["clusters"]["pg-dr"]["backup"]["restore_to"].update(host="dr1"),
     "clusters.pg-dr.backup.restore_to.host", "restore target dr1 is a member of cluster pg-dr"),
    (lambda d: d["clusters"]["pg-dr"]["backup"]["restore_to"].update(host="pg1"),
     "clusters.pg-dr.backup.restore_to.host", "restore target pg1 is a member of cluster pg"),
    (lambda d: d["clusters"]["pg-dr"]["backup"]["repository"].update(host="nosuch"),
     "clusters.pg-dr.backup.repository.host", "backup repository host 'nosuch' is not in the inventory"),
    (lambda d: d["clusters"]["pg-dr"]["backup"]["restore_to"].update(host="bk1"),
     "clusters.pg-dr.backup.restore_to.host", "needs processes.postgres with a start command"),
    (lambda d: d["clusters"]["pg-dr"]["backup"].update(stanza="dr; rm -rf /"),
     "clusters.pg-dr.backup.stanza", "String should match pattern"),
    (lambda d: d["clusters"]["pg-dr"]["backup"]["restore_to"].update(data_dir="rel/$(reboot)"),
     "clusters.pg-dr.backup.restore_to.data_dir", ""),
])
def test_inventory_refusals(tmp_path: Path, change, field: str, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = _lab_doc()
    change(doc)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(InputError) as info:
        load_inventory(path)
    err = info.value
    assert err.field == field and err.line, err.one_line()
    assert message in err.detail, err.one_line()
