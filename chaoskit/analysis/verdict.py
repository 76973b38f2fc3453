"""Verdicts: {valid: true | false | "unknown", ...figures}; merged worst-first."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

_RANK = {False: 2, "unknown": 1, True: 0}


def checked(fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run a checker; a crash becomes verdict `unknown` with the error."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return {"valid": "unknown", "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=3)}


def merge(verdicts: list[Any]) -> Any:
    return max(verdicts, key=lambda v: _RANK.get(v, 1), default=True)
