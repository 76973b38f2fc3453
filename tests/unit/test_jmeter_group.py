"""A client group whose load JMeter makes: its JTL read as it grows, each failed sample named by
its SQLSTATE, the plan's threads counted, the connection handed over on a pipe (never on a
command line), and the group runner driven by a stand-in `jmeter` whose JTL the test wrote by
hand, so every expected figure below is counted here from that text."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaoskit.db.base import ErrorClass
from chaoskit.db.postgres import class_of_words
from chaoskit.errors import InputError
from chaoskit.playbook.loader import load_playbook
from chaoskit.recorder import FAIL, INFO, Recorder
from chaoskit.workload.engines import jmeter
from chaoskit.workload.engines.jmeter import JmeterGroup
from chaoskit.workload.spec import ClientGroup, LoadSpec

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tools"
ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "playbooks" / "jmeter" / "jdbc-steps.jmx"


def test_a_jtl_fed_in_pieces_gives_the_samples_of_the_whole_file() -> None:
    """Cut anywhere, a message with a quoted comma and newline included, the samples are those of
    the whole file, each once, and a record waits until its newline has come."""
    text = (b"timeStamp,elapsed,label,responseCode,responseMessage,threadName,success\n"
            b"1000,5,ins,200,OK,t 1-1,true\n"
            b'1010,7,ins,08006,"An I/O error, then\nEOF ""quoted""",t 1-2,false\n'
            b"1020,3,ins,200,OK,t 1-1,true\n")
    whole = jmeter.JtlReader("x.jtl").feed(text, final=True)
    assert [(s.t_start, s.thread, s.ok, s.code) for s in whole] == [
        (1.0, "t 1-1", True, "200"), (1.01, "t 1-2", False, "08006"), (1.02, "t 1-1", True, "200")]
    assert whole[1].message == 'An I/O error, then\nEOF "quoted"' and whole[1].t_end == pytest.approx(1.017)
    for cut in range(1, len(text)):
        reader = jmeter.JtlReader("x.jtl")
        first = reader.feed(text[:cut])
        assert reader.feed(text[cut:]) == whole[len(first):] and first == whole[:len(first)], cut
    reader = jmeter.JtlReader("x.jtl")
    assert reader.feed(text[:text.index(b"EOF")]) == whole[:1]  # inside the quoted newline: not yet


def test_the_fixtures_samples_read_in_pieces_are_those_read_at_once() -> None:
    path = FIX / "jmeter-2.13-server-stopped" / "results.jtl"
    data = path.read_bytes()
    reader = jmeter.JtlReader(path)
    pieces = [s for i in range(0, len(data), 4093) for s in reader.feed(data[i:i + 4093])]
    assert sorted(pieces, key=lambda s: (s.t_start, s.thread)) == jmeter.read_jtl(path)


@pytest.mark.parametrize(("code", "message", "cls"), [
    ("08006", "An I/O error occurred while sending to the backend.", ErrorClass.connection_lost),
    ("08001", "Connection to 10.0.0.1:5432 refused.", ErrorClass.connect_refused),
    ("57P03", "FATAL: the database system is starting up", ErrorClass.connect_refused),
    ("57P01", "FATAL: terminating connection due to administrator command", ErrorClass.connection_lost),
    ("25006 0", "ERROR: cannot execute INSERT in a read-only transaction", ErrorClass.read_only),
    ("40001", "could not serialize access", ErrorClass.serialization),
    ("23505", "duplicate key value", ErrorClass.constraint),
    ("53100", "could not extend file: No space left on device", ErrorClass.resources),
    ("57014", "canceling statement due to statement timeout", ErrorClass.timeout),
    ("08S01 0", "Communications link failure", ErrorClass.connection_lost),
    ("error", "Connection refused", ErrorClass.connect_refused),  # no SQLSTATE: the driver's words
    ("HY000 1290", "server is running with the --read-only option", ErrorClass.read_only),
    ("XX000", "something no rule knows", ErrorClass.other),
])
def test_a_failed_sample_is_named_by_its_sqlstate_else_by_its_words(code: str, message: str, cls: ErrorClass) -> None:
    from chaoskit.db.mysql import class_of_words as mysql_words

    words = mysql_words if code.startswith(("HY", "08S")) else class_of_words
    assert jmeter.error_class(code, message, words) == cls


