"""MHA 0.58's manager log, `masterha_check_status` and application config, recorded on the lab
(tests/fixtures/ha/mha-0.58-*): a SIGKILLed primary 10.77.0.62 failed over to 10.77.0.61. The
expected values are read off the fixture files by eye."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from chaoskit.ha import mha

FIX = Path(__file__).parents[1] / "fixtures" / "ha"


def test_the_failover_told_by_the_manager_log() -> None:
    lines = (FIX / "mha-0.58-manager-failover.log").read_text().splitlines()
    hits = [(i + 1, *hit) for i, line in enumerate(lines) if (hit := mha.log_event(line)) is not None]
    # lines 1, 4, 6, 8: the failed ping, then three failed connects; 37 and 119: "Starting master
    # failover." / "..", 157: read_only=0 on the new primary; 208 and 227: the completion (the
    # second is the summary block's copy)
    assert hits == [(1, "leader_lost", None), (4, "leader_lost", None), (6, "leader_lost", None),
                    (8, "leader_lost", None), (37, "failover_started", None), (119, "failover_started", None),
                    (157, "promoted", "10.77.0.61"), (208, "member_state", "10.77.0.61"),
                    (227, "member_state", "10.77.0.61")]


def test_the_position_the_replicas_were_given() -> None:
    text = (FIX / "mha-0.58-manager-failover.log").read_text()
    [m] = list(mha.CHANGE_MASTER.finditer(text))
    assert (m.group("host"), m.group("port"), m.group("file"), m.group("pos")) == \
        ("10.77.0.61", "3306", "mysql-bin.000001", "35548045")


def test_check_status_running_and_stopped() -> None:
    assert mha.parse_status((FIX / "mha-0.58-check-status.txt").read_text()) == \
        {"running": True, "state": "PING_OK", "master": "10.77.0.61"}
    stopped = mha.parse_status((FIX / "mha-0.58-check-status-stopped.txt").read_text())
    assert stopped["running"] is False and "NOT_RUNNING" in (FIX / "mha-0.58-check-status-stopped.txt").read_text()
    assert mha.parse_status("") == {"running": False, "state": "no answer"}


def test_check_status_names_the_state_past_perls_warnings() -> None:
    """Debian's Perl 5.36 warns on stderr with every MHA tool; the state is the answer's `(N:WORD)`
    (recorded on the lab while masterha_manager checked its servers)."""
    warning = "Built-in function 'builtin::blessed' is experimental at /usr/share/perl/5.36/File/Copy.pm line 58.\n"
    starting = (FIX / "mha-0.58-check-status-initializing.txt").read_text()
    assert mha.parse_status(starting) == {"running": False, "state": "INITIALIZING_MONITOR"}
    stopped = (FIX / "mha-0.58-check-status-stopped.txt").read_text()
    assert mha.parse_status(stopped + warning) == {"running": False, "state": "NOT_RUNNING"}
    assert mha.parse_status("ssh: connect refused\n" + warning)["state"] == "ssh: connect refused"
    assert mha.parse_status(warning) == {"running": False, "state": "no answer"}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _starting(answers: list[tuple[float, str]] | list[list[tuple[float, str]]], monkeypatch: pytest.MonkeyPatch,
              log: str = "", failing_over_s: float = 0.0) -> str:
    """`_start_manager` against a manager whose status is answers[i][1] from answers[i][0] s after
    the start on (a list of such lists: one per start made), and whose log is `log`; before that,
    for `failing_over_s`, the manager that failed over still runs (a start then does nothing);
    the time is a fake clock."""
    clock = _Clock()
    monkeypatch.setattr(mha, "time", clock)
    per_start = answers if isinstance(answers[0], list) else [answers]
    starts: list[float] = []
    t0 = clock.now

    def start(cmd: str, timeout: float = 60) -> SimpleNamespace:
        assert clock.now - t0 >= failing_over_s, "started while the failover still ran: the start did nothing"
        starts.append(clock.now)
        return SimpleNamespace(stderr="", stdout="", exited=0)

    def status() -> dict:
        if not starts:
            return mha.parse_status(FAILING_OVER if clock.now - t0 < failing_over_s else STOPPED)
        timed = per_start[min(len(starts), len(per_start)) - 1]
        text = [a for at, a in timed if clock.now - starts[-1] >= at][-1]  # type: ignore[operator]
        return mha.parse_status(text)  # type: ignore[arg-type]

    fake = SimpleNamespace(cfg=SimpleNamespace(start="start-it"), status=status, _recent_log=lambda: log,
                           _on_manager=start)
    fake._await_monitoring = lambda: mha.MhaManager._await_monitoring(fake)  # type: ignore[arg-type]
    return mha.MhaManager._start_manager(fake)  # type: ignore[arg-type]


STOPPED = (FIX / "mha-0.58-check-status-stopped.txt").read_text()
STARTING = (FIX / "mha-0.58-check-status-initializing.txt").read_text()
RUNNING = (FIX / "mha-0.58-check-status.txt").read_text()
# masterha_check_status while the manager fails over (MHA 0.58's ManagerAdmin.pm wording)
FAILING_OVER = ("mha master is down and failover is running(50:FAILOVER_RUNNING). master:10.77.0.61\n"
                "Check /var/lib/chaoskit-lab/hosts/mham/mha/manager.log for details.\n")


def test_a_manager_still_checking_its_servers_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 s before its status file, 50 s of checks on a busy host: monitoring, not given up at 30 s
    assert _starting([(0, STOPPED), (5, STARTING), (55, RUNNING)], monkeypatch) == "masterha_manager monitoring again"
    # never past its checks: given up at the bound, the state said, and not started a second time
    said = _starting([(0, STOPPED), (5, STARTING)], monkeypatch)
    assert said == f"masterha_manager started but not monitoring after {mha.START_BOUND_S:.0f} s: INITIALIZING_MONITOR"


def test_a_manager_still_failing_over_is_waited_for_before_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rejoin can come while the manager that failed over still finishes (its phase 4 on a busy
    host): a start then finds it running and does nothing, and it exits without monitoring."""
    assert mha.parse_status(FAILING_OVER) == {"running": False, "state": "FAILOVER_RUNNING"}
    said = _starting([(0, STOPPED), (1, STARTING), (12, RUNNING)], monkeypatch, failing_over_s=40)
    assert said == "masterha_manager monitoring again (after its failover ended, 40 s later)"
    said = _starting([(0, STOPPED)], monkeypatch, failing_over_s=1000)
    assert said == f"masterha_manager not started again: still FAILOVER_RUNNING after {mha.FAILOVER_BOUND_S:.0f} s"


