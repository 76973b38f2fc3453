"""Patroni + PostgreSQL 15 on pg1-pg3 (Debian's Patroni 3.0.2, or PyPI's 4.x with `--patroni
pypi`), etcd on dcs1 as the DCS; ttl 10 / loop_wait 1 / retry_timeout 4 (PyPI: ttl 20, its
minimum) so a failover takes seconds."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from chaoskit.ha.patroni import normalise_role
from chaoskit.lab import daemons
from chaoskit.lab.recipes import Build, psql
from chaoskit.lab.spec import ETCD_PORT, PATRONI_PORT, PG_PORT, PG_SCOPE, LabHost, LabSpec, Paths

NAME = "patroni"
DEFAULT = True
HOSTS = tuple(LabHost(f"pg{i}", 10 + i, "pg", NAME) for i in (1, 2, 3))


def hosts(spec: LabSpec) -> list[Any]:
    return spec.by_role("pg")


def build(b: Build) -> None:
    dcs = b.spec.jump_host
    for host in hosts(b.spec):
        b.launch(f"{host.name}/patroni",
                 daemons.patroni_setup(host, dcs, b.flavour, b.secrets["pg_superuser"], b.secrets["pg_replication"]),
                 Paths.patroni_pid(host))
    b.wait(lambda: health(b.spec), f"the Patroni cluster (logs under {Paths.root}/hosts/pg*)")


def rest(url: str, method: str = "GET", body: dict[str, Any] | None = None, timeout: float = 1.0) -> tuple[int, Any]:
    """The lab's own Patroni REST calls (no auth, no TLS): (status, JSON body or None)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, None


def members(spec: LabSpec) -> list[dict[str, Any]]:
    for host in hosts(spec):
        _, data = rest(f"http://{host.address}:{PATRONI_PORT}/cluster")
        if not isinstance(data, dict) or "members" not in data:
            continue
        out = []
        for m in data.get("members", []):
            lag = m.get("lag")
            out.append({"name": m.get("name"), "role": normalise_role(m.get("role", "")), "state": m.get("state"),
                        "lag_bytes": lag if isinstance(lag, int) else None, "timeline": m.get("timeline")})
        return sorted(out, key=lambda m: m["name"] or "")
    return []


