"""MHA (Master High Availability, mha4mysql 0.58): `masterha_manager` on a manager host pings the
MySQL/MariaDB primary; when it stops answering, MHA saves what it can of the dead primary's
binlogs over SSH, applies the relay-log differences to the replicas, makes the most advanced
candidate writable (`read_only=0`) and points the others at it. Then the manager exits: MHA does
not fail over twice unattended.

- roles: from SQL (`@@read_only`, the replication threads), beside the manager's own status
  (`masterha_check_status`: running and PING_OK, and which primary it monitors);
- detection and promotion: the manager's log (`manager_log` of its config) followed on the
  manager host, each line stamped by the host's clock as it is written and put on the control
  clock by the measured offset: the first failed ping (`leader_lost`), "Starting master failover"
  (`failover_started`), "Setting read_only=0 on X" (`promoted`: writes possible from here);
- switchover: `masterha_master_switch --master_state=alive` (the monitor stopped first, as MHA
  requires; the old primary becomes a replica of the new one; the monitor started again);
- rejoin: MHA leaves the old primary out. The action makes it a replica of the new primary from
  the position MHA recorded (`CHANGE MASTER TO ... MASTER_LOG_FILE/POS` in the manager's log)
  and starts the monitor again, as an operator does after an MHA failover;
- settings: the manager config's failover keys.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaoskit.ha.base import LEADER, ActionResult, HaConfig, HAManager, ManagerEvent, MemberView, Watcher
from chaoskit.ha.hoststream import match_line
from chaoskit.ha.none import sql_member_view
from chaoskit.secrets import Secret
from chaoskit.validation import Command, Name, SafePath

# manager log lines (MHA 0.58 wording) -> event kind; `node` is MHA's "host(ip:port)" label
LOG_EVENTS = [
    (re.compile(r"Got error on MySQL (?:select |insert |connect )?ping"), "leader_lost"),
    (re.compile(r"Got error on MySQL connect"), "leader_lost"),
    (re.compile(r"Starting master failover"), "failover_started"),
    (re.compile(r"Setting read_only=0 on (?P<node>[^\s(]+)"), "promoted"),
    (re.compile(r"Master failover to (?P<node>[^\s(]+)\(\S+\) completed successfully"), "member_state"),
]
# the node MHA made the primary, in its log (a failover's last line)
PROMOTED = re.compile(r"Master failover to (?P<node>[^\s(]+)\(\S+\) completed successfully")
# the position MHA pointed the replicas at: the old primary resumes from the same place
CHANGE_MASTER = re.compile(r"CHANGE MASTER TO MASTER_HOST='(?P<host>[^']+)', MASTER_PORT=(?P<port>\d+), "
                           r"MASTER_LOG_FILE='(?P<file>[^']+)', MASTER_LOG_POS=(?P<pos>\d+)")
CONF_KEYS = ("ping_interval", "ping_type", "secondary_check_script", "master_ip_failover_script",
             "shutdown_script", "check_repl_delay", "candidate_master", "no_master", "latest_priority")
STATUS = re.compile(r"is running\((?P<code>\d+):(?P<word>[A-Z_]+)\), master:(?P<master>\S+)")
# any other answer of masterha_check_status names its state the same way: "...phase(10:INITIALIZING_MONITOR)"
STATE = re.compile(r"\((?P<code>\d+):(?P<word>[A-Z_]+)\)")
# a warning Perl writes on stderr beside every MHA tool's answer ("... at /usr/share/perl/... line 58.")
PERL_WARNING = re.compile(r" at \S+\.p[ml] line \d+\.$")
# the states in which the manager is still on its way to monitoring (its start checks every server
# over SSH, which takes longer the busier the hosts are): waited for, never a reason to give up
STARTING = frozenset({"INITIALIZING_MONITOR", "RETRYING_MONITOR"})
START_GRACE_S = 30.0
START_BOUND_S = 180.0
START_ATTEMPTS = 2  # a start that stopped is made once more
# the states of a manager still handling a dead primary (its failover ends with its exit): a start
# made meanwhile would find it running and do nothing, so it is waited for, up to FAILOVER_BOUND_S
FAILING_OVER = frozenset({"PING_FAILING", "PING_FAILED", "FAILOVER_RUNNING"})
FAILOVER_BOUND_S = 300.0
REPLICATING_HOLD_S = 3.0  # a rejoined replica's threads must still run this long after they first do
# where a start of masterha_manager begins in its log, and the lines in which it says why it stopped
MONITOR_START = "MHA::MasterMonitor version"
LOG_ERROR = re.compile(r"\[error\](?:\[[^\]]*\])?\s*(?P<text>.*)")


class MhaConfig(HaConfig):
    kind: Literal["mha"] = "mha"
    engines: ClassVar[frozenset[str]] = frozenset({"mysql"})
    manager_host: Name  # the inventory host masterha_manager runs on
    conf: SafePath = "/etc/masterha/app1.cnf"
    log: SafePath | None = None  # the manager_log; default: read from the config
    # how masterha_manager is started again after a failover or a switchover (root on the manager
    # host; code by design, like a process's start command)
    start: Command | None = None
    pid_file: SafePath | None = None  # where the start command leaves the manager's pid
    tools_dir: SafePath = "/usr/bin"  # where masterha_* are (or wrappers of them, see docs/ha/mha.md)
    repl_user: str = Field("repl", pattern=r"^[A-Za-z0-9_]{1,32}$")
    repl_password: Secret | None = None  # default: the manager config's repl_password


def log_event(line: str) -> tuple[str, str | None] | None:
    """A manager log line as (event kind, the node address it names) where it tells the failover."""
    return match_line(LOG_EVENTS, line)


def parse_status(text: str) -> dict[str, Any]:
    """`masterha_check_status` output: running (PING_OK...) and the monitored primary's address."""
    m = STATUS.search(text)
    if m:
        return {"running": True, "state": m.group("word"), "master": m.group("master")}
    state = STATE.search(text)
    if state:
        return {"running": False, "state": state.group("word")}
    # no state word: the answer's own last line (Perl's warnings on stderr are not an answer)
    lines = [x for x in text.strip().splitlines() if x.strip() and not PERL_WARNING.search(x)]
    return {"running": False, "state": lines[-1][:120] if lines else "no answer"}