def test_a_manager_that_never_runs_is_started_once_more_then_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _starting([(0, STOPPED)], monkeypatch)
    once = f"not monitoring after {mha.START_GRACE_S:.0f} s: NOT_RUNNING"
    assert said == f"masterha_manager started but {once}; then {once}"


def test_a_start_that_stopped_says_why_in_mhas_words_and_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded log: an earlier start and failover, then a start that stopped on a replica
    whose SQL thread had stopped on a duplicate key (made on the lab). Its status went from
    initialising to stopped 2 s after the start: not waited for until the grace."""
    log = ((FIX / "mha-0.58-manager-failover.log").read_text()
           + (FIX / "mha-0.58-manager-start-error.log").read_text())
    said = _starting([[(0, STARTING), (2, STOPPED)], [(0, STOPPED), (1, STARTING), (12, RUNNING)]], monkeypatch, log)
    why = ("SQL Thread is stopped(error) on 10.77.0.63(10.77.0.63:3306)! Errno:1062, Error:Could not execute "
           "Write_rows_v1 event on table ckx.t; Duplicate entry '1' for key 'PRIMARY', Error_code: 1062; handler error "
           "HA_ERR_FOUND_DUPP_KEY; the event's master log mysql-bin.000002, end_log_pos 44231180"[:200])
    assert said == ("masterha_manager monitoring again (started 2 times; before: not monitoring after 2 s: NOT_RUNNING,"
                    f" its log says: {why} | Server 10.77.0.63(10.77.0.63:3306) is alive, but does not work as a"
                    " slave! | Error happened on checking configurations.  at /usr/share/perl5/MHA/MasterMonitor.pm"
                    " line 329.)")


def test_only_the_last_starts_errors_are_read() -> None:
    log = (FIX / "mha-0.58-manager-start-error.log").read_text()
    assert len(mha.start_errors(log, limit=10)) == 4
    assert mha.start_errors(log + "Sun Dec  6 02:14:00 2026 - [info] MHA::MasterMonitor version 0.58.\n") == []
    assert mha.start_errors("no start in here [error] x") == []


def test_the_application_config() -> None:
    conf = mha.parse_conf((FIX / "mha-0.58-app.cnf").read_text())
    assert sorted(conf) == ["server default", "server1", "server2", "server3"]
    assert conf["server default"]["ping_interval"] == "1" and conf["server default"]["repl_user"] == "repl"
    assert conf["server default"]["manager_log"] == "/var/lib/chaoskit-lab/hosts/mham/mha/manager.log"
    assert [conf[f"server{i}"]["hostname"] for i in (1, 2, 3)] == ["10.77.0.61", "10.77.0.62", "10.77.0.63"]
    assert mha.parse_conf("# c\n[a]\nx = 1\n; y=2\nnot a pair\n") == {"a": {"x": "1"}}


def test_after_a_partition_the_leader_is_the_node_mha_promoted() -> None:
    """Two writable members (the isolated old primary was never fenced): the leader is the one MHA
    monitors, else the one its log last promoted (the fixture's failover went to 10.77.0.61)."""
    from types import SimpleNamespace

    from chaoskit.ha.base import LEADER, REPLICA, MemberView
    from chaoskit.inventory.models import Inventory

    inv = Inventory.model_validate({
        "hosts": {h: {"name": h, "address": f"10.77.0.6{i}"} for i, h in ((1, "mha1"), (2, "mha2"), (3, "mha3"))},
        "clusters": {"mha": {"name": "mha", "engine": "mysql", "user": "u", "members": [
            {"host": "mha1"}, {"host": "mha2"}, {"host": "mha3"}], "ha": {"kind": "mha", "manager_host": "mha3"}}}})
    m = mha.MhaManager(inv.clusters["mha"], inv)
    roles = {"mha1": LEADER, "mha2": LEADER, "mha3": REPLICA}
    m.members = lambda: [MemberView(h, r) for h, r in roles.items()]  # type: ignore[method-assign]
    m.log_path = lambda: "/log"  # type: ignore[method-assign]
    log = (FIX / "mha-0.58-manager-failover.log").read_text()
    m._on_manager = lambda cmd, timeout=60: SimpleNamespace(stdout=log, exited=0)  # type: ignore[method-assign]
    m.status = lambda: {"running": False, "state": "NOT_RUNNING"}  # type: ignore[method-assign]
    assert m.leader() == "mha1"  # "Master failover to 10.77.0.61(...) completed successfully"
    m.status = lambda: {"running": True, "state": "PING_OK", "master": "10.77.0.62"}  # type: ignore[method-assign]
    assert m.leader() == "mha2"  # the manager runs again and monitors mha2
    roles["mha1"] = REPLICA
    assert m.leader() == "mha2"  # one writable member: that one


def test_a_replica_reports_its_own_replication() -> None:
    """SHOW SLAVE STATUS rows recorded on MariaDB 10.11 (running, then the SQL thread stopped)."""
    import json

    from chaoskit.db.mysql import slave_state

    rows = json.loads((FIX / "mariadb-10.11-slave-status.json").read_text())
    assert slave_state(rows["running"]) == ("streaming", 0, 0.0)
    assert slave_state(rows["sql_stopped"]) == ("sql_stopped", 0, None)  # Seconds_Behind_Master is NULL then
    # 21,685,370 read, 21,000,000 applied in the same binlog file: 685,370 bytes behind, 12 s
    behind = {**rows["running"], "Exec_Master_Log_Pos": 21_000_000, "Seconds_Behind_Master": 12}
    assert slave_state(behind) == ("streaming", 685_370, 12.0)
    # applying an older file than the one being read: the bytes in between are unknown here
    older = {**behind, "Relay_Master_Log_File": "mysql-bin.000000"}
    assert slave_state(older)[1] is None
    assert slave_state({**rows["running"], "Slave_IO_Running": "Connecting"})[0] == "connecting"
    assert slave_state({**rows["running"], "Slave_IO_Running": "No", "Slave_SQL_Running": "No"})[0] == "stopped"


class _Replica:
    """A connection whose SHOW SLAVE STATUS answers rows[i] from rows[i][0] s on (fake clock)."""

    def __init__(self, clock: _Clock, rows: list[tuple[float, dict]]) -> None:
        self.clock, self.rows, self.t0 = clock, rows, clock.now
        self.description: list[tuple[str]] = []
        self._row: tuple = ()

    def cursor(self) -> _Replica:
        return self

    def __enter__(self) -> _Replica:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, params: tuple = ()) -> None:
        status = [r for at, r in self.rows if self.clock.now - self.t0 >= at][-1]
        self.description = [(k,) for k in status]
        self._row = tuple(status.values())

    def fetchone(self) -> tuple | None:
        return self._row or None

    def close(self) -> None:
        return None


