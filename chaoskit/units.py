"""Durations and sizes as users write them in YAML and on the command line ("30s", "100ms")."""

from __future__ import annotations

import math
import re

# ASCII only: `\d` would take digits of every script (float() reads them) and `\s` every space
_DURATION = re.compile(r"^ *([0-9]{1,12}(?:\.[0-9]{1,9})?) *(us|ms|s|m|h)? *$", re.ASCII)
_FACTORS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_DURATION_S = 30 * 24 * 3600.0  # nothing chaoskit does is meant to last longer than a month


def parse_duration(value: str | int | float) -> float:
    """Seconds from `30s`, `100ms`, `2m`, `1.5h` or a bare number of seconds (finite, >= 0, at
    most 30 days: a duration ends up as a host's dead-man deadline)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s or 100ms")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError("duration too large") from None
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"not a duration: {str(value)[:40]!r} (expected e.g. 30s, 100ms, 2m)")
        seconds = float(match.group(1)) * _FACTORS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError("a duration must be a finite number")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"duration too large (at most {MAX_DURATION_S / 86400:g} days)")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    return f"{seconds / 60:g}m"


_RATE = re.compile(r"^([0-9]{1,12}(?:\.[0-9]{1,9})?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$",
                   re.IGNORECASE | re.ASCII)
_RATE_BYTES = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
               "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}


def parse_rate(value: str) -> float:
    """Bytes per second from a rate in tc's units: `1mbit`, `512kbit` (bits/s) or `2mbps` (bytes/s)."""
    match = _RATE.match(str(value)) if isinstance(value, str) else None
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"not a rate: {str(value)[:40]!r} (expected e.g. 1mbit, 512kbit, 2mbps)")
    return float(match.group(1)) * _RATE_BYTES[match.group(2).lower()]


def canonical_rate(value: str) -> str:
    """A rate exactly as it is written into the host's rule text: number and lower-case unit, no
    spaces (refused rather than normalised: `10 mbit` would be two words in a tc batch)."""
    parse_rate(value)
    return value.lower()


_SIZE = re.compile(r"^([0-9]{1,12})([bBkKmMgGtT])?$", re.ASCII)
_SIZE_FACTORS = {None: 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str) -> int:
    """Bytes from `0`, `512K`, `64M`, `2G` (binary units, as df and fallocate read them)."""
    match = _SIZE.match(str(value)) if isinstance(value, str | int) and not isinstance(value, bool) else None
    if not match:
        raise ValueError(f"not a size: {str(value)[:40]!r} (expected e.g. 0, 64M, 2G)")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_FACTORS[unit]