def start_errors(log_text: str, limit: int = 3) -> list[str]:
    """The errors the manager's last start logged (after its last `MHA::MasterMonitor version`
    line), the first `limit` of them (the cause comes first; MHA's own summary lines follow),
    without the source position: why a start did not reach monitoring, in MHA's words."""
    start = log_text.rfind(MONITOR_START)
    if start < 0:
        return []
    found = [m.group("text").strip() for m in map(LOG_ERROR.search, log_text[start:].splitlines()) if m]
    return [x[:200] for x in found if x][:limit]


def parse_conf(text: str) -> dict[str, dict[str, str]]:
    """The manager config's sections ([server default], [server1], ...) as dicts."""
    out: dict[str, dict[str, str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            out.setdefault(section, {})
            continue
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(section, {})[key.strip()] = value.strip()
    return out


class MhaManager(HAManager):
    kind = "mha"
    Config = MhaConfig
    view_is_own: ClassVar[bool] = False  # roles come from the servers; MHA speaks through its log

    @property
    def cfg(self) -> MhaConfig:
        return self.config  # type: ignore[return-value]

    def _on_manager(self, command: str, timeout: float = 60) -> Any:
        if self.pool is None:
            raise RuntimeError("MHA is read and driven over SSH on its manager host (no remote pool given)")
        return self.pool.get(self.cfg.manager_host).shell(command, timeout=timeout, check=False)

    def tool(self, name: str) -> str:
        """One of MHA's tools (`name` is one of ours, never input) in the configured directory."""
        return shlex.quote(f"{self.cfg.tools_dir}/{name}")

    def _conf(self) -> dict[str, dict[str, str]]:
        res = self._on_manager(f"cat -- {shlex.quote(self.cfg.conf)}")
        return parse_conf(res.stdout) if res.exited == 0 else {}

    def _address_map(self) -> dict[str, str]:
        return {self.inventory.member_address(m): m.host for m in self.cluster.members}

    def status(self) -> dict[str, Any]:
        try:
            res = self._on_manager(f"{self.tool('masterha_check_status')} --conf={shlex.quote(self.cfg.conf)}",
                                   timeout=30)
        except Exception as exc:
            return {"running": False, "state": f"{type(exc).__name__}: {exc}"}
        return parse_status(res.stdout + res.stderr)

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        sessions = self.sessions()
        driver = sessions.driver
        answers = sessions.ask_all(driver.role)
        return [sql_member_view(m.host, role or "down", err) for m, (role, err) in zip(self.cluster.members, answers,
                                                                                        strict=True)]

    def leader(self) -> str | None:
        """The writable member MHA stands behind. After a partition two can be writable (MHA fences
        nothing): the one MHA monitors, else the one its log last promoted, is the primary; the
        other is the isolated old one."""
        writable = [m.member for m in self.members() if m.role == LEADER]
        if len(writable) <= 1:
            return writable[0] if writable else None
        names = self._address_map()
        st = self.status()
        monitored = names.get(str(st.get("master", "")).split(":")[0]) if st.get("running") else None
        if monitored in writable:
            return monitored
        promoted = [names.get(m.group("node")) for m in PROMOTED.finditer(self._recent_log())]
        return promoted[-1] if promoted and promoted[-1] in writable else writable[0]

    def health(self) -> tuple[bool, str]:
        ok, why = super().health()
        if not ok:
            return ok, why
        st = self.status()
        if not st["running"] or st.get("state") != "PING_OK":
            return False, f"masterha_manager is not monitoring ({st.get('state')}): no failover would happen"
        leader = self.leader()
        monitored = self._address_map().get(str(st.get("master", "")).split(":")[0])
        if monitored != leader:
            return False, f"masterha_manager monitors {st.get('master')}, but the writable node is {leader}"
        return True, "ok"

    # -- settings, version -------------------------------------------------------------------
    def read_settings(self) -> dict[str, Any]:
        if self.pool is None:
            return {}
        conf = self._conf()
        default = conf.get("server default", {})
        out: dict[str, Any] = {k: (int(v) if v.isdigit() else v) for k, v in default.items() if k in CONF_KEYS}
        servers = {name: s for name, s in conf.items() if name.startswith("server") and name != "server default"}
        out["candidates"] = [s.get("hostname") for s in servers.values() if s.get("candidate_master") == "1"]
        return out

    def version(self) -> str | None:
        try:
            res = self._on_manager(f"{self.tool('masterha_manager')} --version 2>&1")
        except Exception:
            return None
        m = re.search(r"version (\d+(?:\.\d+)*)", res.stdout + res.stderr)
        return m.group(1) if m else None

    def detection_bound_s(self) -> float | None:
        """MHA declares the primary dead after about three missed pings (ping_interval, 3 s by
        default) and an SSH reachability check."""
        interval = self.read_settings().get("ping_interval", 3)
        return float(interval) * 3 if isinstance(interval, int) else None

    def log_path(self) -> str | None:
        if self.cfg.log:
            return self.cfg.log
        path = self._conf().get("server default", {}).get("manager_log")
        from chaoskit.validation import is_safe_path

        return path if path and is_safe_path(path) else None

    def _recent_log(self) -> str:
        """The manager log's last 2 MB (it grows with every failover; the last one is what is read)."""
        log = self.log_path()
        return self._on_manager(f"tail -c 2000000 -- {shlex.quote(log)}").stdout if log else ""

    def log_sources(self) -> dict[str, dict[str, str]]:
        path = self.log_path()
        return {self.cfg.manager_host: {"masterha_manager": path}} if path else {}

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        if self.pool is not None:
            w.spawn(lambda: self._follow_log(sink, w), "watch-mha-log")
        return w

    def _follow_log(self, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        from chaoskit.ha.hoststream import follow_file

        path = self.log_path()
        if path is None:
            return
        names = self._address_map()
        for line in follow_file(self.pool.get(self.cfg.manager_host), path, lambda: w.stopping):  # type: ignore[union-attr]
            hit = log_event(line.text)
            if hit is not None:
                kind, node = hit
                sink(ManagerEvent(line.t, kind, "mha-log", names.get(node or "", node),
                                  f"{self.cfg.manager_host}: {line.text[:240]}", line.uncertainty_s, line.t_host))

    # -- actions -----------------------------------------------------------------------------
    def _start_manager(self) -> str:
        """The start command, then the manager's status until it monitors. A manager still failing
        over (it exits when its failover ends; a start meanwhile would find it running and do
        nothing) is waited for first. A start that stopped (its status gone again, or never there
        within the grace) is said with what its log gives as the reason and made once more, as an
        operator would; one still checking its servers at the bound is not started twice."""
        if not self.cfg.start:
            return "masterha_manager not started again: the inventory names no ha.start command"
        t0 = time.time()
        while (state := str(self.status().get("state"))) in FAILING_OVER:
            if time.time() - t0 >= FAILOVER_BOUND_S:
                return f"masterha_manager not started again: still {state} after {time.time() - t0:.0f} s"
            time.sleep(1.0)
        waited = time.time() - t0
        after = f" (after its failover ended, {waited:.0f} s later)" if waited >= 1.0 else ""
        failed: list[str] = []
        for _attempt in range(START_ATTEMPTS):
            res = self._on_manager(self.cfg.start, timeout=60)
            state, waited = self._await_monitoring()
            if state == "PING_OK":
                return "masterha_manager monitoring again" + after + (
                    f" (started {len(failed) + 1} times; before: {'; '.join(failed)})" if failed else "")
            try:
                errors = start_errors(self._recent_log())
            except Exception as exc:  # the answer stays what it is; why the log could not be read is said
                errors = [f"its log unreadable: {type(exc).__name__}"]
            failed.append(f"not monitoring after {waited:.0f} s: {state}"
                          + (f", {res.stderr.strip()[-120:]}" if res.stderr.strip() else "")
                          + (f", its log says: {' | '.join(errors)}" if errors else ""))
            if state in STARTING:
                break
        return "masterha_manager started" + after + " but " + "; then ".join(failed)

    def _await_monitoring(self) -> tuple[str, float]:
        """(the manager's state, seconds waited) once it monitors (PING_OK), stopped after having
        begun its checks, or at the bound: START_BOUND_S while it checks its servers (progress,
        slower the busier the hosts are), START_GRACE_S in any other state (not yet running: its
        status file comes first)."""
        t0 = time.time()
        began = False
        while True:
            st = self.status()
            state = str(st.get("state"))
            if st["running"] and state == "PING_OK":
                return state, time.time() - t0
            waited = time.time() - t0
            if state in STARTING:
                began = True
            elif began:  # it had begun and its status is gone: it stopped
                return state, waited
            if waited >= (START_BOUND_S if state in STARTING else START_GRACE_S):
                return state, waited
            time.sleep(1.0)

    def switchover(self, candidate: str | None = None) -> ActionResult:
        leader, candidate = self.switchover_pair(candidate)
        t_sent = time.time()
        if candidate is None:
            return ActionResult("switchover", False, t_sent, time.time(), member=leader, answer="no replica to promote")
        node = next(m for m in self.cluster.members if m.host == candidate)
        conf = shlex.quote(self.cfg.conf)
        self._on_manager(f"{self.tool('masterha_stop')} --conf={conf}", timeout=60)
        t_sent = time.time()
        res = self._on_manager(
            f"{self.tool('masterha_master_switch')} --conf={conf} --master_state=alive "
            f"--new_master_host={shlex.quote(self.inventory.member_address(node))} "
            f"--new_master_port={int(node.db_port or self.cluster.port)} --orig_master_is_new_slave "
            "--running_updates_limit=10000 --interactive=0 2>&1", timeout=300)
        t_answered = time.time()
        text = res.stdout + res.stderr
        ok = res.exited == 0 and "completed successfully" in text
        again = self._start_manager()
        return ActionResult("switchover", ok, t_sent, t_answered, member=leader, candidate=candidate,
                            answer=text[-300:], detail={"manager": again})

    def rejoin(self, member: str) -> ActionResult:
        """The old primary as a replica of the new one, from the binlog position MHA gave the other
        replicas (its log's `CHANGE MASTER TO` for the new primary); read-only first, so no client
        can write to it meanwhile. Then the monitor again."""
        t_sent = time.time()
        leader, refused = self.rejoin_target(member)
        if refused is not None or leader is None:
            return refused  # type: ignore[return-value]
        leader_addr = self.inventory.member_address(next(m for m in self.cluster.members if m.host == leader))
        deadline = time.time() + 30.0  # the manager logs the position as it finishes the failover
        while True:
            text = self._recent_log()
            positions = [m for m in CHANGE_MASTER.finditer(text) if m.group("host") == leader_addr]
            if positions or time.time() >= deadline:
                break
            time.sleep(1.0)
        if not positions:
            return ActionResult("rejoin", False, t_sent, time.time(), member=member,
                                answer=f"the manager's log has no CHANGE MASTER TO {leader_addr}: position unknown")
        pos = positions[-1]
        admin = self._conf().get("server default", {})  # read once for the whole action
        repl_password = self._repl_password(admin)
        node = next(m for m in self.cluster.members if m.host == member)
        conn = None
        try:
            # as MHA's own admin user (the application's user must not be able to change replication)
            conn = self._admin_connect(node, admin)
            for statement, params in (
                    ("SET GLOBAL read_only=1", ()), ("STOP SLAVE", ()), ("RESET SLAVE ALL", ()),
                    ("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                     "MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s, MASTER_CONNECT_RETRY=1",
                     (leader_addr, int(pos.group("port")), self.cfg.repl_user, repl_password, pos.group("file"),
                      int(pos.group("pos")))),
                    ("START SLAVE", ())):
                with conn.cursor() as cur:
                    cur.execute(statement, params)
        except Exception as exc:
            return ActionResult("rejoin", False, t_sent, time.time(), member=member,
                                answer=f"{type(exc).__name__}: {str(exc)[:200]}")
        finally:
            if conn is not None:
                conn.close()
        ok, replicating = self._replicates(node, admin, 60)
        again = self._start_manager()
        return ActionResult("rejoin", ok, t_sent, time.time(), member=member, rewound=False, rebuilt=False,
                            answer=f"replica of {leader} from {pos.group('file')}:{pos.group('pos')}"
                                   + ("" if ok else f", not replicating: {replicating}") + f"; {again}")

    def _admin_connect(self, node: Any, admin: dict[str, str]) -> Any:
        """A connection as the MHA config's `user` (MHA's administrative account; `admin` is the
        config's [server default])."""
        import pymysql

        return pymysql.connect(host=self.inventory.member_address(node), port=int(node.db_port or self.cluster.port),
                               user=admin.get("user", "root"), password=admin.get("password", ""),
                               connect_timeout=5, read_timeout=30, write_timeout=30, autocommit=True)

    def _repl_password(self, admin: dict[str, str]) -> str:
        ref = self.cfg.repl_password
        if ref is not None and hasattr(ref, "resolve"):
            return str(ref.resolve())
        return admin.get("repl_password", "")

    def _replicates(self, node: Any, admin: dict[str, str], timeout: float) -> tuple[bool, str]:
        """Whether both replication threads run on `node` and still do REPLICATING_HOLD_S later
        (a SQL thread that stops on its first event, a duplicate key of a diverged old primary,
        is caught here, not by the manager refusing to start), within the bound; else why not,
        with the replica's own last errors. One connection, made again only after an error."""
        from chaoskit.db.mysql import slave_state, slave_status

        deadline = time.time() + timeout
        since: float | None = None
        why = "no answer"
        conn = None
        try:
            while time.time() < deadline:
                try:
                    conn = conn or self._admin_connect(node, admin)
                    status = slave_status(conn) or {}
                    state = slave_state(status)[0] if status else "not a replica"
                    if state == "streaming":
                        since = since if since is not None else time.time()
                        if time.time() - since >= REPLICATING_HOLD_S:
                            return True, "replicating"
                    else:
                        since = None
                        errors = [f"{k} {status[k]}" for k in ("Last_IO_Error", "Last_SQL_Error") if status.get(k)]
                        why = state + (f" ({'; '.join(errors)})"[:300] if errors else "")
                except Exception as exc:  # the node restarting or busy: ask again on a new connection
                    if conn is not None:
                        conn.close()
                    conn = None
                    since = None
                    why = f"{type(exc).__name__}: {str(exc)[:120]}"
                time.sleep(0.5)
            return False, why
        finally:
            if conn is not None:
                conn.close()