def health(spec: LabSpec) -> tuple[bool, str]:
    ms = members(spec)
    if not ms:
        return False, "patroni: REST API not answering"
    leaders = [m for m in ms if m["role"] == "leader"]
    streaming = [m for m in ms if m["role"] == "replica" and m["state"] in ("running", "streaming")
                 and isinstance(m.get("lag_bytes"), int)]
    if len(leaders) != 1 or len(streaming) != len(hosts(spec)) - 1:
        return False, "patroni: " + ", ".join(f"{m['name']}={m['role']}/{m['state']}" for m in ms)
    leader = next(h for h in hosts(spec) if h.name == leaders[0]["name"])
    try:
        n = psql(str(leader.dir / "run"), PG_PORT, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
    except Exception as exc:
        return False, f"postgres: {exc}"
    if n.strip() != str(len(hosts(spec)) - 1):
        return False, f"postgres: {n.strip()} streaming replicas"
    stale = abandoned_timelines(spec, ms)
    if stale:
        return False, "patroni: " + "; ".join(f"{name} holds the history of abandoned timeline(s) {tlis}"
                                              for name, tlis in stale.items())
    return True, "ok"


def abandoned_timelines(spec: LabSpec, ms: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Replicas holding the history file of a timeline newer than the leader's: a timeline that a
    promotion created and the cluster then abandoned (Patroni gave the leader key back to the old
    leader after a pause; the promoted node was rewound). The lab has no WAL archive, so the next
    promotion reuses that timeline ID, and such a replica follows its own stale history: it asks
    for WAL on that timeline from before the new fork and is refused for good ("requested WAL
    segment ... has already been removed"; seen on the lab after pg-pause-patroni, then
    pg-kill-postmaster). Such a replica is reinitialised (`repair`)."""
    leader = next((m for m in ms if m["role"] == "leader"), None)
    if leader is None or not isinstance(leader.get("timeline"), int):
        return {}
    out = {}
    for m in ms:
        if m is leader or not m["name"]:
            continue
        wal = Paths.pg_data(spec.host(m["name"])) / "pg_wal"
        tlis = sorted(t for f in wal.glob("*.history") if (t := _history_tli(f.name)) and t > leader["timeline"])
        if tlis:
            out[m["name"]] = tlis
    return out


def _history_tli(name: str) -> int | None:
    try:
        return int(name.removesuffix(".history"), 16) if len(name) == 16 else None
    except ValueError:
        return None


def repair(spec: LabSpec) -> list[str]:
    """Replicas that do not stream (a diverged old primary that was not rewound; one left
    "starting" for good, waiting for WAL the leader has recycled), or that hold an abandoned
    timeline's history (`abandoned_timelines`), are rebuilt from the leader through Patroni's REST
    API (POST /reinitialize, forced: it cancels the start Patroni is waiting on). Called only
    after the lab stayed unhealthy for a while (`manager.wait_healthy`'s repair_after)."""
    ms = members(spec)
    leader = next((m for m in ms if m["role"] == "leader"), None)
    if leader is None:
        return []
    lhost = next(h for h in hosts(spec) if h.name == leader["name"])
    try:
        streaming = set(psql(str(lhost.dir / "run"), PG_PORT, "SELECT application_name FROM pg_stat_replication "
                                                            "WHERE state = 'streaming'").split())
    except Exception:
        return []
    done = []
    stale = abandoned_timelines(spec, ms)
    for m in ms:
        if m["role"] == "replica" and (m["name"] not in streaming or m["name"] in stale):
            status, _ = rest(f"http://{spec.host(m['name']).address}:{PATRONI_PORT}/reinitialize", "POST",
                             {"force": True}, timeout=10)
            if status == 200:
                done.append(m["name"])
    return done


def clusters(spec: LabSpec) -> dict[str, Any]:
    pg_members = [{
        "host": h.name, "data_dir": str(Paths.pg_data(h)),
        "processes": {
            "postgres": {"pid_file": str(Paths.pg_data(h) / "postmaster.pid"), "comm": "postgres"},
            "patroni": {"pid_file": str(Paths.patroni_pid(h)), "comm": "patroni",
                        "start": str(Paths.launcher(h, "patroni"))},
        },
        # Patroni's own log (log.dir), and its stdout, where PostgreSQL's stderr goes (no collector)
        "logs": {"patroni": str(h.dir / "patroni.log"), "postgres": str(h.dir / "patroni.out")},
    } for h in hosts(spec)]
    addresses = ",".join(h.address for h in hosts(spec))
    pg = {
        "engine": "postgres",
        "ha": {"kind": "patroni", "api": {"port": PATRONI_PORT},
               "dcs": {"endpoints": [f"{spec.jump_host.address}:{ETCD_PORT}"], "scope": PG_SCOPE}},
        "members": pg_members, "port": PG_PORT, "database": "postgres", "user": "postgres",
        "password": {"file": str(Paths.secret("pg_superuser"))},
        "dsn": f"host={addresses} port={PG_PORT} dbname=postgres target_session_attrs=read-write",
    }
    # the read route: libpq's own (target_session_attrs=prefer-standby, libpq 14 and later): the
    # first member in the list that is a standby, the primary when none is; what an application
    # that sends reads to replicas without a proxy writes, and nothing to run beside the cluster
    return {"pg": pg, "pg-read": {**pg, "read_route": True, "dsn": f"host={addresses} port={PG_PORT} dbname=postgres "
                                                                  "target_session_attrs=prefer-standby"}}


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.pg_data(h) for h in hosts(spec)]
