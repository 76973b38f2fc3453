"""DM data guard without a DM server: the monitor's formats (fixtures with their sources in
tests/fixtures/ha/DM-SOURCES.md), the events read from them, the monitor commands as the monitor
host's shell runs them (a stand-in dmmonitor), the manager's actions judged by SQL, the shipped
DM inventory and playbooks, and the service-name route's dm_svc.conf as dmPython itself reads it
(against local listeners). Every expected value is read off the fixture or worked out by hand."""

from __future__ import annotations

import shlex
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaoskit.db.base import ErrorClass
from chaoskit.db.dameng import DamengDriver, dm_error_code, dm_svc_dir, dm_svc_text
from chaoskit.drill.dryrun import dry_run_lines
from chaoskit.errors import InputError
from chaoskit.ha.dm import DmManager, DwRow, command_script, monitor_event, parse_show, view_events
from chaoskit.inventory import load_inventory
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Cluster, Host, Inventory, Member
from chaoskit.playbook.experiment import is_experiment, load_experiment
from chaoskit.playbook.loader import load_playbook
from chaoskit.testing.remote import LocalRemote, Reply, ScriptedRemote

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "ha"
DM_INV = load_inventory(ROOT / "inventories" / "dm-example.yaml")
DM_PLAYBOOKS = sorted((ROOT / "playbooks" / "dm").glob("*.yaml"))


# -- the monitor's `show` ---------------------------------------------------------------------
def test_show_of_a_healthy_group() -> None:
    """The fixture's two watcher rows and EP rows: RT_01 OPEN/OK, OPEN PRIMARY, LSNs 40521337;
    RT_02 OPEN/OK, OPEN STANDBY, file LSN 40521290 (47 behind)."""
    view = parse_show((FIX / "dm8-dmmonitor-show.txt").read_text())
    assert view == {
        "GRP1_RT_01": DwRow("GRP1_RT_01", "OPEN", "OK", "OPEN", "PRIMARY", "VALID", 40521337, 40521337),
        "GRP1_RT_02": DwRow("GRP1_RT_02", "OPEN", "OK", "OPEN", "STANDBY", "VALID", 40521290, 40521290)}
    assert [n for n, r in view.items() if r.writer] == ["GRP1_RT_01"]


def test_show_during_a_failover_and_after_it() -> None:
    """During: RT_01's watcher no longer hears its instance (INST_OK ERROR, SHUTDOWN) and RT_02's
    watcher is in FAILOVER; no writer. After the switchover fixture: RT_02 OPEN PRIMARY."""
    during = parse_show((FIX / "dm8-dmmonitor-show-failover.txt").read_text())
    assert (during["GRP1_RT_01"].inst_ok, during["GRP1_RT_01"].istatus) == ("ERROR", "SHUTDOWN")
    assert during["GRP1_RT_02"].wstatus == "FAILOVER"
    assert not any(r.writer for r in during.values())
    after = parse_show((FIX / "dm8-dmmonitor-show-after-switchover.txt").read_text())
    assert [n for n, r in after.items() if r.writer] == ["GRP1_RT_02"]


def test_view_events_name_the_watchers_detection_the_confirmation_and_the_promotion() -> None:
    healthy = parse_show((FIX / "dm8-dmmonitor-show.txt").read_text())
    during = parse_show((FIX / "dm8-dmmonitor-show-failover.txt").read_text())
    after = parse_show((FIX / "dm8-dmmonitor-show-after-switchover.txt").read_text())
    assert [(k, i) for k, i, _ in view_events(healthy, during)] == [("leader_lost", "GRP1_RT_01"),
                                                                    ("confirmed", "GRP1_RT_02")]
    # RT_02 was no writer during the failover and is one after it; its watcher leaving FAILOVER
    # is no event
    assert [(k, i) for k, i, _ in view_events(during, after)] == [("promoted", "GRP1_RT_02")]
    assert view_events(healthy, healthy) == [] and view_events({}, healthy) == []


