"""Host tags merged key by key, with a production tag that nothing below it can undo.

Why: the production guard reads tags, so a merge that loses a tag lets a drill through to
production. Tags come from several levels (own shape: `defaults` < host; Ansible shape: all <
parent group < child group < host, the order of Ansible's variable precedence). They are merged
per key rather than replaced, keys compare case-insensitively (two keys of one level that differ
only in case are refused: which one was meant cannot be known), and a production value
(prod, production, prd, live in any case, under `env` or `environment`) set at any level stays:
a lower level cannot set it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PRODUCTION_TAGS = frozenset({"prod", "production", "prd", "live"})
PRODUCTION_KEYS = ("env", "environment")


class TagError(ValueError):
    """A level's tags are malformed; `path` is where in the source file."""

    def __init__(self, message: str, path: tuple) -> None:
        super().__init__(message)
        self.path = path


def is_production(tags: dict[str, str]) -> bool:
    return any(str(tags.get(k, "")).lower() in PRODUCTION_TAGS for k in PRODUCTION_KEYS)


def fold(tags: object, path: tuple) -> dict[Any, Any]:
    """One level's tags with lower-case keys (and string values lower-cased); keys that collide
    after case folding are refused. A non-mapping is returned as found for the type check."""
    if not isinstance(tags, dict):
        if tags is None:
            return {}
        raise TagError("tags are a mapping of name -> value", path)
    out: dict[Any, Any] = {}
    seen: dict[Any, Any] = {}
    for key, value in tags.items():
        k = key.lower() if isinstance(key, str) else key
        if k in seen:
            raise TagError(f"tag keys {_shown(seen[k])} and {_shown(key)} differ only in case", (*path, key))
        seen[k] = key
        out[k] = value.lower() if isinstance(value, str) else value
    return out


def merge(levels: Iterable[tuple[object, tuple]]) -> dict[Any, Any]:
    """Levels from the lowest precedence to the highest; a production value is sticky."""
    merged: dict[Any, Any] = {}
    for tags, path in levels:
        for key, value in fold(tags, path).items():
            if key in PRODUCTION_KEYS and str(merged.get(key, "")).lower() in PRODUCTION_TAGS:
                continue
            merged[key] = value
    return merged


def _shown(key: object) -> str:
    return repr(str(key)[:40])  # repr escapes every character that is not printable
