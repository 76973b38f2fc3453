"""repmgr: `repmgrd` on every node watches its upstream and, when the primary fails, the standbys
elect one to promote; metadata and events live in the `repmgr` database, replicated with the data.

- roles: `repmgr.nodes` (type, active) as the newest primary holds it (a diverged old primary keeps
  its stale copy: the member that is writable on the highest timeline wins);
- detection and promotion: `repmgr.events` (`event_timestamp`, the time repmgr recorded it, put
  on the control clock by that server's clock offset measured over SQL): a standby's repmgrd
  reacting (`repmgrd_upstream_disconnect`, `repmgrd_failover_follow`, ...) or promoting
  (`repmgrd_failover_promote`, `standby_promote`). repmgr records events in the database, so a
  standby can only record its reaction once it is writable: the table's first record is the
  promotion itself. The detection comes from repmgrd's log (`log_file` of repmgr.conf), followed
  on every member and stamped on the host as each line is written: "unable to connect to
  upstream node" is the moment a standby noticed. Member events (a standby lost, back) are kept
  as `member_state`;
- switchover: `repmgr standby switchover --siblings-follow` on the candidate (over SSH, as the
  database's OS user; repmgr itself then uses SSH between the nodes);
- rejoin: crash recovery in single-user mode where the old primary died, then `repmgr node rejoin
  --force-rewind` against the new primary (pg_rewind where the timelines diverged); cloned again
  where that fails;
- settings: the failover timings of repmgr.conf (read over SSH).

`config_file` may hold `{host}` (the member's host name) where each member has its own file.
"""

from __future__ import annotations

import functools
import re
import shlex
import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field

from chaoskit.ha.base import (
    DOWN,
    LEADER,
    REPLICA,
    UNKNOWN,
    ActionResult,
    HaConfig,
    HAManager,
    ManagerEvent,
    MemberView,
    Watcher,
)
from chaoskit.ha.hoststream import match_line
from chaoskit.ha.sqlclock import measure_sql_clock
from chaoskit.secrets import Secret
from chaoskit.validation import Name, PosixUser, SqlName

# the data directory's own binaries: repmgr.conf's pg_bindir, else the version's Debian/RPM path
_BINDIR = r"""
bindir=$(sed -n "s/^[[:space:]]*pg_bindir[[:space:]]*=[[:space:]]*'\{0,1\}\([^']*\)'\{0,1\}[[:space:]]*$/\1/p" \
  "$conf" | tail -1)
if [ -z "$bindir" ]; then
  v=$(cat "$data/PG_VERSION")
  for d in "/usr/lib/postgresql/$v/bin" "/usr/pgsql-$v/bin"; do [ -x "$d/postgres" ] && bindir=$d && break; done
fi
[ -x "$bindir/postgres" ] || { echo "no postgres binaries found for $data" >&2; exit 3; }
"""
# $1 repmgr.conf, $2 data directory, $3 conninfo of the primary; runs as the database's OS user
REJOIN_SCRIPT = r"""set -u
conf=$1 data=$2 primary=$3
""" + _BINDIR + r"""
repmgr -f "$conf" node service --action=stop --checkpoint >/dev/null 2>&1
# a freshly promoted primary's control file still names the old timeline until its first
# checkpoint: pg_rewind would read "same timeline, no rewind required" and the node never follows
"$bindir/psql" "$primary" -Atqc CHECKPOINT || echo "CHECKPOINT on the primary failed"
state=$("$bindir/pg_controldata" -D "$data" | sed -n 's/^Database cluster state:[[:space:]]*//p')
echo "cluster state before rejoin: $state"
if [ "$state" != "shut down" ] && [ "$state" != "shut down in recovery" ] && [ ! -e "$data/standby.signal" ]; then
  echo "finishing crash recovery in single-user mode"
  cfg=$(grep -o 'config_file=[^"]*' "$data/postmaster.opts" 2>/dev/null | head -1)
  if [ -n "$cfg" ]; then "$bindir/postgres" --single -D "$data" -c "$cfg" template1 </dev/null
  else "$bindir/postgres" --single -D "$data" template1 </dev/null; fi
fi
repmgr -f "$conf" node rejoin -d "$primary" --force-rewind --verbose 2>&1
"""
# $1 repmgr.conf, $2 host, $3 port, $4 user, $5 database of the primary
CLONE_SCRIPT = r"""set -u
conf=$1
repmgr -f "$conf" node service --action=stop --checkpoint >/dev/null 2>&1
repmgr -h "$2" -p "$3" -U "$4" -d "$5" -f "$conf" standby clone --force --fast-checkpoint 2>&1 &&
repmgr -f "$conf" node service --action=start 2>&1 &&
repmgr -f "$conf" standby register --force --wait-start=60 2>&1
"""