def test_show_words_are_read_in_either_case_and_with_a_two_word_status() -> None:
    text = ("DW_IP MAL_DW_PORT WTIME WTYPE WCTLSTAT WSTATUS INAME INST_OK N_EP N_OK ISTATUS IMODE DSC_STATUS RTYPE "
            "RSTAT\n"
            "10.0.0.7 5436 2023-07-23 10:03:33 GLOBAL VALID Open GRP1_RT_02 Ok 1 1 After Redo Standby DSC_OPEN "
            "REALTIME Valid\n")
    row = parse_show(text)["GRP1_RT_02"]
    assert (row.wstatus, row.inst_ok, row.istatus, row.imode, row.rstat) == ("OPEN", "OK", "AFTER REDO", "STANDBY",
                                                                             "VALID")


# -- the monitor's output lines ---------------------------------------------------------------
def test_monitor_lines_of_a_switchover() -> None:
    """The switchover fixture: two watcher state changes into SWITCHOVER (member_state, no
    reaction); every other line (login, notices, successes) is no event."""
    hits = [monitor_event(line) for line in (FIX / "dm8-dmmonitor-switchover.txt").read_text().splitlines()]
    assert [h for h in hits if h] == [("member_state", "GRP1_RT_01", "OPEN", "SWITCHOVER"),
                                      ("member_state", "GRP1_RT_02", "OPEN", "SWITCHOVER")]


@pytest.mark.parametrize(("new", "kind"), [("FAILOVER", "confirmed"), ("TAKEOVER", "failover_started"),
                                           ("RECOVERY", "member_state")])
def test_monitor_line_kinds(new: str, kind: str) -> None:
    line = f"[monitor]         2025-10-11 16:10:06: 守护进程(GRP1_RT_02)状态切换 [OPEN-->{new}]"
    assert monitor_event(line) == (kind, "GRP1_RT_02", "OPEN", new)


# -- the monitor's commands on its host -------------------------------------------------------
STAND_IN = """#!/bin/sh
# a stand-in dmmonitor: its argv and every line it reads, then a `show` answer
printf '%s\\n' "argv:$*" >> "$LOG"
while IFS= read -r line; do
  printf 'stdin:%s\\n' "$line" >> "$LOG"
  [ "$line" = show ] && cat "$SHOW"
  [ "$line" = exit ] && exit 0
done
"""


@pytest.fixture
def monitor_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    exe = tmp_path / "dmmonitor"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    login = tmp_path / "dmmonitor.login"
    login.write_text("SYSDBA\nS3cret-pw\n")
    log = tmp_path / "argv.log"
    monkeypatch.setenv("LOG", str(log))
    monkeypatch.setenv("SHOW", str(FIX / "dm8-dmmonitor-show.txt"))
    return {"exe": exe, "login": login, "log": log, "ini": tmp_path / "dmmonitor.ini"}


def dm_inventory(paths: dict[str, Path]) -> Inventory:
    data = DM_INV.model_dump(mode="json", exclude={"source", "sha256"})
    for name in ("dm", "dm-svc"):
        data["clusters"][name]["ha"].update(dmmonitor=str(paths["exe"]), monitor_ini=str(paths["ini"]),
                                            login_file=str(paths["login"]))
    return Inventory.model_validate(data)


def test_the_monitor_runs_with_the_login_from_its_file_and_the_commands_on_stdin(monitor_host: dict) -> None:
    """What the monitor host's shell runs: dmmonitor with `path=<ini>` as its one argument, and on
    its standard input `login`, the two lines of the login file, the command, `y`, `exit`. The
    password is on no command line."""
    inv = dm_inventory(monitor_host)
    remote = LocalRemote("dmmon")
    manager = DmManager(inv.clusters["dm"], inv, RemotePool(inv, factory=lambda name: remote))
    text = manager.monitor(["switchover GRP1.GRP1_RT_02", "y"], login=True)
    assert monitor_host["log"].read_text().splitlines() == [
        f"argv:path={monitor_host['ini']}", "stdin:login", "stdin:SYSDBA", "stdin:S3cret-pw",
        "stdin:switchover GRP1.GRP1_RT_02", "stdin:y", "stdin:exit"]
    assert text == "" and not any("S3cret" in c for c in remote.calls)
    assert parse_show(manager.monitor(["show"]))["GRP1_RT_01"].writer


def test_command_script_quotes_every_word() -> None:
    """Paths that would be code unquoted stay one word each (the model's patterns refuse them
    anyway: this is the second line)."""
    script = command_script("/opt/dm bin/dmmonitor", "/x;touch y", ["show"], "/etc/a$(b)")
    assert shlex.quote("/opt/dm bin/dmmonitor") in script and shlex.quote("path=/x;touch y") in script
    assert shlex.quote("/etc/a$(b)") in script and "<<" not in script


