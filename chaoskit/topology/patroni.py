"""Patroni's REST API: the HA manager's own view of the cluster.

Role strings differ across versions (3.0.2 says master/running, 4.x primary/streaming); every
caller sees them normalised to `leader` / `replica`.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

_LEADER = {"leader", "master", "primary", "standby_leader"}
_REPLICA = {"replica", "sync_standby", "standby", "quorum_standby"}


def normalise_patroni_role(role: str) -> str:
    r = (role or "").lower()
    if r in _LEADER:
        return "leader"
    if r in _REPLICA:
        return "replica"
    return r or "unknown"


def get_json(url: str, *, timeout: float = 1.0, verify: bool | str = True) -> Any | None:
    """GET a Patroni endpoint; Patroni answers some health endpoints with 503 and a JSON body."""
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            return json.loads(exc.read() or b"null")
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def fetch_cluster(base_url: str, *, timeout: float = 1.0, verify: bool | str = True) -> dict[str, Any] | None:
    data = get_json(f"{base_url}/cluster", timeout=timeout, verify=verify)
    return data if isinstance(data, dict) and "members" in data else None


def api_urls(cluster: Any, inventory: Any, member_host: str | None = None) -> list[str]:
    """Base URLs of the cluster's Patroni REST APIs (one member's, when named)."""
    api = cluster.patroni
    assert api is not None
    return [f"{api.scheme}://{inventory.member_address(m)}:{api.port}" for m in cluster.members
            if member_host is None or m.host == member_host]


def request(url: str, method: str, body: dict[str, Any], timeout: float = 30) -> tuple[int, str]:
    """POST/PATCH JSON to Patroni; (HTTP status, body) also for error statuses."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def apply_config(cluster: Any, inventory: Any, values: dict[str, Any], wait: float = 30) -> dict[str, Any] | None:
    """PATCH the dynamic configuration through the first member that accepts it; when turning
    synchronous_mode on, wait (bounded) until a synchronous standby is named. Returns the previous
    values (None if no member accepted the change)."""
    bases = api_urls(cluster, inventory)
    for base in bases:
        config = get_json(f"{base}/config", timeout=3)
        if not isinstance(config, dict):
            continue
        previous = {k: config.get(k, False) for k in values}
        status, _ = request(f"{base}/config", "PATCH", values)
        if status != 200:
            continue
        deadline = time.time() + wait
        while values.get("synchronous_mode") and time.time() < deadline:
            view = next((v for b in bases if (v := fetch_cluster(b, timeout=2))), None) or {}
            if any(m.get("role") == "sync_standby" for m in view.get("members", [])):
                break
            time.sleep(0.2)
        return previous
    return None
