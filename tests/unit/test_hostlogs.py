"""The run's window of the members' logs: cut by file position, bounded, redacted, never fatal.
Every expected value below is counted by hand from the bytes the test writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from chaoskit.hostlogs import LogSource, LogWindow, redact, sources
from chaoskit.inventory.models import Cluster
from chaoskit.testing.remote import LocalRemote
from chaoskit.validation import is_safe_path


class Pool:
    def __init__(self) -> None:
        self.remote = LocalRemote("db1")

    def get(self, name: str) -> LocalRemote:
        return self.remote


def _window(path: Path, limit: int = 1024, secrets: list[str] | None = None) -> LogWindow:
    return LogWindow(Pool(), [LogSource("db1", "postgres", str(path))], secrets or [], limit)  # type: ignore[arg-type]


def _kept() -> tuple[dict[str, str], Any]:
    written: dict[str, str] = {}
    return written, lambda name, text: written.__setitem__(name, text)


def test_only_what_was_appended_during_the_run(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_text("a\nb\n")  # 4 bytes before the run
    w = _window(log)
    w.mark()
    with log.open("a") as fh:
        fh.write("line one\nline two\n")  # 18 bytes during it
    written, write = _kept()
    [rec] = w.collect(write)
    assert written == {"logs/db1/postgres.log": "line one\nline two\n"}
    assert (rec["start_byte"], rec["end_byte"], rec["window_bytes"], rec["lines"], rec["omitted_bytes"]) == \
        (4, 22, 18, 2, 0)
    assert rec["rotated"] is False and rec["file"] == "logs/db1/postgres.log"


def test_a_long_window_keeps_its_first_and_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_text("")
    w = _window(log, limit=20)
    w.mark()
    log.write_text("".join(f"line-{i:02d}\n" for i in range(10)))  # 10 lines of 8 bytes = 80
    written, write = _kept()
    [rec] = w.collect(write)
    # head: bytes 0-9 "line-00\nli" cut at its last newline -> 8 bytes; tail: bytes 70-79 "8\nline-09\n"
    # cut after its first newline -> 8 bytes; left out: 80 - 8 - 8 = 64
    assert written["logs/db1/postgres.log"] == \
        "line-00\n[... 64 bytes of this window left out by chaoskit ...]\nline-09\n"
    assert rec["omitted_bytes"] == 64 and rec["window_bytes"] == 80


def test_a_rotated_file_is_read_from_its_start_and_said_so(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_text("x" * 99 + "\n")
    w = _window(log)
    w.mark()
    os.rename(log, tmp_path / "pg.log.1")
    log.write_text("new\n")
    written, write = _kept()
    [rec] = w.collect(write)
    assert written["logs/db1/postgres.log"] == "new\n"
    assert rec["rotated"] is True and rec["start_byte"] == 0 and rec["window_bytes"] == 4
    assert "rotated" in rec["note"]


def test_secrets_never_reach_the_run_directory(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_text("")
    w = _window(log, secrets=["TopSecretValue"])
    w.mark()
    log.write_text("auth TopSecretValue failed\nconnect postgresql://app:s3cret@db1/x\npassword=hunter2 ok\n"
                   "ALTER USER x PASSWORD 'abc'\nplain line\n")
    written, write = _kept()
    [rec] = w.collect(write)
    assert written["logs/db1/postgres.log"] == (
        "auth [redacted] failed\nconnect postgresql://app:[redacted]@db1/x\npassword=[redacted] ok\n"
        "ALTER USER x PASSWORD '[redacted]'\nplain line\n")
    assert rec["redactions"] == 4


def test_redaction_of_mysql_and_quoted_settings() -> None:
    text, n = redact("GRANT ALL TO u IDENTIFIED BY 'pw1'; primary_conninfo='user=r password=\"p w\"'", [])
    assert text == "GRANT ALL TO u IDENTIFIED BY '[redacted]'; primary_conninfo='user=r password=[redacted]'"
    assert n == 2


def test_a_missing_file_is_reported_not_fatal(tmp_path: Path) -> None:
    w = _window(tmp_path / "absent.log")
    w.mark()
    written, write = _kept()
    [rec] = w.collect(write)
    assert written == {} and rec["file"] is None and rec["note"].startswith("not collected: ")


def test_a_path_is_data_never_code(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    hostile = f"{tmp_path}/x.log;touch {canary};$(touch {canary})"
    w = LogWindow(Pool(), [LogSource("db1", "pg", hostile)], [], 1024)  # type: ignore[arg-type]
    w.mark()
    w.collect(None)
    assert not canary.exists()
    assert not is_safe_path(hostile) and not is_safe_path("relative/x.log") and not is_safe_path("/a/../etc/x")
    assert is_safe_path("/var/log/postgresql/postgresql-15-main.log")


class _Manager:
    def __init__(self, found: dict[str, dict[str, str]]) -> None:
        self.found = found

    def log_sources(self) -> dict[str, dict[str, str]]:
        return self.found


def test_the_inventory_names_logs_and_the_manager_adds_what_it_knows() -> None:
    cluster = Cluster.model_validate({
        "name": "pg", "engine": "postgres", "user": "postgres",
        "members": [{"host": "db1", "logs": {"postgres": "/var/log/pg.log"}},
                    {"host": "db2", "logs": {"postgres": "/var/log/pg.log", "repmgrd": "/etc/mine.log"}}]})
    got = sources(cluster, _Manager({"db1": {"repmgrd": "/var/log/repmgrd.log"},  # type: ignore[arg-type]
                                     "db2": {"repmgrd": "/var/log/repmgrd.log"}}))
    assert sorted((s.host, s.label, s.path) for s in got) == [
        ("db1", "postgres", "/var/log/pg.log"), ("db1", "repmgrd", "/var/log/repmgrd.log"),
        ("db2", "postgres", "/var/log/pg.log"), ("db2", "repmgrd", "/etc/mine.log")]


def test_a_log_path_with_a_space_is_refused_at_the_boundary() -> None:
    with pytest.raises(ValueError):
        Cluster.model_validate({"name": "pg", "engine": "postgres", "user": "postgres",
                                "members": [{"host": "db1", "logs": {"postgres": "/var/log/pg log"}}]})


PG3_LOG = """\
2026-11-30 22:41:02.118 UTC [51210] LOG:  started streaming WAL from primary at 0/2F000000 on timeline 6
2026-11-30 22:41:07.330 UTC [51210] FATAL:  could not receive data from WAL stream: server closed the connection
2026-11-30 22:41:07.901 UTC [51298] FATAL:  highest timeline 6 of the primary is behind recovery timeline 7
2026-11-30 22:41:08.002 UTC [51302] FATAL:  the database system is not yet accepting connections
2026-11-30 22:41:12.905 UTC [51340] FATAL:  highest timeline 6 of the primary is behind recovery timeline 7
2026-11-30 22:41:13,004 ERROR: Error communicating with DCS
2026-11-30 22:41:14 0 [ERROR] Slave I/O: error reconnecting to master 'repl@10.77.0.11:3306', Error_code: 2003
2026-11-30 22:41:15.100 UTC [51341] LOG:  checkpoint starting: time
"""


def test_complaints_are_the_last_distinct_error_lines_in_order() -> None:
    from chaoskit.hostlogs import complaints

    # 6 error lines, 5 distinct; the timeline one said twice counts at its last place
    assert complaints(PG3_LOG) == [
        "2026-11-30 22:41:12.905 UTC [51340] FATAL:  highest timeline 6 of the primary is behind recovery timeline 7",
        "2026-11-30 22:41:13,004 ERROR: Error communicating with DCS",
        "2026-11-30 22:41:14 0 [ERROR] Slave I/O: error reconnecting to master 'repl@10.77.0.11:3306', "
        "Error_code: 2003"]
    assert complaints(PG3_LOG, keep=5)[0] == ("2026-11-30 22:41:07.330 UTC [51210] FATAL:  could not receive data "
                                              "from WAL stream: server closed the connection")
    assert complaints("LOG:  all fine\nERRORS are words\n") == []


def test_collected_window_carries_its_complaints(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    log.write_text("2026-11-30 22:40:00.000 UTC [1] FATAL:  before the run\n")
    w = _window(log)
    w.mark()
    with log.open("a") as fh:
        fh.write(PG3_LOG)
    [rec] = w.collect(_kept()[1])
    assert len(rec["complaints"]) == 3 and "before the run" not in " ".join(rec["complaints"])