class _Manager(DmManager):
    """The manager with its SQL view given by the test (no DM server here)."""

    leaders: list[str | None]

    def leader(self) -> str | None:
        return self.leaders.pop(0) if len(self.leaders) > 1 else self.leaders[0]


def test_switchover_is_a_monitor_command_judged_by_sql() -> None:
    inv = DM_INV
    mon = ScriptedRemote("dmmon").on("switchover GRP1.GRP1_RT_02", Reply(stdout="[monitor] ...: 切换成功\n"))
    manager = _Manager(inv.clusters["dm"], inv, RemotePool(inv, factory=lambda name: mon))
    manager.leaders = ["dm1", "dm1", "dm2"]  # before; once more as the command returns; then the standby
    res = manager.switchover("dm2")
    assert (res.ok, res.member, res.candidate) == (True, "dm1", "dm2")
    assert res.detail["command"] == "switchover GRP1.GRP1_RT_02"
    assert "head -n 2 -- /etc/chaoskit/dmmonitor.login" in mon.calls[0]
    # the standby never became the writer: not done, whatever the monitor printed
    manager = _Manager(inv.clusters["dm"], inv.model_copy(), RemotePool(inv, factory=lambda name: mon))
    manager.leaders = ["dm1"]
    manager.cfg.__dict__["action_timeout"] = 5.0  # frozen model; the test's bound only
    res = manager.takeover("dm2")
    assert res.ok is False and res.detail["command"] == "takeover GRP1.GRP1_RT_02"
    assert "not seen" in res.detail["judged_by"]


def test_dm_watch_turns_polled_views_into_events() -> None:
    """Two polls: healthy, then during the failover: leader_lost for dm1 (its watcher's
    detection) and confirmed for dm2, each stamped when the second view came, named by member,
    uncertain back to when the first view was asked (at least the poll interval)."""
    views = [(FIX / "dm8-dmmonitor-show.txt").read_text(), (FIX / "dm8-dmmonitor-show-failover.txt").read_text()]
    mon = ScriptedRemote("dmmon").on(lambda c: "show" in c, lambda c: Reply(stdout=views.pop(0) if views else ""))
    inv = DM_INV
    manager = DmManager(inv.clusters["dm-svc"], inv, RemotePool(inv, factory=lambda name: mon))
    got: list = []
    w = manager.watch(got.append)
    deadline = time.time() + 10
    while len(got) < 2 and time.time() < deadline:
        time.sleep(0.05)
    w.stop()
    assert [(e.kind, e.member, e.source) for e in got] == [("leader_lost", "dm1", "dmmonitor-show"),
                                                          ("confirmed", "dm2", "dmmonitor-show")]
    assert all(e.uncertainty_s >= manager.cfg.show_interval for e in got)


# -- the inventory ------------------------------------------------------------------------------
def test_the_example_inventory() -> None:
    dm = DM_INV.clusters["dm"]
    assert dm.ha.kind == "dm" and dm.ha.instances == {"dm1": "GRP1_RT_01", "dm2": "GRP1_RT_02"}
    assert DM_INV.processes_on("dm1")["dmserver"].unit == "DmServiceGRP1_RT_01"
    assert DM_INV.processes_on("dmmon")["dmmonitor"].comm == "dmmonitor"
    assert DM_INV.clusters["dm-svc"].dm_svc is not None and DM_INV.clusters["dm-single"].ha.kind == "none"


@pytest.mark.parametrize(("change", "message"), [
    ("      instances: {dm1: GRP1_RT_01, dm2: GRP1_RT_02}\n      monitor_host: dmmon\n      monitor_ini:",
     None),
    ("      instances: {dm1: GRP1_RT_01}\n      monitor_host: dmmon\n      monitor_ini:",
     "no DM instance name for member dm2"),
    ("      instances: {dm1: GRP1_RT_01, dm2: GRP1_RT_01}\n      monitor_host: dmmon\n      monitor_ini:",
     "two members carry the same DM instance name"),
    ("      instances: {dm1: GRP1_RT_01, dm2: \"GRP1;rm\"}\n      monitor_host: dmmon\n      monitor_ini:",
     "String should match pattern"),
])
def test_instance_names_are_checked_against_the_members(tmp_path: Path, change: str, message: str | None) -> None:
    text = (ROOT / "inventories" / "dm-example.yaml").read_text()
    old = "      instances: {dm1: GRP1_RT_01, dm2: GRP1_RT_02}\n      monitor_host: dmmon\n      monitor_ini:"
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace(old, change, 1))
    if message is None:
        load_inventory(path)
        return
    with pytest.raises(InputError, match=message) as info:
        load_inventory(path)
    assert info.value.line is not None


