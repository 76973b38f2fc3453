"""Disaster recovery on the lab (stack `dr`: a Patroni cluster archived and backed up with
pgBackRest to bk1, restored on rs1): the shipped point-in-time restore drill end to end. What
holds in every legal run: with archiving healthy, no write acknowledged before the target is
missing from the restored server and none started after it is there; the restore's phases come
in order; the restored server answers, and its rows, counted there with psycopg and plain SQL,
are what the recorder says they must be."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
import yaml
from drillrun import expected_rows, run
from lanes import use_stacks

from chaoskit.backup.base import PHASES
from chaoskit.inventory.models import Inventory

LAB_STACKS = ("dr",)  # added beside the session's lab, removed after this module (conftest)
SECRETS = Path("/var/lib/chaoskit-lab/secrets")


@pytest.fixture(scope="module")
def dr(lab: Inventory) -> Inventory:
    use_stacks(LAB_STACKS)
    return lab


def restored_rows(lab: Inventory, run_id: str) -> tuple[int, float | None]:
    """This run's ledger rows on the restored server, and the latest client stamp among them."""
    target = lab.clusters["pg-dr"].backup.restore_to  # type: ignore[union-attr]
    host = lab.hosts[target.host]
    with psycopg.connect(host=host.address, port=target.port, user="postgres", dbname="postgres",
                         password=(SECRETS / "pg_superuser").read_text().strip(), connect_timeout=5) as conn:
        count, latest = conn.execute("SELECT count(*), max(client_ts) FROM chaoskit_ledger WHERE run_id = %s",
                                     (run_id,)).fetchone()  # type: ignore[misc]
    return int(count), latest


def test_a_point_in_time_restore_brings_back_exactly_what_came_before_its_target(dr: Inventory,
                                                                               tmp_path: Path) -> None:
    # shortened: the drop 6 s after the backup was sent, the restore 1 s later. A full backup of
    # the lab's cluster takes about 3 s; where it ended after the target (2 s before the drop) the
    # restore starts from the stack's first backup instead and replays more: either is legal
    data = yaml.safe_load(Path("playbooks/dr/pg-restore-pitr.yaml").read_text())
    for step, at in zip(data["steps"], ("6s", "12s", "13s"), strict=True):
        step["at"] = at
    data["duration"] = "18s"
    playbook = tmp_path / "pg-restore-pitr.yaml"
    playbook.write_text(yaml.safe_dump(data, sort_keys=False))
    res, ev, _ = run(playbook, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    backup, drop, restore = ev["actions"]
    assert (backup["kind"], backup["ok"], drop["kind"], drop["ok"]) == ("backup", True, "drop_table", True), res.stdout
    assert restore["ok"] is True, restore.get("answer")
    # the target is the playbook's: 2 s before the drop was sent
    assert restore["target"]["t"] == pytest.approx(drop["t_sent"] - 2.0, abs=1e-6)
    rpo = ev["results"]["rpo"]
    pitr = rpo["pitr"]
    assert pitr["missing_before_target"] == 0 and pitr["present_after_target"] == 0, pitr
    assert rpo["phantoms"] == 0 and rpo["undelivered"] == 0 and rpo["valid"] is True
    assert pitr["acknowledged_before_target"] > 0 and pitr["acknowledged_after_target"] > 0  # both sides written
    # every phase, in order, each from the tool's or the server's own lines
    r = ev["results"]["restore"]
    assert [p["phase"] for p in r["phases"]] == [name for name, _, _ in PHASES]
    ends = [t for p in r["phases"] for t in (p["t_start"], p["t_end"])]
    assert ends == sorted(ends), r["phases"]
    assert restore["t_sent"] <= r["phases"][0]["t_start"] and r["phases"][-1]["t_end"] == r["t_answering"]
    assert r["rto_s"] == pytest.approx(r["t_answering"] - drop["t_sent"], abs=1e-3) and r["rto_s"] > r["restore_s"] > 0
    # the restored server answers, and holds what the recorder says it must
    count, latest = restored_rows(dr, ev["run_id"])
    assert count == expected_rows(ev)
    # no row there was begun after the target (client stamps: the control clock at each insert)
    assert latest is not None and latest <= restore["target"]["t"] + restore["target"]["margin_s"]
    # the server's own last replayed commit is within the target (its clock)
    assert restore["last_commit_t"] <= restore["target"]["t"] + restore["target"]["margin_s"] + 1e-3


def rows(host: str, port: int, run_id: str, *, commit_ts: bool = False, wait_s: float = 0.0) -> dict:
    """(worker, seq) -> commit time (or None) of this run's ledger rows on a server. With `wait_s`,
    a server that is not yet a writable primary, or that ends the session (Patroni restarting a
    crashed primary stops the PostgreSQL it started for crash recovery), is asked again."""
    deadline = time.monotonic() + wait_s
    what = "extract(epoch FROM pg_xact_commit_timestamp(xmin))" if commit_ts else "NULL"
    while True:
        try:
            with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres",
                                 password=(SECRETS / "pg_superuser").read_text().strip(), connect_timeout=3) as conn:
                if wait_s and conn.execute("SELECT pg_is_in_recovery()").fetchone() != (False,):
                    raise psycopg.OperationalError("still in recovery")
                got = conn.execute(f"SELECT worker, seq, {what} FROM chaoskit_ledger WHERE run_id = %s",
                                   (run_id,)).fetchall()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    return {(int(w), int(s)): (float(t) if t is not None else None) for w, s, t in got}


