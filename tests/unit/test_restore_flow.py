"""The restore every backup tool shares (`chaoskit.backup.base.restore`), with pgBackRest, against
scripted hosts: what is sent to the restore target in which order, each value quoted, and how a
failure at each step is said. The tool's and the server's answers are log lines recorded on the
lab (tests/unit/data/dr)."""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path

from chaoskit.backup.base import OPEN_TIMEOUT_S, restore
from chaoskit.backup.registry import tool_for
from chaoskit.inventory import load_inventory
from chaoskit.inventory.clock import ClockOffset
from chaoskit.testing.clock import FakeClock
from chaoskit.testing.remote import Reply, ScriptedRemote

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "dr"
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
SAME = ClockOffset(offset_s=0.0, uncertainty_s=0.0002, rtt_s=0.0004, samples=7)
TARGET = 1796652540.94762  # 2026-12-07 14:09:00.947620 UTC


HOST_SCRIPT = re.compile(r"^\(\nset -e\n")  # a host script with its files (the stop, then the start)


def kind(command: str) -> str:
    return "host script" if HOST_SCRIPT.match(command) else command.split(" ", 1)[0]


def scripted(restore_exit: int = 0) -> ScriptedRemote:
    rs1 = ScriptedRemote("rs1", default=None)
    rs1.on(HOST_SCRIPT, Reply())  # the restore target's server stopped, later started
    rs1.on(re.compile("^runuser "), Reply(restore_exit, (DATA / "pgbackrest-restore.log").read_text()
                                          if restore_exit == 0 else "",
                                          "ERROR: [075]: no backup set found" if restore_exit else ""))
    rs1.on(re.compile("^stat -L -c '%s %i' "), Reply(0, "4096 1234\n"))  # the log's size before the start
    rs1.on(re.compile("^tail -c [+]4097 "), Reply(0, base64.b64encode((DATA / "postgres-restored.log").read_bytes())
                                                  .decode()))
    return rs1


def run(rs1: ScriptedRemote, answers_after: int = 2, clock: FakeClock | None = None) -> dict:
    clock = clock or FakeClock(TARGET + 6)
    tool = tool_for(LAB.clusters["pg-dr"], LAB, lambda host: rs1, lambda host: SAME)
    tries = iter(range(10**9))
    return restore(tool, TARGET, answers=lambda: next(tries) >= answers_after, now=clock.now, sleep=clock.sleep)


def test_stop_restore_start_then_the_log_in_that_order() -> None:
    rs1 = scripted()
    # the restore's clock where the recorded logs were: started at 14:09:08.000, a write taken
    # after 15 tries 0.1 s apart (09.500, after the log's "archive recovery complete" at 09.476)
    record = run(rs1, answers_after=15, clock=FakeClock(TARGET + 7.05238))
    assert [kind(c) for c in rs1.calls] == ["host script", "runuser", "stat", "host script", "tail"]
    restore_cmd = rs1.calls[1]
    target = LAB.clusters["pg-dr"].backup.restore_to  # type: ignore[union-attr]
    assert restore_cmd.startswith("runuser -u postgres -- env TZ=UTC pgbackrest ")
    words = shlex.split(restore_cmd)
    assert f"--pg1-path={target.data_dir}" in words and f"--config={target.config}" in words
    assert "--target=2026-12-07 14:09:00.947620+00" in words and "--type=time" in words
    assert {"--delta", "--archive-mode=off", "--target-action=promote", "--stanza=dr"} <= set(words)
    assert words[-1] == "restore"
    assert record["ok"] is True and record["tool"]["backup"] == "20261207-140852F"
    assert {p["phase"]: p["seconds"] for p in record["phases"]} == {
        "fetch_and_restore_files": 0.485, "start": 1.24, "replay": 0.142, "open": 0.094, "answering": 0.024}
    assert record["last_commit_host_t"] == 1796652540.807507


