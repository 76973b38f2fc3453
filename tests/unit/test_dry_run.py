"""`chaoskit run --dry-run`: every shipped drill's plan, with the commands each named host would get
(its journal files, as a real run builds them) and, for what is known only at the instant, the
words "resolved at run time"; nothing is touched (the lab inventory answers whether the lab is up or not)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaoskit.drill.dryrun import dry_run_lines
from chaoskit.faults.spec import CLIENT
from chaoskit.faults.targets import live_target, named_hosts, split_target
from chaoskit.inventory import load_inventory
from chaoskit.playbook.loader import load_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
DRILLS = sorted(p for p in (ROOT / "playbooks").glob("*.yaml") if "\nkind: " not in p.read_text())


@pytest.mark.parametrize("path", DRILLS, ids=lambda p: p.stem)
def test_every_fault_of_every_shipped_drill_says_where_it_runs(path: Path) -> None:
    """A fault on a named host shows that host's journal (its inject and revert files); a live role
    or an earlier step's host says it is resolved at run time; the client link says this machine."""
    pb = load_playbook(path, LAB).playbook
    text = "\n".join(dry_run_lines(pb, LAB))
    for step in pb.steps:
        for spec in step.specs:
            base = split_target(spec.target)[0]
            if base == CLIENT:
                assert "on this machine: the load's relays change their toxics" in text
            elif live_target(base):
                assert f"host: resolved at run time ({spec.target} is known only" in text
            else:
                for host in named_hosts(spec.target, LAB):
                    header = f"# host {host}, steps[{pb.steps.index(step)}]: the journal it would get"
                    assert header in text or f"# host {host}: its commands name peers chosen by role" in text
                    if header in text:
                        assert "## 000000000000.inject" in text and "## 000000000000.revert" in text
            assert f"  fault {spec.kind}: " in text  # the kind first, then its fields
        if step.action is not None:
            assert f"  action {step.action.kind}: " in text
    lines = text.splitlines()
    checks = next(i for i, line in enumerate(lines) if line.startswith("  checks "))
    assert lines[checks + 1] == "  logins:" and all(line.startswith("    ") for line in lines[checks + 2:])
    assert "{'" not in text and "('" not in text  # no Python repr of a model or a tuple


def test_a_step_line_says_the_kind_first_and_the_settings_and_logins_the_drill_uses() -> None:
    """Issue 43: the fault's kind was dropped (it is its own default) and the fields were a Python
    repr; the HA settings a drill changes and the logins it uses were not said at all."""
    pb = load_playbook(ROOT / "playbooks" / "pg-kill-primary-sync.yaml", LAB).playbook
    lines = dry_run_lines(pb, LAB)
    assert "  at     12s  fault kill: target: 'role:primary', cluster: pg, ttl: 28.5, duration: 20.0, processes: " \
           "[patroni, postgres]" in lines
    assert any(line.startswith("  settings changed on patroni for the drill") and
               line.endswith(": synchronous_mode: true") for line in lines)
    logins = lines[lines.index("  logins:") + 1:]
    for member in ("pg1", "pg2", "pg3"):
        h = LAB.hosts[member]
        assert any(line.startswith(f"    ssh {h.user}@{h.address}:{h.port} ({member}): key {h.key_file}")
                   for line in logins)
    c = LAB.clusters["pg"]
    assert f"    database postgres cluster pg: user {c.user}, password {c.password.describe()}" in logins


def test_a_named_hosts_commands_are_its_journal_as_a_run_builds_it() -> None:
    """mha-manager-down-then-kill-primary stops masterha_manager on mham: the lines after the host's
    header are the journal files `FaultManager.plan` makes for that host (the shared prelude left
    out), each line indented under the step."""
    from chaoskit.drill.dryrun import SHARED
    from chaoskit.faults.manager import FaultManager

    pb = load_playbook(ROOT / "playbooks" / "mha-manager-down-then-kill-primary.yaml", LAB).playbook
    lines = dry_run_lines(pb, LAB)
    spec = pb.steps[0].specs[0]
    _, (planned,) = FaultManager(LAB).plan(spec if spec.cluster else spec.replace(cluster=pb.cluster),
                                           fault_id="0" * 12, hosts=["mham"])
    start = next(i for i, line in enumerate(lines) if line.startswith("    # host mham, steps[0]"))
    expected = [f"    {line}" for name, content in planned.files.items() if name not in SHARED
                for line in [f"## 000000000000.{name}", *content.rstrip().splitlines()]]
    assert lines[start + 1:start + 1 + len(expected)] == expected
    assert "PROCS=masterha_manager" in expected[1]


def test_the_command_prints_the_plan_and_touches_nothing() -> None:
    """A dry run answers from the files alone, the lab up or not (a real run refuses a lab that is
    down before anything is sent): exit 0, the plan on stdout."""
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "run", str(ROOT / "playbooks" / "pg-dcs-down.yaml"),
                          "-i", str(ROOT / "inventories" / "lab.yaml"), "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("pg-dcs-down on pg: ") and "# host dcs1, steps[0]" in res.stdout
    assert "PROCS=etcd" in res.stdout
