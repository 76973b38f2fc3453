"""repmgr: `repmgrd` on every node watches its upstream and, when the primary fails, the standbys
elect one to promote; metadata and events live in the `repmgr` database, replicated with the data.

- roles: `repmgr.nodes` (type, active) as the newest primary holds it (a diverged old primary keeps
  its stale copy: the member that is writable on the highest timeline wins);
- detection and promotion: `repmgr.events` (`event_timestamp`, the time repmgr recorded it, put
  on the control clock by that server's clock offset measured over SQL): the first failover event
  after the fault (`repmgrd_failover_promote`, `standby_promote`, `repmgrd_upstream_disconnect`,
  `child_node_disconnect`, ...) is the reaction, `standby_promote` / `repmgrd_failover_promote`
  the promotion;
- switchover: `repmgr standby switchover --siblings-follow` on the candidate (over SSH, as the
  database's OS user; repmgr itself then uses SSH between the nodes);
- rejoin: `repmgr node rejoin --force-rewind` on the old primary against the new one (pg_rewind
  where the timelines diverged), then its repmgrd again;
- settings: the failover timings of repmgr.conf (read over SSH).

`config_file` may hold `{host}` (the member's host name) where each member has its own file.
"""

from __future__ import annotations

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
from chaoskit.ha.sqlclock import measure_sql_clock
from chaoskit.validation import Name, PosixUser, SqlName

REACTION = {"repmgrd_failover_promote", "standby_promote", "repmgrd_upstream_disconnect", "child_node_disconnect",
            "repmgrd_failover_follow", "repmgrd_promote_error", "repmgrd_standby_reconnect",
            "repmgrd_failover_aborted", "repmgrd_local_disconnect"}
PROMOTION = {"repmgrd_failover_promote", "standby_promote"}
CONF_KEYS = ("failover", "reconnect_attempts", "reconnect_interval", "monitor_interval_secs",
             "primary_visibility_consensus", "standby_disconnect_on_failover", "priority", "location",
             "promote_check_timeout", "degraded_monitoring_timeout")


class RepmgrConfig(HaConfig):
    kind: Literal["repmgr"] = "repmgr"
    database: SqlName = "repmgr"
    user: SqlName = "repmgr"
    password: Any = None  # a SecretRef, where pg_hba asks for one
    config_file: str = Field("/etc/repmgr.conf", pattern=r"^/[A-Za-z0-9_./{}-]{1,255}$")
    os_user: PosixUser = "postgres"
    names: dict[Name, Name] = Field(default_factory=dict)  # member host -> repmgr node_name


def role_of(node_type: str, active: bool) -> str:
    if not active:
        return DOWN
    return LEADER if node_type == "primary" else REPLICA if node_type in ("standby", "witness") else UNKNOWN


class RepmgrManager(HAManager):
    kind = "repmgr"
    Config = RepmgrConfig
    engines: ClassVar[frozenset[str]] = frozenset({"postgres"})

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
                        "SELECT pg_is_in_recovery(), (SELECT timeline_id FROM pg_control_checkpoint())").fetchone()
            except Exception:
                continue
            if not in_recovery and (best is None or tli > best[0]):
                best = (tli, member.host, rows)
        return (best[1], best[2]) if best else (None, any_rows)

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        _, rows = self._newest_primary()
        if not rows:
            return [MemberView(m.host, UNKNOWN, error="no member's repmgr database answers")
                    for m in self.cluster.members]
        names = self._names()
        seen = {names.get(name, name): (t, a) for name, t, a in rows}
        out = []
        for member in self.cluster.members:
            if member.host not in seen:
                out.append(MemberView(member.host, DOWN, error="not registered with repmgr"))
                continue
            node_type, active = seen[member.host]
            out.append(MemberView(member.host, role_of(node_type, bool(active)),
                                  state=f"{node_type}{'' if active else ' (inactive)'}"))
        return out

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
        res = self.pool.get(host).shell(f"cat {shlex.quote(self.config_path(host))}", check=False)
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
        leader = self.leader()
        if candidate is None:
            candidate = next((m.member for m in self.members() if m.role == REPLICA), None)
        t_sent = time.time()
        if candidate is None:
            return ActionResult("switchover", False, t_sent, time.time(), member=leader, answer="no standby to promote")
        res = self._ssh(candidate, f"repmgr -f {shlex.quote(self.config_path(candidate))} standby switchover "
                                   "--siblings-follow --force-rewind")
        return ActionResult("switchover", res.exited == 0, t_sent, time.time(), member=leader, candidate=candidate,
                            answer=(res.stdout + res.stderr)[-300:])

    def rejoin(self, member: str) -> ActionResult:
        """The old primary (stopped) rejoins as a standby of the current primary, rewound where its
        timeline diverged; its repmgrd is started again by the caller's restart."""
        leader = self.leader()
        t_sent = time.time()
        if leader is None or leader == member:
            return ActionResult("rejoin", False, t_sent, time.time(), member=member,
                                answer=f"no other primary to rejoin (leader: {leader})")
        conf = shlex.quote(self.config_path(member))
        target = shlex.quote(self._conninfo(leader).replace("options='-c statement_timeout=5000'", ""))
        res = self._ssh(member, f"repmgr -f {conf} node rejoin -d {target} --force-rewind --verbose 2>&1")
        text = res.stdout + res.stderr
        return ActionResult("rejoin", res.exited == 0, t_sent, time.time(), member=member, answer=text[-300:],
                            rewound="pg_rewind" in text and "not required" not in text, rebuilt=False)

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        w.spawn(lambda: self._poll_events(sink, max(0.1, interval), w), "watch-repmgr-events")
        return w

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
                                "FROM repmgr.events").fetchone()[0])
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
                    kind = "promoted" if event in PROMOTION and ok else "failover_started" if event in REACTION \
                        else None
                    if kind is not None:
                        sink(ManagerEvent(clock.to_control(float(ts)), kind, "repmgr-events", host,
                                          f"{event}{'' if ok else ' (failed)'}: {(details or '')[:240]}",
                                          clock.uncertainty_s, float(ts)))
                        if kind == "promoted":  # the promotion is also the manager's reaction
                            sink(ManagerEvent(clock.to_control(float(ts)), "failover_started", "repmgr-events", host,
                                              event, clock.uncertainty_s, float(ts)))
            w.wait(interval)
