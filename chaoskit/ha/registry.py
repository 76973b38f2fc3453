"""Which HA managers exist: every module of this package that defines an `HAManager` subclass
with a `kind` (so a new manager is its module alone), and the cluster -> manager factory."""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from chaoskit.ha.base import HaConfig, HAManager

if TYPE_CHECKING:
    from chaoskit.inventory.fanout import RemotePool
    from chaoskit.inventory.models import Cluster, Inventory

_SKIP = {"base", "registry"}
_MANAGERS: dict[str, type[HAManager]] | None = None


def managers() -> dict[str, type[HAManager]]:
    global _MANAGERS
    if _MANAGERS is None:
        import chaoskit.ha as pkg

        found: dict[str, type[HAManager]] = {}
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name in _SKIP or info.name.startswith("_"):
                continue
            module = importlib.import_module(f"chaoskit.ha.{info.name}")
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, HAManager) and obj.kind \
                        and obj.__module__ == module.__name__:
                    found[obj.kind] = obj
        _MANAGERS = found
    return _MANAGERS


def validate_config(value: Any) -> HaConfig:
    """The manager's own config model from an inventory's `ha:` mapping; errors as ValueError
    naming the field inside `ha`."""
    if isinstance(value, HaConfig):
        return value
    if value is None:
        value = {"kind": "none"}
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise ValueError("expected a mapping with kind (e.g. {kind: patroni})")
    kind = value.get("kind")
    known = managers()
    if kind not in known:
        raise ValueError(f"unknown HA manager {str(kind)[:40]!r}; known: {', '.join(sorted(known))}")
    try:
        return known[kind].Config.model_validate(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}: {msg}" if where else msg) from None


def is_multi_writer(cluster: Cluster) -> bool:
    """Every member of this cluster's quorum takes writes (its manager's `multi_writer`)."""
    return bool(getattr(managers().get(cluster.ha.kind), "multi_writer", False))


def manager_for(cluster: Cluster, inventory: Inventory, pool: RemotePool | None = None) -> HAManager:
    return managers()[cluster.ha.kind](cluster, inventory, pool)