def test_the_plans_threads_are_every_enabled_thread_groups(tmp_path: Path) -> None:
    """The shipped plan: 2 + 2 + 2. A disabled group does not count; `${__P(n,3)}` counts its
    default; a plugin's thread group or an expression cannot be counted (None)."""
    assert jmeter.plan_threads(PLAN) == 6
    text = PLAN.read_text()
    first = text.index('testname="step 1" enabled="true"')
    disabled = tmp_path / "d.jmx"
    disabled.write_text(text[:first] + text[first:].replace('enabled="true"', 'enabled="false"', 1))
    assert jmeter.plan_threads(disabled) == 4
    prop = tmp_path / "p.jmx"
    prop.write_text(text.replace(">2</stringProp>", ">${__P(threads, 3)}</stringProp>", 1))
    assert jmeter.plan_threads(prop) == 7
    expr = tmp_path / "e.jmx"
    expr.write_text(text.replace(">2</stringProp>", ">${__javaScript(1+1)}</stringProp>", 1))
    assert jmeter.plan_threads(expr) is None
    plugin = tmp_path / "s.jmx"
    plugin.write_text(text.replace("<ThreadGroup ", "<kg.apc.jmeter.threads.SteppingThreadGroup ", 1)
                      .replace("</ThreadGroup>", "</kg.apc.jmeter.threads.SteppingThreadGroup>", 1))
    assert jmeter.plan_threads(plugin) is None
    bomb = tmp_path / "b.jmx"
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><jmeterTestPlan>&a;</jmeterTestPlan>')
    with pytest.raises(jmeter.PlanError, match="not a JMeter plan JMeter could load"):
        jmeter.plan_threads(bomb)  # entities are refused (defusedxml), never expanded


def test_the_jdbc_url_finds_the_writer_with_each_drivers_own_words() -> None:
    eps = [("10.0.0.1", 5432), ("10.0.0.2", 5433)]
    assert jmeter.jdbc_url("postgres", eps, "app", 1.0, 2.0) == (
        "jdbc:postgresql://10.0.0.1:5432,10.0.0.2:5433/app?targetServerType=primary&connectTimeout=1"
        "&socketTimeout=2&loginTimeout=2")  # one pass over both endpoints, 1 s each
    assert jmeter.jdbc_url("postgres", eps[:1], "app", 2.4, 0.2).endswith(
        "connectTimeout=2&socketTimeout=1&loginTimeout=2")
    assert jmeter.jdbc_url("mysql", [("db1", 3306)], "shop", 1.5, 2.0) == (
        "jdbc:mysql:sequential://db1:3306/shop?connectTimeout=1500&socketTimeout=2000")
    with pytest.raises(jmeter.PlanError):
        jmeter.jdbc_url("dameng", eps, "x", 1, 1)


def test_properties_hold_any_value_exactly_and_on_one_line() -> None:
    """Java's properties format, worked by hand: `=`, `:` and `\\` escaped, a newline as \\u000a,
    é as \\u00e9, an emoji as its two UTF-16 units; a leading space kept with a backslash."""
    text = jmeter.properties_text({"chaoskit.jdbc.password": "p=w:d\\\n é😀", "k": " x"})
    assert text == "chaoskit.jdbc.password=p\\=w\\:d\\\\\\u000a \\u00e9\\ud83d\\ude00\nk=\\ x\n"
    assert text.count("\n") == 2 and text.isascii()


def test_jmeters_command_line_holds_no_value_from_the_inventory() -> None:
    argv = jmeter.run_argv("/opt/jm/bin/jmeter", "/p/plan.jmx", "/r/results.jtl", "/r/jmeter.log", "/dev/fd/7")
    assert argv[:11] == ["/opt/jm/bin/jmeter", "-n", "-t", "/p/plan.jmx", "-l", "/r/results.jtl", "-j",
                         "/r/jmeter.log", "-q", "/dev/fd/7", "-Jjmeter.save.saveservice.output_format=csv"]
    assert all(a.startswith("-J") for a in argv[10:]) and "-Jjmeter.save.saveservice.autoflush=true" in argv