def _replicates(rows: list[tuple[float, dict]], monkeypatch: pytest.MonkeyPatch) -> tuple[bool, str]:
    clock = _Clock()
    monkeypatch.setattr(mha, "time", clock)
    conn = _Replica(clock, rows)
    fake = SimpleNamespace(_admin_connect=lambda node, admin: conn)
    return mha.MhaManager._replicates(fake, None, {}, 60)  # type: ignore[arg-type]


RUNS = {"Slave_IO_Running": "Yes", "Slave_SQL_Running": "Yes", "Last_IO_Error": "", "Last_SQL_Error": ""}


def test_a_replica_whose_sql_thread_stops_on_its_first_event_is_not_rejoined(monkeypatch: pytest.MonkeyPatch) -> None:
    dup = "Could not execute Write_rows_v1 event on table t; Duplicate entry '1' for key 'PRIMARY', Error_code: 1062"
    # both threads run at first, the SQL thread stops 1 s later: not a rejoin, and the replica's error said
    ok, why = _replicates([(0, RUNS), (1, {**RUNS, "Slave_SQL_Running": "No", "Last_SQL_Error": dup})], monkeypatch)
    assert (ok, why) == (False, f"sql_stopped (Last_SQL_Error {dup})")
    # running for the hold: replicating
    connecting = {**RUNS, "Slave_IO_Running": "Connecting"}
    assert _replicates([(0, connecting), (2, RUNS)], monkeypatch) == (True, "replicating")
