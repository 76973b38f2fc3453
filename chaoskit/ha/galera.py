"""Galera (MariaDB with galera-4, wsrep): a multi-writer cluster with no HA manager process and no
promotion. Every node of the Primary Component takes writes; a node that loses quorum (cut off
into a minority) stays up, answers, and refuses writes (`wsrep_ready` OFF, error 1047) until it
is back. What reacts to a failure is the group membership: the surviving nodes install a new view
(the failed node suspected after `evs.suspect_timeout`, 5 s by default; until then commits wait
for it), and that view change is the detection signal.

Roles, from each node's wsrep status (`wsrep_local_state_comment`, `wsrep_cluster_status`,
`wsrep_cluster_size`, `wsrep_ready`, `wsrep_cluster_conf_id`):
- `leader`: the writer clients use: the first node in inventory order that is Synced and ready
  in a Primary Component (HAProxy's one writer with backups, and an endpoint list searched in
  order, pick the same node), one per component (two would be split-brain);
- `replica`: every other node of a Primary Component (it takes writes too, but clients of the
  usual deployment do not send them there);
- `down`: not answering, or in a non-Primary component (with the reason: writes refused there).
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any, ClassVar, Literal

from chaoskit.db.base import Driver
from chaoskit.db.mysql import MySQLDriver
from chaoskit.db.registry import driver_for
from chaoskit.ha.base import DOWN, LEADER, REPLICA, HaConfig, HAManager, ManagerEvent, MemberView, Watcher
from chaoskit.inventory.models import Member

STATUS = ("wsrep_local_state_comment", "wsrep_cluster_status", "wsrep_cluster_size", "wsrep_ready",
          "wsrep_cluster_conf_id", "wsrep_cluster_state_uuid", "wsrep_provider_version")
# provider options worth the evidence: how long a failed node goes unnoticed, quorum overrides
OPTIONS = ("evs.suspect_timeout", "evs.inactive_timeout", "evs.inactive_check_period", "pc.ignore_quorum",
           "pc.ignore_sb", "pc.weight", "gcache.size")
NO_VIEW = "18446744073709551615"  # wsrep_cluster_conf_id of a node outside any Primary Component


class GaleraConfig(HaConfig):
    kind: Literal["galera"] = "galera"
    engines: ClassVar[frozenset[str]] = frozenset({"mysql"})


def parse_options(text: str) -> dict[str, str]:
    """`wsrep_provider_options` ("a = 1; b = PT5S; ...") as a mapping."""
    out = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def iso_seconds(value: str | None) -> float | None:
    """An ISO-8601 duration as Galera writes them (PT5S, PT1M30S, PT0.5S) in seconds."""
    m = re.fullmatch(r"PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?", (value or "").strip())
    if not m or not any(m.groups()):
        return None
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def view_of(member: str, status: dict[str, str] | None,
            error: str | None = None) -> tuple[MemberView, str | None, bool]:
    """One node's view from its wsrep status: (view, its component, whether it takes writes).
    The leader is chosen among the writable ones by `assign_roles`."""
    if status is None:
        return MemberView(member, DOWN, state="unreachable", error=error), None, False
    state = status.get("wsrep_local_state_comment", "?")
    primary = status.get("wsrep_cluster_status") == "Primary"
    ready = status.get("wsrep_ready") == "ON"
    component = f"{status.get('wsrep_cluster_state_uuid', '?')}/{status.get('wsrep_cluster_conf_id', '?')}"
    if not primary:
        why = (f"{status.get('wsrep_cluster_status', '?')} component of size {status.get('wsrep_cluster_size', '?')}: "
               "refuses writes")
        return MemberView(member, DOWN, state="non-Primary", error=why), None, False
    writable = ready and state == "Synced"
    return MemberView(member, REPLICA, state=state), component, writable


def assign_roles(found: list[tuple[MemberView, str | None, bool]]) -> list[MemberView]:
    """The first writable node (inventory order) of each Primary Component is its leader."""
    leaders: set[str] = set()
    out = []
    for view, component, writable in found:
        if writable and component is not None and component not in leaders:
            leaders.add(component)
            view = MemberView(view.member, LEADER, state=view.state)
        out.append(view)
    return out


class GaleraManager(HAManager):
    kind = "galera"
    Config = GaleraConfig
    multi_writer: ClassVar[bool] = True
    view_is_own: ClassVar[bool] = False  # the leader is chaoskit's rule; Galera's own signal is the view change

    def _driver(self) -> Driver:
        return driver_for(self.cluster, self.inventory).tuned(connect_timeout=1.0, op_timeout=2.0)

    def session_driver(self) -> Driver:
        return self._driver()

    @staticmethod
    def _status(driver: Driver, conn: Any) -> dict[str, str]:
        assert isinstance(driver, MySQLDriver)  # engines = mysql
        return driver.status_values(conn, STATUS)

    def members(self) -> list[MemberView]:
        sessions = self.sessions()
        answers = sessions.ask_all(lambda conn: self._status(sessions.driver, conn))
        return assign_roles([view_of(m.host, st, err) for m, (st, err) in zip(self.cluster.members, answers,
                                                                               strict=True)])

    def watch(self, sink: Any, interval: float = 0.1) -> Watcher:
        """Each node's view (configuration id, size, status) polled on its own connection; a
        change on a node that answered before and after is Galera installing a new view there
        (`view_change`, the interval as uncertainty). A node that stops answering is not a view
        change: that is the fault itself, not the cluster reacting."""
        watcher = Watcher()
        driver = self._driver()

        def follow(member: Member) -> None:
            conn = None
            last: tuple[str, str, str] | None = None
            while not watcher.stopping:
                try:
                    if conn is None:
                        conn = driver.connect_member(member)
                    st = self._status(driver, conn)
                    now = (st.get("wsrep_cluster_conf_id", "?"), st.get("wsrep_cluster_size", "?"),
                           st.get("wsrep_cluster_status", "?"))
                    if last is not None and now != last:
                        sink(ManagerEvent(time.time(), "view_change", "wsrep-poll", member.host,
                                          describe_change(last, now), uncertainty_s=interval))
                    last = now
                except Exception:
                    Driver.close_quietly(conn)
                    conn = None
                watcher.wait(interval)
            Driver.close_quietly(conn)

        for member in self.cluster.members:
            watcher.spawn(functools.partial(follow, member), f"galera-view-{member.host}")
        return watcher

    def _options(self) -> dict[str, str]:
        driver = self._driver()
        conn = driver.connect_writer()
        try:
            return parse_options(str(driver.query(conn, "SELECT @@global.wsrep_provider_options")[0][0]))
        finally:
            Driver.close_quietly(conn)

    def read_settings(self) -> dict[str, Any]:
        options = self._options()
        return {k: options[k] for k in OPTIONS if k in options}

    def detection_bound_s(self) -> float | None:
        """A killed node's connections close at once, but the others wait `evs.suspect_timeout`
        before they install a view without it (commits wait meanwhile)."""
        try:
            return iso_seconds(self._options().get("evs.suspect_timeout"))
        except Exception:
            return None

    def version(self) -> str | None:
        driver = self._driver()
        conn = driver.connect_writer()
        try:
            provider = self._status(driver, conn).get("wsrep_provider_version")
            return f"{driver.server_version(conn)}, galera {provider}"
        finally:
            Driver.close_quietly(conn)


def describe_change(before: tuple[str, str, str], after: tuple[str, str, str]) -> str:
    def conf(c: str) -> str:
        return "none" if c == NO_VIEW else c

    return (f"view {conf(before[0])} -> {conf(after[0])}, size {before[1]} -> {after[1]}"
            + (f", {before[2]} -> {after[2]}" if before[2] != after[2] else f", {after[2]}"))
