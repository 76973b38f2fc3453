"""Patroni: roles, settings, switchover and reinitialize through its REST API; detection from the
DCS itself.

T_detect for Patroni is the instant the cluster's leader key changed in etcd (deleted when the
old leader's lease ran out, or taken by a new leader), not the next REST poll: the watch runs
directly against etcd's v3 JSON gateway where the controller can reach it (the event's arrival
on the control clock), else over SSH on a member with `etcdctl watch`, each line stamped with
that host's clock and corrected by its measured offset. The role probe's REST poll runs beside it
(leader changes, the old leader leaving `running`), so a DCS nobody can watch still gives a
signal, with the poll interval as its uncertainty.

Role words differ across versions (3.0.2: master/running, 4.x: primary/streaming); callers see
them normalised to leader / replica.
"""

from __future__ import annotations

import base64
import http.client
import json
import shlex
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
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
from chaoskit.models import Frozen
from chaoskit.secrets import Secret
from chaoskit.validation import Endpoint, Name, NoControl

_LEADER = {"leader", "master", "primary", "standby_leader"}
_REPLICA = {"replica", "sync_standby", "standby", "quorum_standby"}
SETTINGS = ("ttl", "loop_wait", "retry_timeout", "maximum_lag_on_failover", "synchronous_mode",
            "synchronous_mode_strict", "master_start_timeout", "primary_start_timeout", "failsafe_mode")
# switches Patroni treats as off while absent from its dynamic configuration
_OFF_WHEN_ABSENT = ("synchronous_mode", "synchronous_mode_strict", "failsafe_mode")


class PatroniError(RuntimeError):
    """The REST API refused or could not be reached (status and body attached)."""


def normalise_role(role: str) -> str:
    r = (role or "").lower()
    if r in _LEADER:
        return LEADER
    if r in _REPLICA:
        return REPLICA
    return r or UNKNOWN


def member_views(data: dict[str, Any], hosts: list[str]) -> list[MemberView]:
    """Patroni's GET /cluster document as one view per member host (member name = host name)."""
    seen = {m.get("name"): m for m in data.get("members", [])}
    out = []
    for host in hosts:
        m = seen.get(host)
        if m is None:
            out.append(MemberView(host, DOWN, error="not in Patroni's member list"))
            continue
        lag = m.get("lag")
        out.append(MemberView(host, normalise_role(m.get("role", "")), state=m.get("state"),
                              lag_bytes=lag if isinstance(lag, int) else None,
                              sync=str(m.get("role", "")).lower() == "sync_standby",
                              timeline=m.get("timeline") if isinstance(m.get("timeline"), int) else None))
    return out


@dataclass(frozen=True)
class KeyChange:
    deleted: bool
    value: str | None  # the leader's name where it was put
    revision: int | None


def key_changes(line: str | bytes) -> list[KeyChange]:
    """The leader key's changes in one line of a watch: etcd's v3 JSON gateway
    (`{"result": {"events": [{"type": "DELETE", "kv": ...}]}}`) or `etcdctl watch -w json`
    (`{"Events": [{"type": 1, "kv": ...}]}`); values and keys are base64."""
    try:
        doc = json.loads(line)
    except ValueError:
        return []
    if not isinstance(doc, dict):
        return []
    events = (doc.get("result") or {}).get("events") if "result" in doc else doc.get("Events") or doc.get("events")
    out = []
    for ev in events or []:
        kv = ev.get("kv") or {}
        value = base64.b64decode(kv["value"]).decode() if kv.get("value") else None
        rev = int(kv["mod_revision"]) if str(kv.get("mod_revision", "")).isdigit() else None
        deleted = str(ev.get("type", "PUT")).upper() in ("DELETE", "1")
        out.append(KeyChange(deleted, value, rev))
    return out


