"""pg_auto_failover: one monitor (a PostgreSQL with the pgautofailover extension) and a keeper
(`pg_autoctl`) beside each PostgreSQL. Everything is asked of the monitor over SQL:

- roles: `pgautofailover.node` (reported and assigned state, health); a node is the leader when it
  reports and is assigned primary / wait_primary / single;
- detection and promotion: the monitor's `pgautofailover.event` table, each row with the monitor's
  own `eventtime`, put on the control clock by the monitor's clock offset measured over SQL;
  "became unhealthy" and the goal states of a failover (draining, prepare_promotion, ...) are the
  manager reacting, a node reporting wait_primary / primary after it is the promotion;
- settings: the monitor's `pgautofailover.*` health-check GUCs and the formation's
  number_sync_standbys, read for the evidence;
- switchover: `pgautofailover.perform_failover(formation, group)` on a healthy group (what
  `pg_autoctl perform switchover` calls), or `perform_promotion(formation, node)` for a named
  candidate; an old primary rejoins by itself once its keeper runs again (it is demoted, rewound
  where needed, and catches up).

Member names: the nodes are registered under their inventory host names (`pg_autoctl create
postgres --name <host>`), or `ha.names` maps host -> node name.
"""

from __future__ import annotations

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
from chaoskit.ha.sqlclock import SqlClock, measure_sql_clock
from chaoskit.secrets import Secret
from chaoskit.validation import Endpoint, Name, SqlName

LEADER_STATES = {"primary", "wait_primary", "single"}
FAILOVER_GOALS = {"draining", "demote_timeout", "prepare_promotion", "stop_replication", "report_lsn",
                  "fast_forward", "prepare_maintenance"}
GUCS = ("health_check_period", "health_check_timeout", "health_check_max_retries", "health_check_retry_delay",
        "node_considered_unhealthy_timeout", "primary_demote_timeout", "startup_grace_period",
        "promote_wal_log_threshold")


class PgafConfig(HaConfig):
    kind: Literal["pg_auto_failover"] = "pg_auto_failover"
    engines: ClassVar[frozenset[str]] = frozenset({"postgres"})
    monitor: Endpoint  # the monitor's PostgreSQL, host:port
    database: SqlName = "pg_auto_failover"
    user: SqlName = "autoctl_node"
    password: Secret | None = None  # the monitor's own pg_hba may trust the subnet
    formation: Name = "default"
    group: int = Field(0, ge=0, le=1000)
    names: dict[Name, Name] = Field(default_factory=dict)  # member host -> pg_auto_failover node name


def classify_node(reported: str, goal: str, health: int) -> str:
    """The monitor's view of one node: the leader reports and is assigned a primary state; a node
    the monitor finds unhealthy is down; every other registered node is a replica."""
    if reported in LEADER_STATES and goal in LEADER_STATES:
        return LEADER
    return DOWN if health == 0 else REPLICA


def member_views(rows: list[tuple], hosts: list[str], names: dict[str, str]) -> list[MemberView]:
    """The monitor's `pgautofailover.node` rows (nodename, reportedstate, goalstate, health,
    reportedtli, bytes behind the most advanced node) as one view per member host."""
    seen = {names.get(r[0], r[0]): r for r in rows}
    out = []
    for host in hosts:
        r = seen.get(host)
        if r is None:
            out.append(MemberView(host, DOWN, error="not registered with the monitor"))
            continue
        _, reported, goal, health, tli, lag = r
        out.append(MemberView(host, classify_node(reported, goal, int(health)),
                              state=f"{reported}>{goal}" if goal != reported else reported,
                              lag_bytes=int(lag) if lag is not None else None, timeline=tli))
    return out


def event_kind(reported: str, goal: str, description: str, was_leader: bool) -> str | None:
    """What a monitor event means for the analysis (None: nothing the drill needs)."""
    text = description.lower()
    if "became unhealthy" in text or "marked as unhealthy" in text:
        return "failover_started"
    if goal in FAILOVER_GOALS and goal != reported:
        return "failover_started"
    if reported in ("wait_primary", "primary") and goal == reported and not was_leader:
        return "promoted"
    if goal == "demoted" and reported != goal:
        return "demoted"
    return None


def classify_events(rows: list[tuple], names: dict[str, str],
                    leaders: set[str]) -> list[tuple[int, float, str, str, str]]:
    """The monitor's event rows (eventid, epoch, nodename, reported, goal, description), in order,
    as (eventid, monitor time, member, kind, description) for those the analysis needs; `leaders`
    (updated in place) is who led before, so a node reporting primary is a promotion only once."""
    out = []
    for eventid, ts, nodename, reported, goal, description in rows:
        member = names.get(nodename, nodename)
        kind = event_kind(reported, goal, description or "", member in leaders)
        if kind == "promoted":
            leaders.clear()
            leaders.add(member)
        if kind is not None:
            out.append((int(eventid), float(ts), member, kind, description or ""))
    return out