# A commit's stamp is taken before its WAL record is written, so near the archive's end the order of
# stamps and of records may differ by as long as a backend waited between the two: on this loaded
# 2-core machine, descheduled, possibly tens of milliseconds. Rows are exact farther than this from the cut.
CUT_S = 1.0


def backed_up_and_restored(name: str, tmp_path: Path) -> tuple[dict, dict]:
    """A shipped DR playbook whose steps are one backup and one restore, run as shipped: its
    run.json and the restore's record, once the drill passed and both actions succeeded."""
    playbook = tmp_path / f"{name}.yaml"
    playbook.write_text(Path(f"playbooks/dr/{name}.yaml").read_text())
    res, ev, _ = run(playbook, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    backup, restore = ev["actions"]
    assert (backup["kind"], backup["ok"]) == ("backup", True), backup.get("answer")
    assert restore["kind"] == "restore" and restore["ok"] is True, restore.get("answer")
    return ev, restore


def restored_is_the_sources_prefix(dr: Inventory, ev: dict, last: float) -> tuple[dict, dict]:
    """Recounted with plain SQL: the restored server holds exactly the source's rows committed up
    to `last`, the last transaction it replayed (within the stamps' margin `CUT_S`), as many as
    the recorder says it must. The restored rows and the source's, for what a test asserts more."""
    target = dr.clusters["pg-dr"].backup.restore_to  # type: ignore[union-attr]
    restored = rows(dr.hosts[target.host].address, target.port, ev["run_id"])
    source = rows(dr.hosts["dr1"].address, 5432, ev["run_id"], commit_ts=True, wait_s=90)
    assert set(restored) <= set(source)
    kept = {k for k, t in source.items() if t is not None and t <= last}
    assert all(abs(source[k] - last) <= CUT_S for k in kept ^ set(restored)), sorted(kept ^ set(restored))[:5]
    assert len(restored) == expected_rows(ev)
    return restored, source


def test_a_stalled_archive_loses_every_write_after_its_last_archived_change(dr: Inventory, tmp_path: Path) -> None:
    ev, restore = backed_up_and_restored("pg-restore-archive-stalled", tmp_path)
    cut, crash = ev["faults_injected"]
    assert (cut["host"], cut["kind"], crash["host"], crash["kind"]) == ("bk1", "kill", "dr1", "crash")
    # the archive was watched while the primary answered, and not while it was down
    archive = ev["results"]["archive"]
    assert archive["readings"] > archive["unread"] > 0, archive
    # nothing written after the repository was cut off reached the archive: a segment is pushed once
    # it is complete, and a push begun after the cut cannot connect (the last replayed commit is
    # stamped by dr1's clock, put on the control clock with its offset)
    dr1 = ev["clock_offsets"]["dr1"]
    last = restore["last_commit_host_t"]
    assert last is not None
    assert last - dr1["offset_s"] <= cut["t_effect"] + dr1["uncertainty_s"] + cut["offset_uncertainty_s"]
    # the loss the stall caused: writes were acknowledged after the last archived change
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] > 0 and rpo["phantoms"] == 0 and rpo["undelivered"] == 0, rpo
    # the restored server holds exactly the source's rows up to its last replayed commit (the
    # source, restarted after the drill, lost nothing)
    restored_is_the_sources_prefix(dr, ev, last)


def test_the_primarys_data_directory_lost_is_restored_from_what_reached_the_archive(dr: Inventory,
                                                                                   tmp_path: Path) -> None:
    """pg-restore-data-dir-lost: the primary's processes crash and its data directory is gone; the
    latest the archive holds is restored. What holds in every legal run: the archive could not be
    flushed (the primary did not answer); the restored server holds exactly the source's rows
    committed up to the last transaction it replayed; the directory came back whole at the fault's
    end (nothing left beside it), so every write lost on the restore is still on the source."""
    ev, restore = backed_up_and_restored("pg-restore-data-dir-lost", tmp_path)
    [lost] = ev["faults_injected"]
    assert (lost["host"], lost["kind"]) == ("dr1", "data_dir_lost")
    assert restore["flush_archive"]["skipped"] is True, restore["flush_archive"]
    rpo = ev["results"]["rpo"]
    assert rpo["phantoms"] == 0 and rpo["undelivered"] == 0, rpo
    assert not list(Path("/var/lib/chaoskit-lab/hosts/dr1/disk").glob("pgdata.chaoskit-*"))
    last = restore["last_commit_host_t"]
    assert last is not None
    restored, source = restored_is_the_sources_prefix(dr, ev, last)
    # what the restore lost is on the source, back with its own directory
    assert len(set(source) - set(restored)) >= rpo["lost_acknowledged"]