class LeaderKeyTracker:
    """Leader-key changes as detection events: deleted = the leader's lease ended (leader lost),
    put with another name = a new leader; a put of the same name (lease renewal) is nothing."""

    def __init__(self, leader: str | None) -> None:
        self.leader = leader

    def feed(self, sink: Callable[[ManagerEvent], None], source: str, change: KeyChange, t: float,
             t_host: float | None, uncertainty: float) -> None:
        if change.deleted:
            sink(ManagerEvent(t, "leader_lost", source, self.leader,
                              f"leader key deleted (lease of {self.leader} ended)", uncertainty, t_host,
                              change.revision))
            self.leader = None
        elif change.value != self.leader:
            sink(ManagerEvent(t, "leader_changed", source, change.value, f"leader key -> {change.value}",
                              uncertainty, t_host, change.revision))
            self.leader = change.value


class PatroniApiConfig(Frozen):
    """The REST API: TLS verification (a CA file, or false) and basic auth (password by reference)."""

    port: int = Field(8008, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    verify: bool | NoControl = True
    username: NoControl | None = None
    password: Secret | None = None


class EtcdConfig(Frozen):
    """Where the DCS is: etcd v3 endpoints, Patroni's namespace and scope (default: asked of the
    REST API), and how to watch it (auto: directly if reachable, else over SSH on `via`)."""

    endpoints: tuple[Endpoint, ...]
    namespace: str = Field("/service", pattern=r"^/[A-Za-z0-9_./-]*$")
    scope: Name | None = None
    watch: Literal["auto", "direct", "ssh", "off"] = "auto"
    via: Name | None = None  # the host to run etcdctl on (default: the first member)


class PatroniConfig(HaConfig):
    kind: Literal["patroni"] = "patroni"
    engines: ClassVar[frozenset[str]] = frozenset({"postgres"})
    api: PatroniApiConfig = PatroniApiConfig()
    dcs: EtcdConfig | None = None


class PatroniManager(HAManager):
    kind = "patroni"
    Config = PatroniConfig
    # failsafe_mode (Patroni >= 3.0): a leader that loses the DCS keeps its role while every member
    # it knows answers its /failsafe call, instead of demoting itself; primary_start_timeout: how
    # long a leader whose PostgreSQL stopped may try to start it again before a failover (0: at once)
    changeable_settings: ClassVar[frozenset[str]] = frozenset({"synchronous_mode", "synchronous_mode_strict",
                                                               "maximum_lag_on_failover", "failsafe_mode",
                                                               "primary_start_timeout"})
    healthy_states: ClassVar[frozenset[str]] = frozenset({"running", "streaming"})

    # -- REST --------------------------------------------------------------------------------
    @property
    def cfg(self) -> PatroniConfig:
        return self.config  # type: ignore[return-value]

    def urls(self, member: str | None = None) -> list[str]:
        api = self.cfg.api
        return [f"{api.scheme}://{self.inventory.member_address(m)}:{api.port}" for m in self.cluster.members
                if member is None or m.host == member]

    def _context(self) -> ssl.SSLContext | None:
        api = self.cfg.api
        if api.scheme != "https":
            return None
        ctx = ssl.create_default_context(cafile=api.verify if isinstance(api.verify, str) else None)
        if api.verify is False:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _headers(self) -> dict[str, str]:
        api = self.cfg.api
        headers = {"Content-Type": "application/json"}
        if api.username:
            secret = api.password.resolve() if api.password is not None else ""
            token = base64.b64encode(f"{api.username}:{secret}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        return headers

    def request(self, url: str, method: str = "GET", body: dict[str, Any] | None = None,
                timeout: float = 10.0) -> tuple[int, Any]:
        """(status, parsed body) for 2xx and 5xx health answers; raises PatroniError on auth, TLS,
        connection errors and 4xx."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._context()) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
            if status in (401, 403):
                raise PatroniError(f"{url}: HTTP {status} (authentication: set ha.api.username/password)") from None
            if status < 500 and method == "GET":
                raise PatroniError(f"{url}: HTTP {status}: {raw[:200]!r}") from None
        except ssl.SSLError as exc:
            raise PatroniError(f"{url}: TLS: {exc} (set ha.api.verify to the CA file)") from None
        except (OSError, http.client.HTTPException) as exc:
            raise PatroniError(f"{url}: {exc}") from None
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode(errors="replace")

    def _first(self, path: str, timeout: float = 2.0) -> tuple[str, Any]:
        """The first member's answer to a GET; raises the last error if none answers."""
        last: Exception | None = None
        for base in self.urls():
            try:
                _, body = self.request(f"{base}{path}", timeout=timeout)
                if isinstance(body, dict):
                    return base, body
            except PatroniError as exc:
                last = exc
        raise PatroniError(str(last) if last else f"no Patroni REST API answered {path}")

    # -- roles -------------------------------------------------------------------------------
    def members(self) -> list[MemberView]:
        try:
            _, data = self._first("/cluster", timeout=1.0)
        except PatroniError as exc:
            return [MemberView(m.host, UNKNOWN, error=str(exc)) for m in self.cluster.members]
        return member_views(data, [m.host for m in self.cluster.members])

    def health(self) -> tuple[bool, str]:
        ok, why = super().health()
        if not ok:
            return ok, why
        bad = [f"{m.member}={m.state}" for m in self.members()
               if m.role == REPLICA and m.state not in ("running", "streaming")]
        return (not bad, "ok" if not bad else f"replicas not streaming: {', '.join(bad)}")

    # -- settings ----------------------------------------------------------------------------
    def read_settings(self) -> dict[str, Any]:
        _, config = self._first("/config")
        out = {k: config.get(k) for k in SETTINGS if k in config}
        out["use_pg_rewind"] = (config.get("postgresql") or {}).get("use_pg_rewind")
        return out

    def version(self) -> str | None:
        try:
            _, status = self._first("/patroni")
        except PatroniError:
            return None
        return (status.get("patroni") or {}).get("version")

    def scope(self) -> str | None:
        if self.cfg.dcs is not None and self.cfg.dcs.scope:
            return self.cfg.dcs.scope
        try:
            _, status = self._first("/patroni")
        except PatroniError:
            return None
        return (status.get("patroni") or {}).get("scope")

    def apply_settings(self, values: dict[str, Any], wait: float = 30.0) -> dict[str, Any]:
        """PATCH the dynamic configuration; when turning synchronous_mode on, wait (bounded) until
        a synchronous standby is named. Returns the previous values; raises on any failure."""
        unknown = set(values) - self.changeable_settings
        if unknown:
            raise PatroniError(f"cannot change {', '.join(sorted(unknown))} (changeable: "
                               f"{', '.join(sorted(self.changeable_settings))})")
        base, config = self._first("/config")
        previous = {k: config.get(k, False if k in _OFF_WHEN_ABSENT else None) for k in values}
        status, body = self.request(f"{base}/config", "PATCH", values)
        if status != 200:
            raise PatroniError(f"{base}/config: PATCH answered HTTP {status}: {str(body)[:200]}")
        if values.get("synchronous_mode"):
            deadline = time.time() + wait
            while not any(m.sync for m in self.members()):
                if time.time() > deadline:
                    raise PatroniError(f"synchronous_mode on, but no synchronous standby after {wait:g}s")
                time.sleep(0.2)
        return previous

    def detection_bound_s(self) -> float | None:
        try:
            s = self.read_settings()
        except PatroniError:
            return None
        ttl, loop = s.get("ttl"), s.get("loop_wait")
        return float(ttl) + float(loop or 0) if isinstance(ttl, int | float) else None

    # -- actions -----------------------------------------------------------------------------
    def switchover(self, candidate: str | None = None) -> ActionResult:
        leader = self.leader()
        body: dict[str, Any] = {"leader": leader}
        if candidate:
            body["candidate"] = candidate
        t_sent = time.time()
        try:
            status, answer = self.request(f"{self.urls(leader)[0] if leader else self.urls()[0]}/switchover",
                                          "POST", body, timeout=60)
        except PatroniError as exc:
            status, answer = 0, str(exc)
        return ActionResult("switchover", status == 200, t_sent, time.time(), member=leader, candidate=candidate,
                            answer=str(answer)[:300], detail={"http_status": status})

    def rejoin(self, member: str) -> ActionResult:
        """Patroni rewinds an old primary by itself where it can (use_pg_rewind); this rebuilds it
        from the leader (POST /reinitialize), which always works."""
        t_sent = time.time()
        try:
            status, answer = self.request(f"{self.urls(member)[0]}/reinitialize", "POST", {"force": True}, timeout=60)
        except PatroniError as exc:
            status, answer = 0, str(exc)
        return ActionResult("rejoin", status == 200, t_sent, time.time(), member=member, answer=str(answer)[:300],
                            rewound=False, rebuilt=status == 200, detail={"http_status": status})

    # -- detection ---------------------------------------------------------------------------
    def watch(self, sink: Callable[[ManagerEvent], None], interval: float = 0.1) -> Watcher:
        w = Watcher()
        dcs = self.cfg.dcs
        if dcs is not None and dcs.watch != "off":
            key = self._leader_key()
            if key is None:
                w.errors.append("DCS watch off: Patroni's scope is unknown (set ha.dcs.scope)")
            elif dcs.watch == "direct" or (dcs.watch == "auto" and self._reachable(dcs.endpoints[0])):
                w.spawn(lambda: self._watch_direct(key, sink, w), "watch-patroni-etcd")
            else:
                w.spawn(lambda: self._watch_ssh(key, sink, w), "watch-patroni-etcdctl")
        return w

    def _leader_key(self) -> str | None:
        assert self.cfg.dcs is not None
        scope = self.scope()
        return None if scope is None else f"{self.cfg.dcs.namespace.rstrip('/')}/{scope}/leader"

    @staticmethod
    def _reachable(endpoint: str) -> bool:
        host, _, port = endpoint.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
            return True
        except OSError:
            return False

    def _watch_direct(self, key: str, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        """etcd's v3 JSON gateway: POST /v3/watch streams one JSON result per line; each event is
        stamped when it arrives (blocking reads; `stop` shuts the socket)."""
        assert self.cfg.dcs is not None
        host, _, port = self.cfg.dcs.endpoints[0].rpartition(":")
        tracker = LeaderKeyTracker(self.leader())
        body = json.dumps({"create_request": {"key": base64.b64encode(key.encode()).decode()}})
        # the socket being read now: `stop` shuts that one (one closer, not one per reconnect: a
        # socket closed when etcd went away is not shut again)
        live: list[socket.socket] = []

        def shut() -> None:
            for s in live:
                if s.fileno() != -1:
                    s.shutdown(socket.SHUT_RDWR)

        w.on_stop(shut)
        while not w.stopping:
            conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=5.0)
            try:
                conn.request("POST", "/v3/watch", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                sock = conn.sock
                if sock is not None:
                    sock.settimeout(None)
                    live[:] = [sock]
                buf = b""
                while not w.stopping:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    t = time.time()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        for change in key_changes(line):
                            tracker.feed(sink, "etcd-watch", change, t, None, 0.001)
            except (OSError, http.client.HTTPException, ValueError):
                w.wait(0.2)
            finally:
                live.clear()
                conn.close()

    def _watch_ssh(self, key: str, sink: Callable[[ManagerEvent], None], w: Watcher) -> None:
        """`etcdctl watch` on a member, each line stamped with the host's clock."""
        assert self.cfg.dcs is not None and self.pool is not None
        via = self.cfg.dcs.via or self.cluster.members[0].host
        from chaoskit.ha.hoststream import stamped

        endpoints = ",".join(f"http://{e}" for e in self.cfg.dcs.endpoints)
        command = (f"ETCDCTL_API=3 exec timeout --foreground 7200 etcdctl --endpoints={shlex.quote(endpoints)} watch "
                   f"{shlex.quote(key)} -w json")
        tracker = LeaderKeyTracker(self.leader())
        for line in stamped(self.pool.get(via), command, lambda: w.stopping):
            for change in key_changes(line.text):
                tracker.feed(sink, "etcdctl-watch", change, line.t, line.t_host, line.uncertainty_s)
