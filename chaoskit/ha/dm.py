"""Dameng DM data guard (数据守护): a dmserver and a dmwatcher on each database host, and a
confirmation monitor (`dmmonitor`, MON_DW_CONFIRM=1) on a host of its own that must agree before
a standby takes over.

- roles: asked of each instance over SQL (`V$INSTANCE`: MODE$ PRIMARY/NORMAL and STATUS$ OPEN is
  the writer, STANDBY is a replica), on kept sessions as MHA does; beside it the monitor's own
  view (`show` run on the monitor host: each watcher's WSTATUS, each instance's INST_OK, ISTATUS,
  IMODE, and the LSNs of its EP section), for preflight and the evidence;
- detection: the monitor's view polled (`show` every `show_interval`) and, where the inventory
  names it, the confirmation monitor's log followed on its host. Events: the primary's instance
  no longer OPEN/OK in the monitor's view (`leader_lost`: its watcher noticed), a standby's
  watcher in FAILOVER (`confirmed`: the monitor confirmed and the takeover runs; a DM-only
  sub-phase of detection, see the methodology), in TAKEOVER (`failover_started`: a manual
  takeover), a former standby OPEN in PRIMARY mode (`promoted`). The log's lines
  (`[monitor] YYYY-MM-DD HH:MM:SS: 守护进程(X)状态切换 [A-->B]`) are stamped by the monitor host's
  clock as they are read, so their second-granularity text stamp is not what times them;
- switchover / takeover: `dmmonitor` commands on the monitor host (`login`, then
  `switchover GROUP.INSTANCE` or `takeover GROUP.INSTANCE`, answered `y`), fed on its standard
  input; the login's user and password come from a file on the monitor host (`login_file`), never
  from a command line. The result is judged by SQL: the candidate is the writer within the bound;
- rejoin: DM's watcher brings a returning old primary back as a standby by itself (automatic
  recovery, DW_RECOVER_TIME) when its redo is not ahead of the new primary's; the action starts
  its dmserver (its declared start command, as a kill's revert does) and waits until the
  instance reports STANDBY and OPEN. A diverged old primary needs a rebuild from a backup, which
  chaoskit does not do: the action then says it did not rejoin within the bound.

Instance names: each member host maps to its DM instance name (`ha.instances`), the name the
monitor's output and commands use. Every format relied on is a fixture under tests/fixtures/ha/
with its source (tests/fixtures/ha/DM-SOURCES.md); none was captured from a live server here.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from chaoskit.ha.base import ActionResult, HaConfig, HAManager, ManagerEvent, MemberView, Watcher
from chaoskit.ha.none import sql_member_view
from chaoskit.validation import Name, SafePath

# DM group and instance names: letters, digits and `_` (what dminit and dmmal.ini accept)
DmName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]

# a monitor output line: `[monitor] 2025-10-11 16:02:32: text` (spaces after the tag vary)
MONITOR_LINE = re.compile(r"^\[monitor\]\s+(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}):\s*(?P<text>.*)$")
# a watcher's state change as the monitor reports it
STATE_CHANGE = re.compile(r"守护进程\((?P<inst>[A-Za-z0-9_]+)\)状态切换\s*\[(?P<old>[A-Z_]+)-->(?P<new>[A-Z_]+)\]")
# the watcher state that each transition enters -> event kind (other states: member_state)
ENTERED = {"FAILOVER": "confirmed", "TAKEOVER": "failover_started"}
WRITABLE_MODES = ("PRIMARY", "NORMAL")


class DmConfig(HaConfig):
    kind: Literal["dm"] = "dm"
    engines: ClassVar[frozenset[str]] = frozenset({"dameng"})
    group: DmName  # the data-guard group (dmwatcher.ini DW_GROUP / dmmal.ini), e.g. GRP1
    instances: dict[Name, DmName]  # member host -> its DM instance name (GRP1_RT_01)
    monitor_host: Name  # the inventory host the monitor runs on
    # the dmmonitor.ini chaoskit's own (normal, non-confirming) monitor reads for `show` and the
    # commands: DM allows normal monitors beside the one confirmation monitor
    monitor_ini: SafePath
    dmmonitor: SafePath = "/opt/dmdbms/bin/dmmonitor"
    # the confirmation monitor's log file (in its MON_LOG_PATH), followed during a run
    monitor_log: SafePath | None = None
    # on the monitor host, root-readable: the login user on line 1, its password on line 2
    login_file: SafePath | None = None
    show_interval: float = Field(1.0, ge=0.2, le=10.0)
    action_timeout: float = Field(120.0, ge=5.0, le=900.0)  # how long a switchover/takeover/rejoin may take

    def members_error(self, hosts: list[str]) -> str | None:
        missing = [h for h in hosts if h not in self.instances]
        extra = [h for h in self.instances if h not in hosts]
        if missing:
            return f"instances: no DM instance name for member {', '.join(missing)}"
        if extra:
            return f"instances: {', '.join(extra)} is not a member of this cluster"
        if len(set(self.instances.values())) != len(self.instances):
            return "instances: two members carry the same DM instance name"
        return None


@dataclass(frozen=True)
class DwRow:
    """One instance as the monitor's `show` reports it (its watcher and the instance)."""

    instance: str
    wstatus: str  # the watcher: OPEN, FAILOVER, SWITCHOVER, TAKEOVER, RECOVERY, STARTUP, ERROR, ...
    inst_ok: str  # OK | ERROR: whether the watcher hears from its instance
    istatus: str  # OPEN, MOUNT, SUSPEND, STARTUP, AFTER REDO, SHUTDOWN, ...
    imode: str  # PRIMARY, STANDBY, NORMAL
    rstat: str | None = None  # the archive (redo shipping) to it: VALID, INVALID, ...
    flsn: int | None = None  # its file LSN (on disk), from the EP section
    clsn: int | None = None  # its current LSN

    @property
    def writer(self) -> bool:
        return self.inst_ok == "OK" and self.istatus == "OPEN" and self.imode in WRITABLE_MODES