def test_a_failed_restore_starts_nothing_and_says_the_tools_words() -> None:
    rs1 = scripted(restore_exit=75)
    record = run(rs1)
    assert record["ok"] is False and "no backup set found" in record["answer"]
    assert [kind(c) for c in rs1.calls] == ["host script", "runuser"]  # nothing started


def test_a_server_that_never_takes_a_write_fails_at_the_bound() -> None:
    clock = FakeClock(TARGET + 6)
    record = run(scripted(), answers_after=10**9, clock=clock)
    assert record["ok"] is False and f"within {OPEN_TIMEOUT_S:g} s" in record["answer"]
    assert OPEN_TIMEOUT_S <= record["t_answered"] - record["t_sent"] <= OPEN_TIMEOUT_S + 0.2


def test_a_server_that_does_not_start_is_said_in_its_own_words() -> None:
    """The start command ran and the server is not running: the answer carries the FATAL lines
    its log holds since the start (a restored configuration naming the source's pg_hba.conf)."""
    fatal = ("2026-12-07 21:22:04.015 UTC [9249] LOG:  could not open configuration file "
             "\"/var/lib/chaoskit-lab/hosts/dr1/disk/pgdata/pg_hba.conf\": No such file or directory\n"
             "2026-12-07 21:22:04.015 UTC [9249] FATAL:  could not load pg_hba.conf\n"
             "2026-12-07 21:22:04.018 UTC [9249] LOG:  database system is shut down\n")
    rs1 = ScriptedRemote("rs1", default=None)
    rs1.on(HOST_SCRIPT, Reply(), times=1)  # stopped
    rs1.on(HOST_SCRIPT, Reply(1), times=1)  # the start: restart_pending says it is not running
    rs1.on(re.compile("^runuser "), Reply(0, (DATA / "pgbackrest-restore.log").read_text()))
    rs1.on(re.compile("^stat -L -c '%s %i' "), Reply(0, "4096 1234\n"))
    rs1.on(re.compile("^tail -c [+]4097 "), Reply(0, base64.b64encode(fatal.encode()).decode()))
    record = run(rs1)
    assert record["ok"] is False
    assert record["answer"].startswith("the restored server did not start: its start command ran, and it is not "
                                       "running; its log (")
    assert record["answer"].endswith("FATAL:  could not load pg_hba.conf"), record["answer"]


def test_a_server_that_does_not_stop_is_not_overwritten() -> None:
    rs1 = ScriptedRemote("rs1", default=None).on(HOST_SCRIPT, Reply(1, "", "postgres: pid 42 is not the program"))
    record = run(rs1)
    assert record["ok"] is False and "did not stop" in record["answer"]
    assert len(rs1.calls) == 1


def test_the_archive_is_flushed_only_where_the_primary_answers() -> None:
    """A restore's flush_archive asks the primary first: one that is gone is not waited for (the
    tool would wait its own timeout, 60 s with pgBackRest), and the record says why."""
    from chaoskit.backup.base import ToolAnswer
    from chaoskit.drill.dr import DrActions
    from chaoskit.playbook.loader import load_playbook
    from chaoskit.playbook.record import DrillInputs
    from chaoskit.testing.fake_pg import FakePgDriver
    from chaoskit.testing.fake_pg import Reply as SqlReply

    loaded = load_playbook(ROOT / "playbooks" / "dr" / "pg-restore-archive-stalled.yaml", LAB)
    inputs = DrillInputs(loaded.playbook, LAB, "pb.yaml", "lab.yaml", playbook_sha256=loaded.sha256)
    flushes: list[str] = []

    class Tool:
        def flush_archive(self) -> ToolAnswer:
            flushes.append("check")
            return ToolAnswer(True, "INFO: check command end: completed successfully")

    def actions(refuse: int) -> DrActions:
        driver = FakePgDriver(lambda sql, params, n: SqlReply(), refuse=refuse)
        dr = DrActions(inputs, None, driver, FakeClock(TARGET), lambda step: None)  # type: ignore[arg-type]
        dr._tool = Tool()  # type: ignore[assignment]
        return dr

    gone = actions(refuse=1).flush_archive()
    assert (gone["ok"], gone["skipped"], flushes) == (False, True, [])
    assert gone["answer"].startswith("not flushed: the primary did not answer (")
    assert "Connection refused" in gone["answer"]
    there = actions(refuse=0).flush_archive()
    assert there == {"ok": True, "answer": "INFO: check command end: completed successfully", "t": TARGET}
    assert flushes == ["check"]


