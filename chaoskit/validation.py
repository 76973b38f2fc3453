"""Strict string types for every value that crosses the boundary (inventory, playbook, CLI).

Why: values from an inventory or a playbook end up in scripts that run as root on a host and in
files an auditor reads. Quoting is the second line of defence; the first is that a host name, a
process name, an interface or a size can only hold the characters such a thing has. Free text
(descriptions) may hold newlines; nothing may hold other control characters. Inventory `start` /
`stop` commands are the one kind of value that is code by design (`Command`): they are run as
given on their host, so an inventory must be trusted like a script.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

# C0 and C1 controls (U+009B is a one-byte CSI to many terminals, U+0085 a newline to some logs),
# line/paragraph separators and the bidi controls that reorder what a reader sees
_INVISIBLE = r"\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(r"[\x00-\x1f" + _INVISIBLE + "]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f" + _INVISIBLE + "]")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*\.?$")
_POSIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# a value that starts with `-` would reach a command as an option: names and paths never do
_PATH = re.compile(r"^(?!-)[A-Za-z0-9_./@:+%=,~-]{1,4096}$")
_IFACE = re.compile(r"^(?!-)[A-Za-z0-9_.:-]{1,15}$")
# an IPv6 zone (after `%`): an interface name or an interface index, nothing else
_SCOPE_ID = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}|[0-9]{1,10})$")
_SIZE = re.compile(r"^[0-9]{1,12}([bBkKmMgGtT]|%)?$")
_TAG = re.compile(r"^[A-Za-z0-9_.:/@+-]{1,128}$")
_SERVICE = re.compile(r"^(?!-)[A-Za-z0-9@_.:\\-]{1,255}$")
_FAULT_ID = re.compile(r"^[0-9a-f]{12}$")
_SQL_NAME = re.compile(r"^(?!-)[A-Za-z0-9_$.@-]{1,128}$")

SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "passphrase", "api_key", "apikey")


def is_safe_path(value: str) -> bool:
    """An absolute path of plain characters (for paths read from a host's own files)."""
    return value.startswith("/") and bool(_PATH.fullmatch(value)) and ".." not in value.split("/")


def no_control(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("control characters (newline, tab, NUL, ...) are not allowed here")
    return value


def free_text(value: str) -> str:
    if _CONTROL_BUT_NEWLINE.search(value):
        raise ValueError("control characters other than newlines are not allowed")
    if len(value) > 20_000:
        raise ValueError("longer than 20,000 characters")
    return value


def _pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        no_control(value)
        if not regex.fullmatch(value):
            raise ValueError(f"not a valid {what}: {value[:80]!r}")
        return value

    return AfterValidator(check)


def ip_address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """`ipaddress.ip_address`, except that an IPv6 scope id must be an interface name or index:
    the standard library takes anything after `%` (spaces, option-like words, 100 kB), and an
    address reaches rule text, `tc` batches, conninfo strings and the SSH host name."""
    addr = ipaddress.ip_address(value)
    _check_scope_id(value)
    return addr


def _check_scope_id(address: str) -> None:
    _, pct, scope = address.partition("%")
    if pct and not _SCOPE_ID.fullmatch(scope):
        raise ValueError(f"not a valid IPv6 scope id (an interface name or number): {scope[:40]!r}")


def ip_network(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """`ipaddress.ip_network` (host bits allowed) with the same rule for a scope id."""
    net = ipaddress.ip_network(value, strict=False)
    ip_address(value.partition("/")[0])
    return net


def host_address(value: str) -> str:
    """An IPv4/IPv6 address or an RFC 1123 host name: the only things an SSH target can be."""
    no_control(value)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        _check_scope_id(value)
        return value
    if _HOSTNAME.fullmatch(value) and not value.replace(".", "").isdigit():
        return value
    raise ValueError(f"not an IP address or host name: {value[:80]!r}")


def endpoint(value: str) -> str:
    """`host:port` or `[v6]:port` (a MySQL-protocol endpoint)."""
    no_control(value)
    if value.startswith("["):
        addr, _, port = value[1:].partition("]:")
    else:
        addr, _, port = value.rpartition(":")
    if not addr or not _is_port(port):
        raise ValueError(f"expected host:port, got {value[:80]!r}")
    host_address(addr)
    return value


def _is_port(text: str) -> bool:
    """1..65535 in ASCII digits (str.isdigit takes digits of every script, and int() reads them)."""
    return text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535


def jump_spec(value: str) -> str:
    """A jump host: an inventory host name, or `[user@]address[:port]`."""
    no_control(value)
    user, at, rest = value.rpartition("@")
    if at and not _POSIX_USER.fullmatch(user):
        raise ValueError(f"not a valid jump user: {user[:40]!r}")
    if rest.startswith("["):
        addr, _, port = rest[1:].partition("]")
        port = port.removeprefix(":")
    elif rest.count(":") == 1:
        addr, port = rest.split(":")
    else:
        addr, port = rest, ""
    if port and not _is_port(port):
        raise ValueError(f"not a valid jump port: {port[:10]!r}")
    host_address(addr)
    return value


def finite(value: float) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _str_only(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("expected a string")
    return value


NoControl = Annotated[str, AfterValidator(no_control)]
FreeText = Annotated[str, AfterValidator(free_text)]
Name = Annotated[str, _pattern(_NAME, "name (letters, digits, _ . -; up to 63, starting with a letter or digit)")]
HostAddress = Annotated[str, AfterValidator(host_address)]
Endpoint = Annotated[str, AfterValidator(endpoint)]
JumpSpec = Annotated[str, AfterValidator(jump_spec)]
PosixUser = Annotated[str, _pattern(_POSIX_USER, "user name")]
SafePath = Annotated[str, _pattern(_PATH, "path (letters, digits and _ . / @ : + % = , ~ -; no spaces or quotes)")]
Interface = Annotated[str, _pattern(_IFACE, "network interface name")]
SizeSpec = Annotated[str, _pattern(_SIZE, "size (e.g. 256M, 1G, 50%)")]
Tag = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int | float | bool) else v),
                _pattern(_TAG, "tag")]
ServiceName = Annotated[str, _pattern(_SERVICE, "service (unit) name")]
FaultId = Annotated[str, _pattern(_FAULT_ID, "fault id (12 hex digits)")]
SqlName = Annotated[str, _pattern(_SQL_NAME, "database or user name")]
Command = Annotated[str, BeforeValidator(_str_only), AfterValidator(no_control)]


def is_fault_id(value: str) -> bool:
    return bool(_FAULT_ID.fullmatch(value))


def is_name(value: str) -> bool:
    return bool(_NAME.fullmatch(value))


def secret_like(key: str) -> bool:
    k = key.lower()
    return any(word in k for word in SECRET_WORDS)


def input_file(value: str, info: ValidationInfo) -> str:
    """A file an input names (a playbook's pgbench script, a JMeter plan), resolved against the
    input's own directory (the loader's validation context `base_dir`) and found now: a file that
    is not there is bad input before anything starts."""
    from pathlib import Path

    base = (info.context or {}).get("base_dir")
    path = Path(value) if Path(value).is_absolute() or base is None else Path(base) / value
    if not path.is_file():
        raise ValueError(f"no file {value[:200]!r} (relative paths count from the playbook's directory)")
    return str(path.resolve())