def test_a_process_is_found_one_way_and_a_unit_needs_comm(tmp_path: Path) -> None:
    text = (ROOT / "inventories" / "dm-example.yaml").read_text()
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace("        unit: DmMonitorServiceGRP1\n        comm: dmmonitor\n",
                                 "        unit: DmMonitorServiceGRP1\n", 1))
    with pytest.raises(InputError, match="needs comm"):
        load_inventory(path)
    path.write_text(text.replace("        unit: DmMonitorServiceGRP1\n",
                                 "        unit: DmMonitorServiceGRP1\n        pid_file: /run/dmmonitor.pid\n", 1))
    with pytest.raises(InputError, match="give pid_file or unit"):
        load_inventory(path)


# -- the playbooks ----------------------------------------------------------------------------
def test_the_dm_playbooks_are_the_seed_drills() -> None:
    assert {p.stem for p in DM_PLAYBOOKS} == {"dm-kill-primary", "dm-kill-standby", "dm-switchover",
                                              "dm-single-vs-ha", "dm-ramp", "dm-kill-primary-list-append",
                                              "dm-read-route-failover"}


@pytest.mark.parametrize("path", DM_PLAYBOOKS, ids=lambda p: p.stem)
def test_every_dm_playbook_validates_against_the_example_inventory(path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", str(path), "-i",
                          str(ROOT / "inventories" / "dm-example.yaml")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and f"{path}: ok" in res.stdout, res.stdout + res.stderr
    if is_experiment(path):
        exp = load_experiment(path, DM_INV)
        assert exp.name == path.stem
        return
    pb = load_playbook(path, DM_INV).playbook
    text = "\n".join(dry_run_lines(pb, DM_INV))
    assert pb.name == path.stem
    for step in pb.steps:  # faults on a live role; actions through the manager
        assert ("host: resolved at run time (role:" in text) if step.specs else ("through dm" in text)


def test_the_ramp_climbs_as_the_seed_did_and_the_compare_names_both_sides() -> None:
    ramp = load_experiment(ROOT / "playbooks" / "dm" / "dm-ramp.yaml", DM_INV)
    assert list(ramp.grid.workers) == [10, 15, 25, 50, 100, 300, 500, 700, 1000]
    compare = load_experiment(ROOT / "playbooks" / "dm" / "dm-single-vs-ha.yaml", DM_INV)
    assert list(compare.targets) == ["dm-single", "dm"]


# -- the client side: the service name ----------------------------------------------------------
def test_dm_svc_text_is_the_manuals_shape() -> None:
    """The service's endpoint list on its own line, its settings in its section."""
    assert dm_svc_text(DM_INV.clusters["dm-svc"], DM_INV) == (
        "DM_TPCC=(192.0.2.61:5236,192.0.2.62:5236)\n\n[DM_TPCC]\nLOGIN_MODE=(1)\nSWITCH_TIMES=(3)\n"
        "SWITCH_INTERVAL=(200)\n")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Listener:
    """A local listener that accepts and resets each connection at once, noting when."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[float] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _svc_cluster(endpoints: list[str], switch_times: int, interval_ms: int) -> tuple[Cluster, Inventory]:
    cluster = Cluster.model_validate({
        "name": "svc", "engine": "dameng", "user": "CHAOSKIT", "dsn": "CKTEST", "members": [{"host": "h"}],
        "password": {"env": "CK_DM_TEST_PW"},
        "dm_svc": {"endpoints": endpoints, "login_mode": 1, "switch_times": switch_times,
                   "switch_interval_ms": interval_ms}})
    return cluster, Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"svc": cluster})


@pytest.mark.parametrize(("switch_times", "interval_ms"), [(1, 200), (3, 400)])
def test_dmpython_reads_the_written_dm_svc_conf(switch_times: int, interval_ms: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """dmPython given the service name and chaoskit's dmsvc_path: the first endpoint refuses, the
    second (a listener that resets) is dialled once per pass, SWITCH_TIMES passes, at least
    SWITCH_INTERVAL apart; the failure is a lost connection (-70019, the reset)."""
    pytest.importorskip("dmPython")
    monkeypatch.setenv("CK_DM_TEST_PW", "not-a-real-password")
    listener = _Listener()
    try:
        cluster, inv = _svc_cluster([f"127.0.0.1:{_free_port()}", f"127.0.0.1:{listener.port}"], switch_times,
                                    interval_ms)
        driver = DamengDriver(cluster, inv, connect_timeout=2)
        with pytest.raises(Exception) as info:
            driver.connect_writer()
        assert driver.classify(info.value) == ErrorClass.connection_lost
        assert len(listener.accepted) == switch_times
        gaps = [b - a for a, b in zip(listener.accepted, listener.accepted[1:], strict=False)]
        assert all(g >= 0.9 * interval_ms / 1000 for g in gaps), gaps
    finally:
        listener.close()


def test_dmsvc_path_is_a_directory_holding_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """dmPython's dmsvc_path names a directory (its dm_svc.conf is read); the same text is one
    directory, written once."""
    text = "CKTEST=(127.0.0.1:1)\n"
    folder = Path(dm_svc_dir(text))
    assert (folder / "dm_svc.conf").read_text() == text and dm_svc_dir(text) == str(folder)
    monkeypatch.setenv("CK_DM_TEST_PW", "not-a-real-password")
    cluster, inv = _svc_cluster(["127.0.0.1:1"], 1, 0)
    params = DamengDriver(cluster, inv).connect_params("CKTEST", None)
    assert params["server"] == "CKTEST" and Path(params["dmsvc_path"], "dm_svc.conf").exists()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("engine", "mysql", "for engine: dameng only"), ("dsn", "a b", "needs dsn: the service name"),
])
def test_dm_svc_needs_a_dm_service_name(field: str, value: str, message: str) -> None:
    data = {"name": "svc", "engine": "dameng", "user": "u", "dsn": "CKTEST", "members": [{"host": "h"}],
            "dm_svc": {}, field: value}
    with pytest.raises(ValueError, match=message):
        Cluster.model_validate(data)


def test_dameng_reset_listener_is_a_lost_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener that accepts and resets (RST) each connection: -70019, a lost connection (the
    refused and the silent listener are in test_classification)."""
    pytest.importorskip("dmPython")
    listener = _Listener()
    try:
        monkeypatch.setenv("CK_DM_TEST_PW", "not-a-real-password")
        cluster = Cluster.model_validate({"name": "c", "engine": "dameng", "user": "u", "port": listener.port,
                                          "members": [{"host": "h"}], "password": {"env": "CK_DM_TEST_PW"}})
        inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"c": cluster})
        driver = DamengDriver(cluster, inv, connect_timeout=2)
        with pytest.raises(Exception) as info:
            driver.connect_writer()
        assert dm_error_code(info.value)[0] == -70019 and driver.classify(info.value) == ErrorClass.connection_lost
        assert len(listener.accepted) == 1
    finally:
        listener.close()