def _table(lines: list[str], start: int) -> tuple[list[str], list[list[str]]]:
    """The header at `start` and the rows under it until a blank line, split on whitespace (a
    two-word timestamp or status stays split; callers join what they know to be one value)."""
    header = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return header, rows


def _row(header: list[str], words: list[str]) -> dict[str, str]:
    """A row's values by column, joining the two words of a `YYYY-MM-DD HH:MM:SS` time and of
    the instance status `AFTER REDO` so the columns line up again."""
    merged: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if (re.fullmatch(r"\d{4}-\d{2}-\d{2}", w) and re.fullmatch(r"\d{2}:\d{2}:\d{2}", nxt)) or \
                (w.upper() == "AFTER" and nxt.upper() == "REDO"):
            merged.append(f"{w} {nxt}")
            i += 2
        else:
            merged.append(w)
            i += 1
    return dict(zip(header, merged, strict=False))


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def parse_show(text: str) -> dict[str, DwRow]:
    """`show` of dmmonitor: instance name -> its row. The global section (`DW_IP ... WSTATUS INAME
    INST_OK ... ISTATUS IMODE ... RSTAT`, one row per watcher) gives the states; an EP section
    under it (`INST_IP INST_PORT INST_OK INAME ISTATUS IMODE ... FLSN ... CLSN`) the LSNs. Words are
    upper-cased (versions print `Open` or `OPEN`)."""
    lines = text.splitlines()
    rows: dict[str, dict[str, str]] = {}
    lsns: dict[str, dict[str, str]] = {}
    for i, line in enumerate(lines):
        words = line.split()
        section = rows if "WSTATUS" in words else lsns if "INST_IP" in words else None
        if section is None or "INAME" not in words:
            continue
        header, body = _table(lines, i)
        for w in body:
            r = _row(header, w)
            if "INAME" in r:
                section[r["INAME"]] = r
    out = {}
    for name, r in rows.items():
        ep = lsns.get(name, {})
        out[name] = DwRow(instance=name, wstatus=r.get("WSTATUS", "").upper(), inst_ok=r.get("INST_OK", "").upper(),
                          istatus=r.get("ISTATUS", ep.get("ISTATUS", "")).upper(),
                          imode=r.get("IMODE", ep.get("IMODE", "")).upper(),
                          rstat=(r.get("RSTAT") or ep.get("RSTAT") or "").upper() or None,
                          flsn=_int(ep.get("FLSN")), clsn=_int(ep.get("CLSN")))
    return out


def monitor_event(line: str) -> tuple[str, str, str, str] | None:
    """A monitor output/log line that reports a watcher's state change, as (event kind, instance,
    old state, new state); None for any other line."""
    m = MONITOR_LINE.match(line.strip())
    text = m.group("text") if m else line
    s = STATE_CHANGE.search(text)
    if s is None:
        return None
    new = s.group("new")
    return ENTERED.get(new, "member_state"), s.group("inst"), s.group("old"), new