# repmgr.events -> ManagerEvent kind: a standby's repmgrd reacting to a lost primary, the promotion,
# and what only describes a member (a standby lost or back) without being a failover
EVENT_KINDS = {"repmgrd_failover_promote": "promoted", "standby_promote": "promoted",
               "repmgrd_upstream_disconnect": "failover_started", "repmgrd_failover_follow": "failover_started",
               "repmgrd_promote_error": "failover_started", "repmgrd_failover_aborted": "failover_started",
               "repmgrd_local_disconnect": "member_state", "child_node_disconnect": "member_state",
               "repmgrd_standby_reconnect": "member_state", "node_rejoin": "member_state",
               "standby_switchover": "member_state", "repmgrd_upstream_reconnect": "member_state",
               "child_node_reconnect": "member_state", "child_node_new_connect": "member_state"}
CONF_KEYS = ("failover", "reconnect_attempts", "reconnect_interval", "monitor_interval_secs",
             "primary_visibility_consensus", "standby_disconnect_on_failover", "priority", "location",
             "promote_check_timeout", "degraded_monitoring_timeout")


class RepmgrConfig(HaConfig):
    kind: Literal["repmgr"] = "repmgr"
    engines: ClassVar[frozenset[str]] = frozenset({"postgres"})
    database: SqlName = "repmgr"
    user: SqlName = "repmgr"
    password: Secret | None = None  # where pg_hba asks for one
    config_file: str = Field("/etc/repmgr.conf", pattern=r"^/[A-Za-z0-9_./{}-]{1,255}$")
    os_user: PosixUser = "postgres"
    names: dict[Name, Name] = Field(default_factory=dict)  # member host -> repmgr node_name


# repmgrd log lines that tell the failover as it happens (repmgr 4.x/5.x wording)
LOG_EVENTS = [
    (re.compile(r'unable to connect to upstream node "(?P<node>[^"]+)"'), "leader_lost"),
    (re.compile(r'unable to reconnect to node "(?P<node>[^"]+)" \(ID: \d+\) after \d+ attempts'), "failover_started"),
    (re.compile(r"promoting standby to primary"), "failover_started"),
    (re.compile(r"STANDBY PROMOTE successful"), "promoted"),
    (re.compile(r"attempting to follow new primary"), "member_state"),
]


def _argv(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in words)


# a primary's timeline as its WAL is written now (the control file's names the old one until the
# first checkpoint after a promotion): the first 8 hex digits of the current WAL file's name
CURRENT_TIMELINE = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"


def _clip(text: str, keep: int = 3000) -> str:
    """Head and tail of a long command transcript (repmgr says why at the start, how it ended at the end)."""
    return text if len(text) <= 2 * keep else text[:keep] + "\n[...]\n" + text[-keep:]


def member_views(rows: list[tuple], hosts: list[str], names: dict[str, str]) -> list[MemberView]:
    """`repmgr.nodes` rows (node_name, type, active) as the newest primary holds them, one view
    per member host."""
    if not rows:
        return [MemberView(h, UNKNOWN, error="no member's repmgr database answers") for h in hosts]
    seen = {names.get(name, name): (t, a) for name, t, a in rows}
    out = []
    for host in hosts:
        if host not in seen:
            out.append(MemberView(host, DOWN, error="not registered with repmgr"))
            continue
        node_type, active = seen[host]
        out.append(MemberView(host, role_of(node_type, bool(active)),
                              state=f"{node_type}{'' if active else ' (inactive)'}"))
    return out