class _Cursor:
    def __init__(self, answers: dict[str, list[tuple] | Exception], asked: list[str]) -> None:
        self.answers, self.asked, self.rows = answers, asked, []

    def execute(self, sql: str, params: tuple = ()) -> None:
        self.asked.append(sql)
        answer = next((a for key, a in self.answers.items() if key in sql), [])
        if isinstance(answer, Exception):
            raise answer
        self.rows = answer

    def fetchall(self) -> list[tuple]:
        return self.rows

    def close(self) -> None:
        pass


class _Conn:
    def __init__(self, answers: dict[str, list[tuple] | Exception]) -> None:
        self.answers, self.asked = answers, []

    def cursor(self) -> _Cursor:
        return _Cursor(self.answers, self.asked)


def test_the_primary_names_its_standbys_by_the_archive_state() -> None:
    """V$ARCH_STATUS joined to V$DM_MAL_INI: VALID is streaming, INVALID is said as it is; a DM
    build with the older column names (INST_IP, INST_NAME) is asked those after the newer fail."""
    driver = DamengDriver(DM_INV.clusters["dm"], DM_INV)
    conn = _Conn({"MAL_INST_HOST": [("192.0.2.62", "VALID")]})
    assert driver.replication_status(conn) == [("192.0.2.62", "streaming", None, None)]
    old = _Conn({"MAL_INST_HOST": RuntimeError("invalid column name"), "INST_IP": [("192.0.2.62", "INVALID")]})
    assert driver.replication_status(old) == [("192.0.2.62", "invalid", None, None)]
    assert len(old.asked) == 2 and "M.INST_IP" in old.asked[1]
    assert driver.position(_Conn({"V$RLOG": [(40521337,)]})) == "40521337"


