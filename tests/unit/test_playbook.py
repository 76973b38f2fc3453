"""Playbook validation: every shipped playbook loads; errors name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from refusal import assert_refused

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.playbook.loader import load_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
BASE = (ROOT / "playbooks" / "pg-kill-primary.yaml").read_text()


DRILLS = sorted(p for p in [*(ROOT / "playbooks").glob("pg-*.yaml"), *(ROOT / "playbooks").glob("mariadb-*.yaml"),
                            *(ROOT / "playbooks").glob("mha-*.yaml")]
                if "\nkind: " not in p.read_text())  # experiments (kind: sweep | ramp | compare) are not drills


@pytest.mark.parametrize("path", DRILLS, ids=lambda p: p.name)
def test_shipped_playbooks_validate(path: Path) -> None:
    pb = load_playbook(path, LAB).playbook
    assert pb.name == path.stem and pb.steps


@pytest.mark.parametrize(("old", "new", "at_line_of", "field", "message"), [
    ("workload: ledger", "workload: nosuch", "workload: nosuch", "load.workload", "unknown workload"),
    ("{profile: deadline, workers: 4}", "{profile: deadline, workers: 0}", "groups:", "load.groups[0].workers",
     "greater than or equal to 1"),
    ("{profile: pool, workers: 4}", "{profile: pool, workers: 4, validation: maybe}", "groups:",
     "load.groups[1].validation", "valid boolean"),
    ("at: 12s", "at: 5s", "steps:", "steps", "inside the baseline window"),
    ("duration: 40s", "duration: 20s", "steps:", "steps", "after the drill's duration"),
    ("duration: 40s", "duration: forty", "duration: forty", "duration", "not a duration"),
    ("cluster: pg", "cluster: nope", "cluster: nope", "cluster", "unknown cluster"),
    ("kind: kill", "kind: warp", "fault:", "steps[0].fault", "does not match any of the expected tags"),
    ("target: \"role:primary\"", "target: \"role:boss\"", "fault:", "steps[0].fault.target", "not a target"),
    ("processes: [patroni, postgres]", "processes: [\"patroni; reboot\"]", "fault:", "steps[0].fault.processes[0]",
     "not a valid name"),
    ("duration: 20s}", "duration: 20s, ttl: 10s}", "fault:", "steps[0].fault", "ttl (10s) must be at least"),
    ("duration: 20s}", "duration: .nan}", "fault:", "steps[0].fault.duration", "finite"),
    # several faults at one instant: each is checked against the inventory where it stands
    ("    fault: {kind: kill", "    faults:\n      - {kind: pause, target: nosuch, duration: 20s}\n      - {kind: kill",
     "nosuch", "steps[0].faults[0].target", "unknown host"),
    ("at: 12s", "at: .inf", "at: .inf", "steps[0].at", "finite"),
    ("name: pg-kill-primary", "name: \"pg-kill; rm\"", "name:", "name", "String should match"),
    ("checks: [rpo, split_brain, replica_convergence]", "checks: [rpo, bank]", "checks:", "checks",
     "bank check needs load.workload: bank (the ledger workload judges rpo, replica_convergence, split_brain)"),
    # the workload says which checks it can judge: convergence of the update workload is refused, not dropped
    ("workload: ledger", "workload: update", "checks:", "checks",
     "the replica_convergence check needs load.workload: ledger or {sql: FILE} with a @ledger (the update "
     "workload judges rpo, split_brain)"),
    ("workload: ledger", "workload: read", "checks:", "checks",
     "the rpo check needs load.workload: ledger or update or {sql: FILE} with a @ledger (the read workload "
     "judges split_brain)"),
    ("checks: [rpo, split_brain, replica_convergence]", "checks: [rpo, lineariz]", "checks:", "checks",
     "unknown check 'lineariz'; choose from anomalies, bank, replica_convergence, rpo, split_brain"),
    # list-append runs, and is judged, at the level the playbook names; no other workload takes one
    ("workload: ledger", "workload: list-append", "load:", "load", "the list-append workload needs isolation"),
    ("workload: ledger", "workload: ledger\n  isolation: serializable", "load:", "load",
     "isolation is the list-append workload's"),
    ("workload: ledger", "workload: list-append\n  isolation: snapshot", "isolation: snapshot", "load.isolation",
     "Input should be 'read committed', 'repeatable read' or 'serializable'"),
    ("slo: {", "slo: {bogus: 1, ", "slo:", "slo.bogus", "unknown field"),
    # a client route must be the same members reached another way
    ("{profile: pool, workers: 4}", "{profile: pool, workers: 4, route: mariadb}", "groups:",
     "load.groups[1].route", "not the same engine and members"),
    ("{profile: pool, workers: 4}", "{profile: pool, workers: 4, route: nosuch}", "groups:",
     "load.groups[1].route", "not in the inventory"),
])
def test_errors_name_file_line_field(tmp_path: Path, old: str, new: str, at_line_of: str, field: str,
                                     message: str) -> None:
    assert old in BASE
    assert_refused(tmp_path / "pb.yaml", BASE.replace(old, new, 1), at_line_of, field, message,
                   lambda path: load_playbook(path, LAB))


@pytest.mark.parametrize(("workload", "checks"), [
    ("ledger", ["rpo", "split_brain", "replica_convergence"]), ("update", ["rpo", "split_brain"]),
    ("bank", ["bank", "split_brain"]), ("read", ["split_brain"]), ("oltp", ["split_brain"])])
def test_without_checks_a_playbook_runs_what_its_workload_can_judge(tmp_path: Path, workload: str,
                                                                     checks: list[str]) -> None:
    text = BASE.replace("checks: [rpo, split_brain, replica_convergence]\n", "").replace(
        "workload: ledger", f"workload: {workload}")
    assert "checks:" not in text
    path = tmp_path / "pb.yaml"
    path.write_text(text)
    assert list(load_playbook(path, LAB).playbook.checks) == checks


def test_example_staging_inventory_fits_the_shipped_playbooks() -> None:
    staging = load_inventory(ROOT / "inventories" / "example-staging.yaml")
    assert staging.hosts["pg-a"].jump == "dba-chaos@192.0.2.5:22" and staging.hosts["pg-a"].become
    assert staging.clusters["pg"].ha.kind == "patroni" and staging.clusters["pg"].ha.api.scheme == "https"  # type: ignore[attr-defined]
    for path in sorted((ROOT / "playbooks").glob("pg-*.yaml")):
        load_playbook(path, staging)


def test_actions_need_known_targets(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(BASE.replace("duration: 40s", "duration: 45s").replace(
        "duration: 20s}", "duration: 20s}\n  - at: 40s\n    action: {kind: rejoin, target: pg9}"))
    with pytest.raises(InputError, match="'pg9' is not a member of cluster pg"):
        load_playbook(path, LAB)
    path.write_text(BASE.replace("duration: 20s}", "duration: 20s}\n  - at: 35s\n    action: {kind: restart}"))
    with pytest.raises(InputError, match="restart needs target"):
        load_playbook(path, LAB)



def test_the_old_patroni_key_is_refused_with_its_new_name(tmp_path: Path) -> None:
    """`patroni: {...}` (settings when only Patroni's could change) in a playbook, as in an experiment
    (test_experiment_errors): refused, naming `settings:`; given together with settings it is an
    unknown field like any other."""
    path = tmp_path / "pb.yaml"
    path.write_text(BASE + "patroni: {synchronous_mode: true}\n")
    with pytest.raises(InputError, match=r"patroni: \{\.\.\.\} is now settings: \{\.\.\.\}"):
        load_playbook(path, LAB)
    path.write_text(BASE + "patroni: {synchronous_mode: true}\nsettings: {synchronous_mode: true}\n")
    with pytest.raises(InputError, match="unknown field"):
        load_playbook(path, LAB)


EXPERIMENTS = sorted(p.stem for p in (ROOT / "playbooks").glob("*.yaml") if "\nkind: " in p.read_text())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_shipped_experiments_validate(name: str) -> None:
    from chaoskit.playbook.experiment import Experiment
    from chaoskit.yamlsrc import load_yaml

    exp = Experiment.model_validate(load_yaml(ROOT / "playbooks" / f"{name}.yaml").data,
                                    context={"base_dir": str(ROOT / "playbooks")})
    assert exp.name == name and exp.cluster in LAB.clusters and len(EXPERIMENTS) >= 11


@pytest.mark.parametrize(("extra", "message"), [
    ("link: {source: pg2}\n", "a host link needs dest"),
    ("settings: {synchronous_mode: true}\ngrid: {synchronous_mode: [false, true]}\n", "either fixed"),
    ("patroni: {synchronous_mode: true}\n", "is now settings:"),
    ("link: {source: client, stream: sideways}\n", "Input should be"),
    ("grid: {delay_ms: [0, 5]}\n", "grid.delay_ms adds delay to a link: give link"),
])
def test_experiment_errors(tmp_path: Path, extra: str, message: str) -> None:
    import subprocess
    import sys

    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nkind: sweep\ncluster: pg\n" + extra)
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "experiment", "run", str(path), "-i",
                          str(ROOT / "inventories" / "lab.yaml")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"error: {path}:") and message in line, line


def test_a_compare_delays_the_client_link_only() -> None:
    from chaoskit.playbook.experiment import Experiment

    with pytest.raises(ValueError, match="compare adds the same delay to each target's client link"):
        Experiment.model_validate({"name": "x", "kind": "compare", "cluster": "pg", "targets": ["pg", "pg-single"],
                                   "link": {"source": "pg2", "dest": "role:primary"}, "grid": {"delay_ms": [0, 1]}})


def test_sync_axis_needs_patroni(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nkind: sweep\ncluster: pg-single\ngrid: {synchronous_mode: [false, true]}\n")
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "experiment", "run", str(path), "-i",
                          str(ROOT / "inventories" / "lab.yaml")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and f"{path}:4: grid.synchronous_mode" in res.stderr, res.stderr


@pytest.mark.parametrize(("target", "ok"), [("fault.0", True), ("fault.1", False), ("fault.7", False)])
def test_a_fault_may_target_the_host_of_an_earlier_steps_fault(tmp_path: Path, target: str, ok: bool) -> None:
    """`fault.N` is the host steps[N]'s fault landed on (known at run time, like a role): only an
    earlier fault step; on the command line it is refused (no step to name)."""
    text = BASE.replace("duration: 40s", "duration: 40s\n", 1).replace(
        "    fault: {kind: kill, target: \"role:primary\", processes: [patroni, postgres], duration: 20s}\n",
        "    fault: {kind: kill, target: \"role:primary\", processes: [patroni, postgres], duration: 20s}\n"
        f"  - at: 25s\n    fault: {{kind: partition, target: \"{target}\", peers: [\"role:any\"], duration: 5s}}\n", 1)
    path = tmp_path / "pb.yaml"
    path.write_text(text)
    if ok:
        assert load_playbook(path, LAB).playbook.steps[1].fault.target == "fault.0"  # type: ignore[union-attr]
        return
    with pytest.raises(InputError) as info:
        load_playbook(path, LAB)
    assert info.value.field == "steps[1].fault.target" and "is not a fault scheduled before" in info.value.detail


def test_a_step_target_is_refused_outside_a_playbook() -> None:
    from chaoskit.faults.targets import resolve_hosts

    with pytest.raises(InputError, match="a target in a playbook only"):
        resolve_hosts("fault.0", None, lambda: ({}, set()))


def test_a_route_against_the_base_per_repeat() -> None:
    """Worked by hand: TPS 900/1000, 880/1100 and 1000/1000 are -10 %, -20 % and 0 %: median -10 %,
    spread -20 % to 0 %; p50 2.5/2.0 and 2.2/2.0 are +25 % and +10 % (the third repeat has no p50 on
    the route): median +17.5 %."""
    from chaoskit.drill.experiment import _compare

    rows = [{"target": t, "repeat": rep, "tps": tps, "p50_ms": p50}
            for rep, (a, b) in enumerate([((1000, 2.0), (900, 2.5)), ((1100, 2.0), (880, 2.2)),
                                          ((1000, 1.0), (1000, None))])
            for t, (tps, p50) in (("direct", a), ("pgbouncer", b))]
    assert _compare(rows, ("direct", "pgbouncer")) == {"pgbouncer_vs_direct": {
        "relative_tps_change_median": -0.1, "min": -0.2, "max": 0.0, "repeats": 3,
        "relative_p50_change_median": 0.175}}