# -- the group runner, driven by a stand-in `jmeter` --------------------------------------------
FAKE = r'''#!/usr/bin/env python3
"""Stands in for JMeter: keeps the properties it was given, writes the JTL the test planted, and
holds a child as bin/jmeter holds java."""
import os, subprocess, sys, time
args = sys.argv[1:]
props = open(args[args.index("-q") + 1]).read()
jtl = args[args.index("-l") + 1]
here = os.path.dirname(jtl)
open(os.path.join(here, "props.seen"), "w").write(props)
open(os.path.join(here, "argv.seen"), "w").write("\n".join(args))
child = subprocess.Popen(["sleep", "300"])
open(os.path.join(here, "child.pid"), "w").write(str(child.pid))
with open(jtl, "w") as out:
    for line in open(os.path.join(here, "planted.jtl")):
        out.write(line)
        out.flush()
        time.sleep(0.01)
mode = open(os.path.join(here, "mode")).read().strip()
if mode == "end":
    print("plan ended", flush=True)
    sys.exit(0)
time.sleep(300)
'''


def _stand_in(tmp_path: Path) -> Path:
    fake = tmp_path / "bin" / "jmeter"
    fake.parent.mkdir()
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


class _Route:
    """What the group asks of its route's driver."""

    family = "postgres"
    cluster = SimpleNamespace(user="app", database="shop")

    def endpoints(self) -> list[tuple[str, int]]:
        return [("10.0.0.1", 5432), ("10.0.0.2", 5432)]

    def password(self) -> str:
        return "s3cr=t pass"

    def classify_words(self, text: str) -> ErrorClass | None:
        return class_of_words(text)


PLANTED = ("timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,bytes\n"
           "{t0},10,JDBC insert,200,,step 1 1-1,text,true,0\n"
           "{t1},12,JDBC insert,200,,step 1 1-2,text,true,0\n"
           "{t2},20,JDBC insert,08006,An I/O error occurred,step 1 1-1,text,false,0\n"
           "{t3},0,JDBC insert,08001,Connection refused,step 1 1-1,text,false,0\n"
           "{t4},9,JDBC insert,200,,step 1 1-1,text,true,0\n"
           "{t5},11,JDBC insert,200,,step 2 2-1,text,true,0\n")


def _run(tmp_path: Path, mode: str, workers: int = 3) -> tuple[JmeterGroup, Recorder, Path, list[int]]:
    fake = _stand_in(tmp_path)
    raw = tmp_path / "raw"
    raw.mkdir()
    base = int(time.time() * 1000)
    stamps = [base + 100 * i for i in range(6)]
    (raw / "planted.jtl").write_text(PLANTED.format(**{f"t{i}": t for i, t in enumerate(stamps)}))
    (raw / "mode").write_text(mode)
    settings = jmeter.Settings.model_construct(plan=str(PLAN), bin=str(fake), writes=True)
    group = ClientGroup("jm", workers=workers, first_worker=5, tool="jmeter", settings=settings)
    spec = LoadSpec(workload="ledger", workers=workers, groups=(group,))
    rec = Recorder(base / 1000 - 1)
    runner = JmeterGroup(group, spec, raw, rec, driver=_Route())
    deadline = time.time() + 20
    while time.time() < deadline:
        runner.tick(time.time())
        if len(runner.threads) == 3 and (mode != "end" or runner.proc is None):
            break
        time.sleep(0.02)
    runner.stop()
    rec.finish()
    return runner, rec, raw, stamps


def test_each_thread_is_one_client_and_each_sample_one_op(tmp_path: Path) -> None:
    """Threads take workers 5, 6, 7 in the order their first sample was read; the 08006 write is
    unknown (the connection broke: it may have committed), the 08001 one failed (never connected);
    worker 5's outage runs from its sample at t0 (ended t0+10 ms) to its sample at t4."""
    runner, rec, _raw, t = _run(tmp_path, "hold")
    assert runner.threads == {"step 1 1-1": 5, "step 1 1-2": 6, "step 2 2-1": 7}
    totals = rec.totals()
    assert (totals["ok"], totals["info"], totals["fail"]) == (4, 1, 1)
    errors = [(e[1], e[3], e[4]) for e in rec.errors]
    assert errors == [(5, INFO, "connection_lost"), (5, FAIL, "connect_refused")]
    (gap,) = [g for g in rec.gaps if g.worker == 5]
    assert gap.last_ok_before == pytest.approx((t[0] + 10) / 1000)
    assert gap.first_ok_after == pytest.approx((t[4] + 9) / 1000)
    assert not runner.events  # stopped at the load's end: nothing to say