@pytest.mark.parametrize(("kind", "target", "process", "unit"), [
    ("stop", "dmmon", "dmmonitor", "DmMonitorServiceGRP1"), ("kill", "dm2", "dmwatcher", "DmWatcherServiceGRP1_RT_02"),
    ("pause", "dm1", "dmserver", "DmServiceGRP1_RT_01")])
def test_dm_processes_are_fault_targets_found_by_their_units(kind: str, target: str, process: str, unit: str) -> None:
    """`fault inject --dry-run` on each DM process: the journal's process file carries, line by
    line, no pid file, the comm, no exe, the start and stop commands, the unit."""
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "fault", "inject", "-i",
                          str(ROOT / "inventories" / "dm-example.yaml"), "--kind", kind, "--target", target,
                          "--set", f"processes=[{process}]", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith(f".proc.{process}"))
    assert lines[at + 1:at + 7] == ["", process, "", f"systemctl start {unit}", f"systemctl stop {unit}", unit]


def test_a_read_route_takes_the_first_member_that_answers_and_the_writer_route_the_primary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Members in order: port 1 refuses, port 2 answers in STANDBY mode, port 3 is the primary. The
    writer's route skips the standby; a read route (read_route: true) takes it; every connection
    not kept is closed."""
    members = [{"host": "h", "db_port": p} for p in (1, 2, 3)]
    base = {"engine": "dameng", "user": "u", "members": members}
    inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")},
                    clusters={"dm": Cluster.model_validate({**base, "name": "dm"}),
                              "dm-read": Cluster.model_validate({**base, "name": "dm-read", "read_route": True})})
    modes = {1: None, 2: "STANDBY", 3: "PRIMARY"}
    closed: list[int] = []

    class Conn:
        def __init__(self, port: int) -> None:
            self.port = port

        def close(self) -> None:
            closed.append(self.port)

    def connect_member(self: DamengDriver, member: Member) -> Conn:
        if modes[member.db_port] is None:
            raise OSError(f"[CODE:-70028]refused {member.db_port}")
        return Conn(member.db_port)

    monkeypatch.setattr(DamengDriver, "connect_member", connect_member)
    monkeypatch.setattr(DamengDriver, "is_writable", lambda self, conn: modes[conn.port] == "PRIMARY")
    assert DamengDriver(inv.clusters["dm"], inv).connect_client().port == 3 and closed == [2]
    closed.clear()
    assert DamengDriver(inv.clusters["dm-read"], inv).connect_client().port == 2 and closed == []
    assert DamengDriver(inv.clusters["dm-read"], inv).connect_writer().port == 3  # checks still reach the writer


def test_a_read_routes_service_name_is_dialled_with_its_own_dm_svc_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read route through a service name: dmPython is given the route's dm_svc.conf (standby
    first) and dials its endpoints itself, SWITCH_TIMES passes over a listener that resets."""
    pytest.importorskip("dmPython")
    monkeypatch.setenv("CK_DM_TEST_PW", "not-a-real-password")
    listener = _Listener()
    try:
        cluster = Cluster.model_validate({
            "name": "svc-read", "engine": "dameng", "user": "CHAOSKIT", "dsn": "CKREAD", "read_route": True,
            "members": [{"host": "h"}], "password": {"env": "CK_DM_TEST_PW"},
            "dm_svc": {"endpoints": [f"127.0.0.1:{listener.port}"], "login_mode": 3, "switch_times": 2,
                       "switch_interval_ms": 100}})
        inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"svc-read": cluster})
        driver = DamengDriver(cluster, inv, connect_timeout=2)
        assert "LOGIN_MODE=(3)" in dm_svc_text(cluster, inv)
        with pytest.raises(Exception) as info:
            driver.connect_client()
        assert driver.classify(info.value) == ErrorClass.connection_lost and len(listener.accepted) == 2
    finally:
        listener.close()
