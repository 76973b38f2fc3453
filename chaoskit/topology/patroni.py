"""Patroni's REST API: the HA manager's own view of the cluster.

Role strings differ across versions (3.0.2 says master/running, 4.x primary/streaming); every
caller sees them normalised to `leader` / `replica`.
"""

from __future__ import annotations

import json
import ssl
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