def test_the_connection_reaches_jmeter_on_a_pipe_and_never_on_its_command_line(tmp_path: Path) -> None:
    _run(tmp_path, "hold")
    raw = tmp_path / "raw"
    props = dict(line.split("=", 1) for line in (raw / "props.seen").read_text().splitlines())
    assert props["chaoskit.jdbc.url"] == ("jdbc\\:postgresql\\://10.0.0.1\\:5432,10.0.0.2\\:5432/shop?targetServerType"
                                          "\\=primary&connectTimeout\\=1&socketTimeout\\=2&loginTimeout\\=2")
    assert props["chaoskit.jdbc.password"] == "s3cr\\=t pass" and props["chaoskit.jdbc.user"] == "app"
    assert props["chaoskit.threads"] == "3"  # the group's clients: a plan may take its thread count from it
    argv = (raw / "argv.seen").read_text()
    assert "s3cr" not in argv and "10.0.0.1" not in argv and "-q\n/dev/fd/" in argv


def test_the_loads_stop_ends_jmeter_and_what_it_started(tmp_path: Path) -> None:
    """The stand-in holds a child as bin/jmeter holds java: both are gone after the stop."""
    runner, _, raw, _ = _run(tmp_path, "hold")
    child = int((raw / "child.pid").read_text())
    deadline = time.time() + 5
    while time.time() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child) and runner.proc is None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_jmeter_ending_before_the_loads_stop_is_said_and_more_threads_than_workers_are_counted(
        tmp_path: Path) -> None:
    runner, rec, _, _ = _run(tmp_path, "end", workers=2)
    kinds = [e["kind"] for e in runner.events]
    assert kinds == ["tool_samples_dropped", "tool_ended", "tool_samples_dropped"]
    ended = runner.events[1]
    assert ended["exit"] == 0 and "plan ended" in ended["why"] and "not started again" in ended["why"]
    assert runner.events[2]["samples"] == 1 and rec.totals()["ok"] == 3  # step 2 2-1's one sample not booked


def test_a_jmeter_group_is_paced_by_its_plan(tmp_path: Path) -> None:
    pb = tmp_path / "pb.yaml"
    pb.write_text(json.dumps({
        "name": "t", "cluster": "pg", "duration": "30s",
        "load": {"rate": 100, "groups": [{"tool": "jmeter", "jmeter": {"plan": str(PLAN),
                                                                       "bin": "/bin/true"}}]},
        "steps": [{"at": "12s", "fault": {"kind": "kill", "target": "role:primary", "processes": ["postgres"],
                                          "duration": "5s"}}]}))
    with pytest.raises(InputError) as err:
        load_playbook(pb)
    assert "paced by its plan's timers" in str(err.value) and str(err.value).startswith(str(pb))


LADDER = ROOT / "playbooks" / "jmeter" / "jdbc-ladder.jmx"


def test_a_plan_may_take_its_threads_from_chaoskit_threads(tmp_path: Path) -> None:
    """The ladder plan's one thread group is ${__P(chaoskit.threads,8)}: 8 by itself, the property's
    value where chaoskit sets it; other properties and numbers are not touched by it."""
    assert jmeter.plan_threads(LADDER) == 8
    assert jmeter.plan_threads(LADDER, {jmeter.THREADS_PROPERTY: 64}) == 64
    assert jmeter.plan_threads(LADDER, {"other.threads": 64}) == 8
    assert jmeter.plan_threads(PLAN, {jmeter.THREADS_PROPERTY: 64}) == 6
    # a drill's group: workers given set chaoskit.threads, so such a plan runs as many as asked
    pb = tmp_path / "pb.yaml"
    text = (ROOT / "playbooks" / "pg-kill-primary-jmeter.yaml").read_text()
    pb.write_text(text.replace("{plan: jmeter/jdbc-steps.jmx, bin: jmeter/jmeter-2.13-debian}",
                               f"{{plan: {LADDER}, bin: {ROOT / 'playbooks/jmeter/jmeter-2.13-debian'}}}, workers: 16"))
    group = next(g for g in load_playbook(pb).playbook.load.to_spec().client_groups() if g.tool == "jmeter")
    assert group.workers == 16
    pb.write_text(text.replace("jmeter/jdbc-steps.jmx, bin: jmeter/jmeter-2.13-debian}",
                               f"{ROOT / 'playbooks/jmeter/jdbc-steps.jmx'}, bin: "
                               f"{ROOT / 'playbooks/jmeter/jmeter-2.13-debian'}}}, workers: 16"))
    with pytest.raises(InputError, match=r"workers \(16\) is not the plan's 6 threads"):
        load_playbook(pb)


