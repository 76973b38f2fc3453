"""The restore's marks and phases from pgBackRest's and PostgreSQL's own log lines, recorded on the
lab (tests/unit/data/dr/README.md says how)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from chaoskit.backup.base import Mark, first_marks, line_time, phases, utc_text
from chaoskit.backup.pgbackrest import TOOL_MARKS, PgBackRest
from chaoskit.inventory.clock import ClockOffset

DATA = Path(__file__).parent / "data" / "dr"
SAME = ClockOffset(offset_s=0.0, uncertainty_s=0.0, rtt_s=0.0, samples=1)


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()


def test_line_stamps() -> None:
    assert line_time("2026-12-07 14:09:09.194 UTC [3530] LOG:  x") == at("2026-12-07 14:09:09.194")
    assert line_time("2026-12-07 14:09:00.807507+00") == at("2026-12-07 14:09:00.807507")
    assert line_time("2026-12-07 16:09:00.5 +02:00 LOG") == at("2026-12-07 14:09:00.5")
    # pgBackRest writes local time without a zone: UTC only when chaoskit ran it with TZ=UTC
    assert line_time("2026-12-07 14:09:07.340 P00   INFO: x") is None
    assert line_time("2026-12-07 14:09:07.340 P00   INFO: x", assume_utc=True) == at("2026-12-07 14:09:07.340")
    assert line_time("2026-12-07 14:09:07.340 CET [1] LOG:  x") is None  # an abbreviation may mean several zones
    assert line_time("no stamp") is None
    assert utc_text(at("2026-12-07 14:09:00.94762")) == "2026-12-07 14:09:00.947620+00"


def test_the_restored_servers_marks() -> None:
    text = (DATA / "postgres-restored.log").read_text()
    tool = PgBackRest.__new__(PgBackRest)  # the parsing needs no cluster
    marks = {m.name: m.t for m in tool.server_marks(text, SAME)}
    assert marks == {"recovery_started": at("2026-12-07 14:09:09.240"), "redo_started": at("2026-12-07 14:09:09.285"),
                     "consistent": at("2026-12-07 14:09:09.325"),
                     "replay_done": at("2026-12-07 14:09:09.382"),  # recovery stopping before commit of 759
                     "open": at("2026-12-07 14:09:09.476")}  # archive recovery complete
    assert tool.last_commit(text) == pytest.approx(at("2026-12-07 14:09:00.807507"))


def test_the_tools_marks_on_the_control_clock() -> None:
    text = (DATA / "pgbackrest-restore.log").read_text()
    ahead = ClockOffset(offset_s=0.5, uncertainty_s=0.001, rtt_s=0.002, samples=7)  # the host is 0.5 s ahead
    marks = first_marks(text, TOOL_MARKS, "pgbackrest log", ahead, assume_utc=True)
    assert [(m.name, m.t) for m in marks] == [("restore_started", at("2026-12-07 14:09:07.340") - 0.5),
                                              ("files_restored", at("2026-12-07 14:09:07.825") - 0.5)]
    assert marks[0].line is not None and "restore command begin" in marks[0].line


def test_phases_from_the_marks() -> None:
    tool = PgBackRest.__new__(PgBackRest)
    marks = first_marks((DATA / "pgbackrest-restore.log").read_text(), TOOL_MARKS, "pgbackrest log", SAME, True)
    marks += [Mark("start_sent", at("2026-12-07 14:09:08.900"), "chaoskit"),
              *tool.server_marks((DATA / "postgres-restored.log").read_text(), SAME),
              Mark("answering", at("2026-12-07 14:09:09.500"), "chaoskit")]
    got = {p["phase"]: p["seconds"] for p in phases(marks)}
    # 07.340 -> 07.825; 08.900 -> 09.240; 09.240 -> 09.382; 09.382 -> 09.476; 09.476 -> 09.500
    assert got == {"fetch_and_restore_files": 0.485, "start": 0.34, "replay": 0.142, "open": 0.094,
                   "answering": 0.024}


def test_a_phase_without_both_ends_is_left_out() -> None:
    marks = [Mark("restore_started", 10.0, "x"), Mark("files_restored", 12.5, "x"), Mark("answering", 20.0, "x")]
    assert [p["phase"] for p in phases(marks)] == ["fetch_and_restore_files"]
