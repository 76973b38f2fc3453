"""The role probe: every member's writability (asked of the server) and, for Patroni, the HA
manager's view, every `interval`, as events on the recorder's clock.

One thread per member keeps its own connection (reconnecting with short timeouts), so a dead
or frozen member never delays the others' samples. Every sample is kept in compact form
(time, member, writable) for split-brain and promotion timing; changes become events.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from chaoskit.db.base import Driver, driver_for
from chaoskit.inventory.models import Cluster, Inventory, Member
from chaoskit.topology.patroni import fetch_cluster, normalise_patroni_role


@dataclass
class ProbeLog:
    samples: list[tuple[float, str, str]] = field(default_factory=list)  # (t, member, primary|replica|down)
    manager: list[tuple[float, str | None, dict[str, str]]] = field(default_factory=list)  # (t, leader, states)
    lag: list[tuple[float, dict[str, int | None], dict[str, int | None]]] = field(default_factory=list)  # lag, timeline
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current_roles(self) -> dict[str, str]:
        with self.lock:
            latest: dict[str, str] = {}
            for _, member, role in self.samples[-64:]:
                latest[member] = role
            return latest


class RoleProbe:
    def __init__(self, cluster: Cluster, inventory: Inventory, interval: float = 0.1) -> None:
        self.cluster = cluster
        self.inventory = inventory
        self.interval = interval
        self.driver: Driver = driver_for(cluster, inventory, connect_timeout=min(1.0, 5 * interval),
                                         op_timeout=min(1.0, 5 * interval))
        self.log = ProbeLog()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for member in self.cluster.members:
            t = threading.Thread(target=self._member_loop, args=(member,), name=f"probe-{member.host}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.cluster.role_probe == "patroni" and self.cluster.patroni is not None:
            t = threading.Thread(target=self._manager_loop, name="probe-patroni", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _member_loop(self, member: Member) -> None:
        conn = None
        last = None
        next_t = time.time()
        while not self._stop.is_set():
            role = "down"
            try:
                if conn is None:
                    conn = self.driver.connect_member(member)
                role = "primary" if self.driver.is_writable(conn) else "replica"
            except Exception:
                Driver.close_quietly(conn)
                conn = None
            t = time.time()
            with self.log.lock:
                self.log.samples.append((t, member.host, role))
                if role != last:
                    self.log.events.append({"kind": "role", "t": t, "member": member.host, "role": role,
                                            "previous": last})
            last = role
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.time()))
            if next_t < time.time() - self.interval:  # fell behind (a slow connect): resync
                next_t = time.time()
        Driver.close_quietly(conn)

    def _manager_loop(self) -> None:
        api = self.cluster.patroni
        assert api is not None
        last_leader: str | None = "?"
        last_states: dict[str, str] = {}
        next_t = time.time()
        while not self._stop.is_set():
            data = None
            for member in self.cluster.members:
                url = f"{api.scheme}://{self.inventory.member_address(member)}:{api.port}"
                data = fetch_cluster(url, timeout=max(0.2, self.interval * 3), verify=api.verify)
                if data is not None:
                    break
            t = time.time()
            if data is not None:
                members = data.get("members", [])
                leader = next((m.get("name") for m in members
                               if normalise_patroni_role(m.get("role", "")) == "leader"), None)
                states = {m.get("name"): f"{normalise_patroni_role(m.get('role', ''))}/{m.get('state')}"
                          for m in members}
                lags = {m.get("name"): (m.get("lag") if isinstance(m.get("lag"), int) else None) for m in members}
                timelines = {m.get("name"): m.get("timeline") for m in members}
                with self.log.lock:
                    self.log.manager.append((t, leader, states))
                    self.log.lag.append((t, lags, timelines))
                    if leader != last_leader:
                        self.log.events.append({"kind": "manager_leader", "t": t, "leader": leader,
                                                "previous": None if last_leader == "?" else last_leader})
                    if states != last_states:
                        self.log.events.append({"kind": "manager_members", "t": t, "members": states})
                last_leader, last_states = leader, states
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.time()))
            if next_t < time.time() - self.interval:
                next_t = time.time()