class PgAutoFailoverManager(HAManager):
    kind = "pg_auto_failover"
    Config = PgafConfig
    healthy_states: ClassVar[frozenset[str]] = frozenset({"primary", "secondary", "single", "wait_primary"})

    @property
    def cfg(self) -> PgafConfig:
        return self.config  # type: ignore[return-value]

    def _conninfo(self) -> str:
        from psycopg.conninfo import make_conninfo

        host, _, port = self.cfg.monitor.rpartition(":")
        params: dict[str, Any] = {"host": host.strip("[]"), "port": port, "dbname": self.cfg.database,
                                  "user": self.cfg.user, "connect_timeout": 2, "application_name": "chaoskit",
                                  "options": "-c statement_timeout=5000"}
        if self.cfg.password is not None:
            params["password"] = self.cfg.password.resolve()
        return make_conninfo(**params)

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(self._conninfo(), autocommit=True) as conn:
            return list(conn.execute(sql, params).fetchall())

    def _node_names(self) -> dict[str, str]:
        """pg_auto_failover node name -> member host."""
        return {self.cfg.names.get(m.host, m.host): m.host for m in self.cluster.members}

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        try:
            rows = self._query(
                "SELECT nodename, reportedstate::text, goalstate::text, health, reportedtli, "
                "pg_wal_lsn_diff(max(reportedlsn) OVER (), reportedlsn)::bigint "
                "FROM pgautofailover.node WHERE formationid = %s AND groupid = %s",
                (self.cfg.formation, self.cfg.group))
        except Exception as exc:  # the monitor does not answer: the manager's view is unknown
            return [MemberView(m.host, UNKNOWN, error=f"monitor: {str(exc).splitlines()[0][:160]}")
                    for m in self.cluster.members]
        return member_views(rows, [m.host for m in self.cluster.members], self._node_names())

    # -- settings ----------------------------------------------------------------------------
    def read_settings(self) -> dict[str, Any]:
        rows = self._query("SELECT name, setting FROM pg_settings WHERE name LIKE 'pgautofailover.%'")
        out: dict[str, Any] = {r[0].removeprefix("pgautofailover."): _num(r[1]) for r in rows
                               if r[0].removeprefix("pgautofailover.") in GUCS}
        formation = self._query("SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = %s",
                                (self.cfg.formation,))
        if formation:
            out["number_sync_standbys"] = formation[0][0]
        nodes = self._query("SELECT nodename, candidatepriority, replicationquorum FROM pgautofailover.node "
                            "WHERE formationid = %s AND groupid = %s ORDER BY nodeid",
                            (self.cfg.formation, self.cfg.group))
        out["nodes"] = {n: {"candidate_priority": p, "replication_quorum": q} for n, p, q in nodes}
        return out

    def version(self) -> str | None:
        try:
            return str(self._query("SELECT extversion FROM pg_extension WHERE extname = 'pgautofailover'")[0][0])
        except Exception:
            return None

    def detection_bound_s(self) -> float | None:
        """A failed primary is noticed after node_considered_unhealthy_timeout at the latest, and
        promotion may then wait for primary_demote_timeout when the old primary cannot confirm."""
        try:
            s = self.read_settings()
        except Exception:
            return None
        unhealthy, period = s.get("node_considered_unhealthy_timeout"), s.get("health_check_period")
        if not isinstance(unhealthy, int | float):
            return None
        return (float(unhealthy) + float(period or 0)) / 1000

    # -- actions -----------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> ActionResult:
        leader = self.leader()
        t_sent = time.time()
        try:
            if candidate:
                node_id = self._query("SELECT nodeid FROM pgautofailover.node WHERE nodename = %s",
                                      (self.cfg.names.get(candidate, candidate),))[0][0]
                self._query("SELECT pgautofailover.perform_promotion(%s, %s)", (self.cfg.formation,
                                                                              self.cfg.names.get(candidate, candidate)))
                answer = f"promotion of node {node_id} requested"
            else:
                self._query("SELECT pgautofailover.perform_failover(%s, %s)", (self.cfg.formation, self.cfg.group))
                answer = "switchover requested (perform_failover on a healthy group)"
            ok = True
        except Exception as exc:
            ok, answer = False, str(exc).splitlines()[0][:300]
        return ActionResult("switchover", ok, t_sent, time.time(), member=leader, candidate=candidate, answer=answer)

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        w.spawn(lambda: self._poll_events(sink, max(0.1, interval), w), "watch-pgaf-events")
        return w

    def _poll_events(self, sink: Callable[[ManagerEvent], None], interval: float, w: Watcher) -> None:
        import psycopg

        names = self._node_names()
        conn = None
        clock: SqlClock | None = None
        last_id: int | None = None
        leaders: set[str] = {m.member for m in self.members() if m.role == LEADER}
        while not w.stopping:
            try:
                if conn is None:
                    conn = psycopg.connect(self._conninfo(), autocommit=True)
                    clock = measure_sql_clock(lambda sql, c=conn: c.execute(sql).fetchall())
                    if last_id is None:
                        last_id = int(conn.execute("SELECT coalesce(max(eventid), 0) FROM pgautofailover.event")
                                      .fetchall()[0][0])
                rows = conn.execute(
                    "SELECT eventid, extract(epoch from eventtime), nodename, reportedstate::text, goalstate::text, "
                    "description FROM pgautofailover.event WHERE eventid > %s AND formationid = %s ORDER BY eventid",
                    (last_id, self.cfg.formation)).fetchall()
            except Exception:  # the monitor restarting or unreachable: try again
                if conn is not None:
                    conn.close()
                conn = None
                w.wait(0.5)
                continue
            assert clock is not None
            if rows:
                last_id = int(rows[-1][0])
            for eventid, ts, member, kind, description in classify_events(rows, names, leaders):
                sink(ManagerEvent(clock.to_control(ts), kind, "monitor-events", member, description[:300],
                                  clock.uncertainty_s, ts, eventid))
            w.wait(interval)
        if conn is not None:
            conn.close()


def _num(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        return value