INFO = ('[{"name": "dr", "backup": [{"label": "20261207-140000F", "type": "full", "error": false,'
        ' "timestamp": {"start": 1796652000, "stop": 1796652003}}]}]')


def refusal(playbook_text: str, rs1: ScriptedRemote, bk1: ScriptedRemote, tmp_path: Path) -> str | None:
    from chaoskit.drill.dr import backup_refusal
    from chaoskit.playbook.loader import load_playbook

    path = tmp_path / "pb.yaml"
    path.write_text(playbook_text)
    pb = load_playbook(path, LAB).playbook
    hosts = {"rs1": rs1, "bk1": bk1}
    return backup_refusal(pb, LAB, lambda host: hosts[host], lambda host: SAME, lambda: TARGET)


def tool_host(name: str, version: Reply) -> ScriptedRemote:
    host = ScriptedRemote(name, default=None)
    host.on(re.compile(r"^runuser -u postgres -- env TZ=UTC pgbackrest version"), version)
    host.on(re.compile(r"^runuser -u postgres -- env TZ=UTC pgbackrest .* --output=json info$"), Reply(0, INFO))
    return host


def test_a_drill_is_refused_where_the_backup_tool_cannot_run_or_the_target_has_no_backup(tmp_path: Path) -> None:
    """Read-only checks before anything is touched: pgBackRest runs on the repository host and the
    restore target (the words env says where it is missing, recorded here), and a restore to a named
    instant has a backup that ended before it."""
    text = (ROOT / "playbooks" / "dr" / "pg-restore-pitr.yaml").read_text()
    ok = Reply(0, "pgBackRest 2.45\n")
    assert refusal(text, tool_host("rs1", ok), tool_host("bk1", ok), tmp_path) is None
    gone = Reply(127, "", "env: ‘pgbackrest’: No such file or directory\n")
    assert refusal(text, tool_host("rs1", gone), tool_host("bk1", ok), tmp_path) == (
        "backup tool pgbackrest: rs1: pgbackrest cannot be run by postgres (env: ‘pgbackrest’: No such file or "
        "directory)")
    # a named instant 1 s before the only backup ended: nothing to restore to (the drill's own backup
    # step is later than the instant, whatever it takes)
    named = text.replace("to: {step: 1, before: 2s}", "to: {time: '2026-12-07T14:00:02Z'}")
    assert refusal(named, tool_host("rs1", ok), tool_host("bk1", ok), tmp_path) == (
        "steps[2].action.to.time: 2026-12-07T14:00:02+00:00 is before the oldest backup in the repository "
        "(the oldest ended 2026-12-07 14:00:03.000000+00): nothing can be restored to it")
    later = text.replace("to: {step: 1, before: 2s}", "to: {time: '2026-12-07T14:00:04Z'}")
    assert refusal(later, tool_host("rs1", ok), tool_host("bk1", ok), tmp_path) is None
    # a named instant after the drill starts (here 14:09:00.947620): it may be after the disaster
    future = text.replace("to: {step: 1, before: 2s}", "to: {time: '2026-12-07T14:09:01Z'}")
    assert refusal(future, tool_host("rs1", ok), tool_host("bk1", ok), tmp_path) == (
        "steps[2].action.to.time: 2026-12-07T14:09:01+00:00 is after the drill starts (2026-12-07 "
        "14:09:00.947620+00): it may come after the disaster, whose changes the restore would bring back; a named "
        "instant must have passed (to restore to an instant of this drill, name its step: {step: N, before: 2s})")