def view_events(before: dict[str, DwRow], after: dict[str, DwRow]) -> list[tuple[str, str, str]]:
    """What changed between two `show`s, as (event kind, instance, detail): the writer leaving
    (`leader_lost`), a watcher entering FAILOVER (`confirmed`) or TAKEOVER (`failover_started`),
    another instance becoming the writer (`promoted`)."""
    out = []
    writers_before = {n for n, r in before.items() if r.writer}
    for name, row in after.items():
        old = before.get(name)
        if old is None:
            continue
        if name in writers_before and not row.writer:
            out.append(("leader_lost", name, f"{name}: INST_OK {row.inst_ok}, {row.istatus} {row.imode} "
                                             f"(watcher {row.wstatus})"))
        if row.wstatus != old.wstatus and row.wstatus in ENTERED:
            out.append((ENTERED[row.wstatus], name, f"watcher of {name}: {old.wstatus} -> {row.wstatus}"))
        if row.writer and not old.writer:
            out.append(("promoted", name, f"{name}: {row.istatus} {row.imode}"))
    return out


def command_script(dmmonitor: str, ini: str, commands: list[str], login_file: str | None) -> str:
    """The shell that runs chaoskit's own monitor once: `login` (user and password read from the
    login file, never a command line), then the commands, then `exit`, fed on its standard input.
    Every word is quoted; the commands are built from validated names only."""
    feed = []
    if login_file is not None:
        feed.append("printf '%s\\n' login")
        feed.append(f"head -n 2 -- {shlex.quote(login_file)}")
    for command in commands:
        feed.append(f"printf '%s\\n' {shlex.quote(command)}")
    feed.append("printf '%s\\n' exit")
    return f"{{ {'; '.join(feed)}; }} | {shlex.quote(dmmonitor)} {shlex.quote('path=' + ini)} 2>&1"


