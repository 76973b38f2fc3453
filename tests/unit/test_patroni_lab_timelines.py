"""The Patroni lab's check for replicas that hold an abandoned timeline's history file (a
promotion the cluster gave back): the files are written here, the expected names read off them."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaoskit.lab import recipes as lab_recipes
from chaoskit.lab import spec as lab_spec
from chaoskit.lab.recipes import patroni


def _wal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, list[str]]) -> None:
    monkeypatch.setattr(lab_spec, "STATE_DIR", tmp_path)
    for host, names in files.items():
        wal = lab_spec.Paths.pg_data(lab_recipes.lab_spec().host(host)) / "pg_wal"
        wal.mkdir(parents=True)
        for name in names:
            (wal / name).write_text("")


def members(leader: str, timeline: int) -> list[dict]:
    return [{"name": n, "role": "leader" if n == leader else "replica", "state": "streaming" if n != leader else
             "running", "timeline": timeline} for n in ("pg1", "pg2", "pg3")]


def test_a_replica_with_a_newer_timeline_history_than_the_leader(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # pg3 was promoted to timeline 7 during a pause and rewound back; pg2 fetched 7's history from it
    _wal(tmp_path, monkeypatch, {"pg1": ["00000006.history"],
                                 "pg2": ["00000006.history", "00000007.history", "000000060000000000000033"],
                                 "pg3": ["00000006.history", "00000005.history", "00000007.history.partial"]})
    assert patroni.abandoned_timelines(lab_recipes.lab_spec(), members("pg1", 6)) == {"pg2": [7]}
    # once the cluster itself reaches timeline 7 (or beyond), the file is history, not a hazard
    assert patroni.abandoned_timelines(lab_recipes.lab_spec(), members("pg1", 7)) == {}


def test_the_leader_own_files_and_timeline_ids_in_hex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the leader may hold anything; timeline 16 is 00000010.history (hex), above a leader on 15
    _wal(tmp_path, monkeypatch, {"pg1": ["00000009.history"], "pg2": ["0000000F.history", "00000010.history"],
                                 "pg3": ["0000000F.history"]})
    assert patroni.abandoned_timelines(lab_recipes.lab_spec(), members("pg1", 8)) == {"pg2": [15, 16], "pg3": [15]}
    assert patroni.abandoned_timelines(lab_recipes.lab_spec(), members("pg1", 15)) == {"pg2": [16]}