def _ladder(tmp_path: Path, plan: Path, workers: str = "[8, 16]", tool: str = "jmeter") -> object:
    from chaoskit.playbook.experiment import Experiment
    from chaoskit.yamlsrc import load_yaml

    path = tmp_path / "exp.yaml"
    text = (ROOT / "playbooks" / "jmeter-thread-ladder.yaml").read_text()
    path.write_text(text.replace("jmeter/jdbc-ladder.jmx", str(plan)).replace("[8, 16, 32, 64]", workers)
                    .replace("tool: jmeter", f"tool: {tool}").replace("bin: jmeter/", f"bin: {ROOT}/playbooks/jmeter/"))
    return Experiment.model_validate(load_yaml(path).data, context={"base_dir": str(tmp_path)})


def test_a_jmeter_ladder_sets_each_cells_threads_through_the_plans_property(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from chaoskit.drill.experiment import cell_load
    from chaoskit.playbook.experiment import Experiment
    from chaoskit.yamlsrc import load_yaml

    shipped = Experiment.model_validate(load_yaml(ROOT / "playbooks" / "jmeter-thread-ladder.yaml").data,
                                        context={"base_dir": str(ROOT / "playbooks")})
    assert shipped.load is not None and shipped.load.jmeter is not None and shipped.load.jmeter.plan == str(LADDER)
    spec = cell_load("jmeter", 32, 2.0, 1000, shipped.load, prepare=True)
    (group,) = spec.client_groups()
    assert (group.tool, group.workers, group.settings.plan) == ("jmeter", 32, str(LADDER))
    assert cell_load("ledger", 32, 2.0, 1000, shipped.load, prepare=True).groups == ()  # chaoskit's own clients
    with pytest.raises(ValidationError, match=r"grid.workers 8: the plan runs 6 threads with chaoskit.threads=8"):
        _ladder(tmp_path, PLAN)  # the steps plan's counts are numbers: every cell would run 6
    with pytest.raises(ValidationError, match=r"jmeter: \{...\} is for tool: jmeter, not sysbench"):
        _ladder(tmp_path, LADDER, tool="sysbench")


def test_the_shipped_playbook_runs_the_plans_six_threads_after_the_builtin_clients() -> None:
    pb = load_playbook(ROOT / "playbooks" / "pg-kill-primary-jmeter.yaml").playbook
    tool = next(g for g in pb.load.to_spec().client_groups() if g.tool == "jmeter")
    assert list(tool.worker_ids) == [5, 6, 7, 8, 9, 10] and tool.settings is not None
    assert tool.settings.plan == str(PLAN) and os.access(tool.settings.bin, os.X_OK)


def test_the_terminal_says_when_jmeter_ended_early_and_what_was_left_out() -> None:
    from chaoskit.analysis.drill import tool_restarts
    from chaoskit.report.summary import group_line

    events = [{"kind": "tool_samples_dropped", "group": "jm", "t": 1.0, "thread": "x"},
              {"kind": "tool_ended", "group": "jm", "t": 2.0, "exit": 0},
              {"kind": "tool_samples_dropped", "group": "jm", "t": 3.0, "samples": 7},
              {"kind": "tool_ended", "group": "other", "t": 2.0}]
    restarts = tool_restarts("jm", events)
    assert (restarts["ended_early"], restarts["samples_dropped"], restarts["aborted"]) == (1, 7, 0)
    line = group_line("jm", {"tool": "jmeter", "workers": [5, 6], "tool_restarts": restarts, "faults": [],
                             "rto_first_client_s": 1.0, "rto_all_clients_s": 1.0, "write_gap_s": 1.0,
                             "rpo_null_reason": "x"})
    assert "jmeter ended before the load's stop (not started again" in line
    assert "7 samples of threads beyond the group's clients not counted" in line