class DmManager(HAManager):
    kind = "dm"
    Config = DmConfig
    view_is_own: ClassVar[bool] = False  # roles come from the instances; the monitor speaks through its view
    rejoin_after_restart: ClassVar[bool] = True  # DM's watcher rejoins a running old primary by itself

    @property
    def cfg(self) -> DmConfig:
        return self.config  # type: ignore[return-value]

    def _member_of(self, instance: str) -> str | None:
        return next((h for h, name in self.cfg.instances.items() if name == instance), None)

    def _on_monitor(self, command: str, timeout: float = 60) -> Any:
        if self.pool is None:
            raise RuntimeError("DM's monitor is asked over SSH on its host (no remote pool given)")
        return self.pool.get(self.cfg.monitor_host).shell(command, timeout=timeout, check=False)

    def monitor(self, commands: list[str], login: bool = False, timeout: float = 60) -> str:
        """Run chaoskit's monitor once with these commands; its output."""
        if login and self.cfg.login_file is None:
            raise RuntimeError("dmmonitor commands that change roles need ha.login_file (the monitor login)")
        script = command_script(self.cfg.dmmonitor, self.cfg.monitor_ini, commands,
                                self.cfg.login_file if login else None)
        res = self._on_monitor(script, timeout=timeout)
        return str(res.stdout) + str(res.stderr)

    def show(self) -> dict[str, DwRow]:
        try:
            return parse_show(self.monitor(["show"], timeout=30))
        except Exception:  # the monitor host unreachable: no view, said by health()
            return {}

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        sessions = self.sessions()
        answers = sessions.ask_all(sessions.driver.role)
        return [sql_member_view(m.host, role or "down", err) for m, (role, err) in zip(self.cluster.members, answers,
                                                                                        strict=True)]

    def health(self) -> tuple[bool, str]:
        ok, why = super().health()
        if not ok:
            return ok, why
        view = self.show()
        if not view:
            return False, f"dmmonitor show on {self.cfg.monitor_host} gave no view of group {self.cfg.group}"
        leader = self.leader()
        writers = [n for n, r in view.items() if r.writer]
        if [self._member_of(n) for n in writers] != [leader]:
            return False, f"the monitor sees writers {writers or 'none'}, SQL sees {leader}"
        bad = [f"{n} (watcher {r.wstatus}, {r.inst_ok})" for n, r in view.items()
               if r.wstatus != "OPEN" or r.inst_ok != "OK"]
        if bad:
            return False, f"not every watcher is OPEN with its instance OK: {', '.join(bad)}"
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        view = self.show()
        return {**super().describe(), "monitor_view": {n: asdict(r) for n, r in view.items()}}

    def detection_bound_s(self) -> float | None:
        """Unknown without dmwatcher.ini (DW_ERROR_TIME, INST_ERROR_TIME): the drill's recovery
        bound stands."""
        return None

    def log_sources(self) -> dict[str, dict[str, str]]:
        return {self.cfg.monitor_host: {"dmmonitor": self.cfg.monitor_log}} if self.cfg.monitor_log else {}

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        if self.pool is not None:
            w.spawn(lambda: self._poll_show(sink, w), "watch-dm-show")
            if self.cfg.monitor_log:
                w.spawn(lambda: self._follow_log(sink, w), "watch-dm-log")
        return w

    def _poll_show(self, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        """Each change between two views is stamped when it was seen (this view's answer, as every
        polled signal is), its uncertainty the time back to when the previous view was asked: the
        change happened after that and before this answer."""
        before: dict[str, DwRow] = {}
        t_before = 0.0
        while not w.stopping:
            t_sent = time.time()
            view = self.show()
            t = time.time()
            if view and before:
                for kind, inst, detail in view_events(before, view):
                    sink(ManagerEvent(t, kind, "dmmonitor-show", self._member_of(inst) or inst, detail,
                                      uncertainty_s=round(t - t_before, 6)))
            if view:
                before, t_before = view, t_sent
            w.wait(max(0.0, self.cfg.show_interval - (time.time() - t_sent)))

    def _follow_log(self, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        from chaoskit.ha.hoststream import follow_file

        assert self.cfg.monitor_log is not None
        for line in follow_file(self.pool.get(self.cfg.monitor_host), self.cfg.monitor_log,  # type: ignore[union-attr]
                                lambda: w.stopping):
            hit = monitor_event(line.text)
            if hit is not None:
                kind, inst, _, _ = hit
                sink(ManagerEvent(line.t, kind, "dmmonitor-log", self._member_of(inst) or inst,
                                  f"{self.cfg.monitor_host}: {line.text[:240]}", line.uncertainty_s, line.t_host))

    # -- actions -----------------------------------------------------------------------------
    def _command_action(self, kind: str, candidate: str | None) -> ActionResult:
        leader, candidate = self.switchover_pair(candidate)
        t_sent = time.time()
        if candidate is None or candidate not in self.cfg.instances:
            return ActionResult(kind, False, t_sent, time.time(), member=leader, candidate=candidate,
                                answer="no standby to promote")
        command = f"{kind} {self.cfg.group}.{self.cfg.instances[candidate]}"
        try:
            text = self.monitor([command, "y"], login=True, timeout=self.cfg.action_timeout)
        except Exception as exc:
            return ActionResult(kind, False, t_sent, time.time(), member=leader, candidate=candidate,
                                answer=f"{type(exc).__name__}: {str(exc)[:200]}")
        t_answered = time.time()
        ok = self._wait(lambda: self.leader() == candidate, self.cfg.action_timeout - (t_answered - t_sent))
        return ActionResult(kind, ok, t_sent, t_answered, member=leader, candidate=candidate, answer=text[-400:],
                            detail={"command": command,
                                    "judged_by": f"SQL: {candidate} the writer" + ("" if ok else " not seen")})

    def switchover(self, candidate: str | None = None) -> ActionResult:
        return self._command_action("switchover", candidate)

    def takeover(self, candidate: str | None = None) -> ActionResult:
        return self._command_action("takeover", candidate)

    def rejoin(self, member: str) -> ActionResult:
        """Wait for DM's own recovery to make the old primary a standby (the drill started its
        processes first: `rejoin_after_restart`)."""
        t_sent = time.time()
        leader, refused = self.rejoin_target(member)
        if refused is not None or leader is None:
            return refused  # type: ignore[return-value]
        node = next(m for m in self.cluster.members if m.host == member)
        sessions = self.sessions()

        def standby() -> bool:
            answer, _ = sessions.ask(node, lambda conn: sessions.driver.role(conn))
            return answer == "replica"

        ok = self._wait(standby, self.cfg.action_timeout)
        return ActionResult("rejoin", ok, t_sent, time.time(), member=member, rewound=False, rebuilt=False,
                            answer=f"{member} a standby of {leader} by DM's automatic recovery" if ok else
                            f"{member} not a standby within {self.cfg.action_timeout:.0f} s (diverged redo needs a "
                            "rebuild from a backup)")

    @staticmethod
    def _wait(condition: Callable[[], bool], bound: float, step: float = 0.5) -> bool:
        deadline = time.time() + max(0.0, bound)
        while True:
            try:
                if condition():
                    return True
            except Exception:  # a member restarting: ask again
                pass
            if time.time() >= deadline:
                return False
            time.sleep(step)