def event_kind(event: str, successful: bool) -> str | None:
    """A `repmgr.events` row as a manager event kind (a failed promotion is still a reaction)."""
    kind = EVENT_KINDS.get(event)
    return "failover_started" if kind == "promoted" and not successful else kind


def log_event(line: str) -> tuple[str, str | None] | None:
    """A repmgrd log line as (event kind, the node it names) where it tells the failover."""
    return match_line(LOG_EVENTS, line)


def role_of(node_type: str, active: bool) -> str:
    if not active:
        return DOWN
    return LEADER if node_type == "primary" else REPLICA if node_type in ("standby", "witness") else UNKNOWN


class RepmgrManager(HAManager):
    kind = "repmgr"
    Config = RepmgrConfig

    @property
    def cfg(self) -> RepmgrConfig:
        return self.config  # type: ignore[return-value]

    def _conninfo(self, host: str) -> str:
        from psycopg.conninfo import make_conninfo

        member = next(m for m in self.cluster.members if m.host == host)
        params: dict[str, Any] = {"host": self.inventory.member_address(member),
                                  "port": member.db_port or self.cluster.port, "dbname": self.cfg.database,
                                  "user": self.cfg.user, "connect_timeout": 2, "application_name": "chaoskit",
                                  "options": "-c statement_timeout=5000"}
        if self.cfg.password is not None:
            params["password"] = self.cfg.password.resolve()
        return make_conninfo(**params)

    def _names(self) -> dict[str, str]:
        return {self.cfg.names.get(m.host, m.host): m.host for m in self.cluster.members}

    def config_path(self, host: str) -> str:
        return self.cfg.config_file.replace("{host}", host)

    def _newest_primary(self) -> tuple[str | None, list[tuple]]:
        """(host, repmgr.nodes rows) from the writable member on the highest timeline."""
        import psycopg

        best: tuple[int, str, list[tuple]] | None = None
        any_rows: list[tuple] = []
        for member in self.cluster.members:
            try:
                with psycopg.connect(self._conninfo(member.host), autocommit=True) as conn:
                    rows = conn.execute("SELECT node_name, type, active FROM repmgr.nodes ORDER BY node_id").fetchall()
                    any_rows = any_rows or rows
                    in_recovery, tli = conn.execute(
                        f"SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN 0 ELSE {CURRENT_TIMELINE} END"
                    ).fetchall()[0]
            except Exception:
                continue
            if not in_recovery and (best is None or tli > best[0]):
                best = (tli, member.host, rows)
        return (best[1], best[2]) if best else (None, any_rows)

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        _, rows = self._newest_primary()
        return member_views(rows, [m.host for m in self.cluster.members], self._names())

    # -- settings ----------------------------------------------------------------------------
    def _ssh(self, host: str, command: str, timeout: float = 120) -> Any:
        if self.pool is None:
            raise RuntimeError("repmgr actions need SSH to the members (no remote pool given)")
        user = shlex.quote(self.cfg.os_user)
        wrapped = f"setpriv --reuid={user} --regid=$(id -g {user}) --init-groups sh -c {shlex.quote(command)}"
        return self.pool.get(host).shell(wrapped, timeout=timeout, check=False)

    def read_settings(self) -> dict[str, Any]:
        if self.pool is None:
            return {}
        host = self.cluster.members[0].host
        res = self.pool.get(host).shell(f"cat -- {shlex.quote(self.config_path(host))}", check=False)
        out: dict[str, Any] = {}
        for line in res.stdout.splitlines():
            key, sep, value = line.partition("=")
            key = key.strip()
            if sep and key in CONF_KEYS:
                value = value.strip().strip("'\"")
                out[key] = int(value) if value.isdigit() else value
        return out

    def version(self) -> str | None:
        try:
            import psycopg

            with psycopg.connect(self._conninfo(self.cluster.members[0].host), autocommit=True) as conn:
                row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'repmgr'").fetchone()
                return str(row[0]) if row else None
        except Exception:
            return None

    def detection_bound_s(self) -> float | None:
        s = self.read_settings()
        attempts, interval = s.get("reconnect_attempts"), s.get("reconnect_interval")
        if not isinstance(attempts, int) or not isinstance(interval, int):
            return None
        return float(attempts * interval + int(s.get("monitor_interval_secs", 2)))

    # -- actions -----------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> ActionResult:
        leader, candidate = self.switchover_pair(candidate)
        t_sent = time.time()
        if candidate is None:
            return ActionResult("switchover", False, t_sent, time.time(), member=leader, answer="no standby to promote")
        res = self._ssh(candidate, f"repmgr -f {shlex.quote(self.config_path(candidate))} standby switchover "
                                   "--siblings-follow --force-rewind")
        return ActionResult("switchover", res.exited == 0, t_sent, time.time(), member=leader, candidate=candidate,
                            answer=(res.stdout + res.stderr)[-300:])

    def rejoin(self, member: str) -> ActionResult:
        """The old primary rejoins as a standby of the current primary, as a careful operator does it:
        stopped if it still runs (an isolated old primary); crash recovery finished in single-user
        mode (no client can connect) where it died uncleanly, so its control file shows how far its
        own timeline went; a CHECKPOINT on the new primary, so its control file names its new
        timeline; then `repmgr node rejoin --force-rewind` (pg_rewind where it diverged). Without
        the first, repmgr compares the fork point with the last checkpoint before the crash; without
        the second, pg_rewind finds both on one timeline: either way nothing is rewound and a node
        that can never follow is started. Where rejoin
        still fails (the WAL pg_rewind needs is gone) the node is cloned again: `rebuilt` says so."""
        t_sent = time.time()
        leader, refused = self.rejoin_target(member)
        if refused is not None or leader is None:
            return refused  # type: ignore[return-value]
        node = next(m for m in self.cluster.members if m.host == member)
        if node.data_dir is None:
            return ActionResult("rejoin", False, t_sent, time.time(), member=member,
                                answer="the member has no data_dir in the inventory")
        conf = self.config_path(member)
        leader_member = next(m for m in self.cluster.members if m.host == leader)
        host, port = self.inventory.member_address(leader_member), leader_member.db_port or self.cluster.port
        from psycopg.conninfo import make_conninfo

        target = make_conninfo(host=host, port=port, user=self.cfg.user, dbname=self.cfg.database, connect_timeout=2)
        res = self._ssh(member, _argv("bash", "-c", REJOIN_SCRIPT, "rejoin", conf, str(node.data_dir), target),
                        timeout=300)
        text = res.stdout + res.stderr
        rewound = "executing pg_rewind" in text
        # only a node that streams from the primary has rejoined; a failed rejoin gets a short look
        if self._streams(member, leader, 60 if res.exited == 0 else 5):
            return ActionResult("rejoin", True, t_sent, time.time(), member=member, answer=text[-300:],
                                rewound=rewound, rebuilt=False, detail={"log": _clip(text)})
        clone = self._ssh(member, _argv("bash", "-c", CLONE_SCRIPT, "clone", conf, host, str(port), self.cfg.user,
                                        self.cfg.database), timeout=600)
        ok = clone.exited == 0 and self._streams(member, leader, 60)
        return ActionResult("rejoin", ok, t_sent, time.time(), member=member,
                            answer=(text[-150:] + " | then cloned again: " + (clone.stdout + clone.stderr)[-150:]),
                            rewound=False, rebuilt=clone.exited == 0,
                            detail={"rejoin_failed": _clip(text), "clone": _clip(clone.stdout + clone.stderr)})

    def _streams(self, member: str, leader: str, timeout: float) -> bool:
        """Whether `member` streams from `leader` (its walsender in state streaming), within a bound."""
        import psycopg

        name = self.cfg.names.get(member, member)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with psycopg.connect(self._conninfo(leader), autocommit=True) as conn:
                    row = conn.execute("SELECT state FROM pg_stat_replication WHERE application_name = %s",
                                       (name,)).fetchone()
                if row and row[0] == "streaming":
                    return True
            except Exception:  # the leader busy or restarting: ask again
                pass
            time.sleep(1.0)
        return False

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        w.spawn(lambda: self._poll_events(sink, max(0.1, interval), w), "watch-repmgr-events")
        if self.pool is not None:
            for member in self.cluster.members:
                w.spawn(functools.partial(self._follow_log, member.host, sink, w), f"watch-repmgrd-log-{member.host}")
        return w

    def log_file(self, host: str) -> str | None:
        """repmgrd's log file on that member, as its repmgr.conf names it (None: stderr/syslog)."""
        if self.pool is None:
            return None
        res = self.pool.get(host).shell(f"cat -- {shlex.quote(self.config_path(host))}", check=False)
        for line in res.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "log_file":
                return value.strip().strip("'\"") or None
        return None

    def log_sources(self) -> dict[str, dict[str, str]]:
        """repmgrd's log on every member, where repmgr.conf names one (and it is a plain path)."""
        from chaoskit.validation import is_safe_path

        out = {}
        for member in self.cluster.members:
            path = self.log_file(member.host)
            if path and is_safe_path(path):
                out[member.host] = {"repmgrd": path}
        return out

    def _follow_log(self, host: str, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        """repmgrd's own account, stamped on the host as each line is written: the standby losing
        its upstream (detection, which repmgr.events cannot hold: a standby cannot write) and the
        decision to promote. Without a log file repmgr.events alone is used."""
        from chaoskit.ha.hoststream import follow_file

        path = self.log_file(host)
        if path is None:
            return
        names = self._names()
        for line in follow_file(self.pool.get(host), path, lambda: w.stopping):  # type: ignore[union-attr]
            hit = log_event(line.text)
            if hit is not None:
                kind, node = hit
                sink(ManagerEvent(line.t, kind, "repmgrd-log", names.get(node, node) if node else host,
                                  f"{host}: {line.text[:240]}", line.uncertainty_s, line.t_host))

    def _poll_events(self, sink: Callable[[ManagerEvent], None], interval: float, w: Watcher) -> None:
        """New rows of repmgr.events on every member that answers (the promoting standby records its
        events on itself; the others' copies arrive by replication), deduplicated."""
        import psycopg

        names = {}
        seen: set[tuple] = set()
        start: dict[str, float] = {}
        clocks: dict[str, Any] = {}
        node_names: dict[int, str] = {}
        while not w.stopping:
            for member in self.cluster.members:
                try:
                    with psycopg.connect(self._conninfo(member.host), autocommit=True) as conn:
                        if member.host not in clocks:
                            clocks[member.host] = measure_sql_clock(lambda sql, c=conn: c.execute(sql).fetchall())
                            start[member.host] = float(conn.execute(
                                "SELECT extract(epoch from coalesce(max(event_timestamp), now())) "
                                "FROM repmgr.events").fetchall()[0][0])
                        if not node_names:
                            node_names = dict(conn.execute("SELECT node_id, node_name FROM repmgr.nodes").fetchall())
                            names = self._names()
                        rows = conn.execute(
                            "SELECT node_id, event, successful, extract(epoch from event_timestamp), details "
                            "FROM repmgr.events WHERE event_timestamp > to_timestamp(%s) ORDER BY event_timestamp",
                            (start[member.host],)).fetchall()
                except Exception:  # a member down or restarting
                    continue
                clock = clocks[member.host]
                for node_id, event, ok, ts, details in rows:
                    key = (node_id, event, round(float(ts), 3))
                    if key in seen:
                        continue
                    seen.add(key)
                    host = names.get(node_names.get(node_id, ""), node_names.get(node_id))
                    kind = event_kind(event, bool(ok))
                    if kind is not None:
                        sink(ManagerEvent(clock.to_control(float(ts)), kind, "repmgr-events", host,
                                          f"{event}{'' if ok else ' (failed)'}: {(details or '')[:240]}",
                                          clock.uncertainty_s, float(ts)))
                        if kind == "promoted":  # the promotion is also the manager's reaction
                            sink(ManagerEvent(clock.to_control(float(ts)), "failover_started", "repmgr-events", host,
                                              event, clock.uncertainty_s, float(ts)))
            w.wait(interval)
