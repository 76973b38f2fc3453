"""JMeter's results file (JTL, CSV form) read sample by sample.

A JTL line is one sample: `timeStamp` (ms since the epoch: the sample's start when
`sampleresult.timestamp.start=true`, as JMeter's own jmeter.properties sets it, else its end),
`elapsed` (ms), `success`, `threadName`, and the sampler's `responseCode` / `responseMessage`
(a JDBC sampler puts the SQLSTATE and the driver's message there). Columns are found by the
header line, so JMeter must write one (`jmeter.save.saveservice.print_field_names=true`, the
default since 3.x): without it, column order depends on the user's save settings and guessing
would misread them. Fixture: tests/fixtures/tools/jmeter-2.13-server-stopped.

A drill runs the user's plan (`.jmx`) with the user's own JMeter, non-GUI (`run_argv`), against
the group's route: the connection reaches the plan as JMeter properties (`chaoskit.jdbc.url`,
`chaoskit.jdbc.user`, `chaoskit.jdbc.password`, and the parts of the URL), written to a pipe
JMeter reads as an extra property file (`-q`), so neither a value nor the password is ever on a
command line. A failed sample is classed by its SQLSTATE (a JDBC sampler's response code begins
with it) and, where that says nothing, by the driver's words, as chaoskit's own clients are.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from defusedxml import DefusedXmlException, ElementTree

from chaoskit.db.base import ErrorClass

REQUIRED = ("timeStamp", "elapsed", "success", "threadName")
OPTIONAL = ("label", "responseCode", "responseMessage")  # "" where the user's save settings left them out
TIMESTAMPS = ("start", "end")


class Sample(NamedTuple):
    t_start: float
    t_end: float
    thread: str
    label: str
    ok: bool
    code: str
    message: str


class JtlError(ValueError):
    """Not a JTL this reader can take: the file, line and field, the text shown escaped."""


def read_jtl(path: Path, timestamp: str = "start") -> list[Sample]:
    """Every sample, in order of their start. `timestamp`: what the file's timeStamp is ("start",
    JMeter's default as shipped, or "end" where `sampleresult.timestamp.start=false`)."""
    with open(path, "rb") as fh:
        out = parse_jtl(fh.read(), path, timestamp)
    out.sort(key=lambda s: (s.t_start, s.thread))
    return out


def parse_jtl(data: bytes, path: Path | str, timestamp: str = "start") -> list[Sample]:
    """Every sample of a whole JTL's bytes, in the file's order (the order JMeter wrote them and a
    drill's group read them); `path` names the file in errors."""
    reader = JtlReader(path, timestamp)
    out = reader.feed(data, final=True)
    if reader.header is None:
        raise JtlError(f"{path}:1: the file is empty")
    return out


class JtlReader:
    """A JTL read as it grows (a drill reads JMeter's file while JMeter writes it): `feed` takes
    the bytes appended since the last call and gives the samples of every record now complete. A
    record ends at a newline outside quotes (JMeter quotes a message holding a comma, a quote or a
    newline), so a record cut in the middle of a write waits for the rest."""

    def __init__(self, path: Path | str, timestamp: str = "start") -> None:
        if timestamp not in TIMESTAMPS:
            raise ValueError(f"timestamp must be one of {TIMESTAMPS}, not {timestamp!r}")
        self.path, self.timestamp = path, timestamp
        self.header: list[str] | None = None
        self.col: dict[str, int] = {}
        self.line = 0  # the file's lines consumed so far
        self._pending = b""

    def feed(self, data: bytes, final: bool = False) -> list[Sample]:
        buf = self._pending + data
        cut = _record_end(buf)
        if final and buf and cut < len(buf):
            cut = len(buf)  # the file's last record, without its newline
        self._pending = buf[cut:]
        text = buf[:cut].decode("utf-8", "replace")
        out = []
        for row, lines in _records(text):
            first = self.line + 1
            self.line += lines
            if not row:
                continue
            if self.header is None:
                self._take_header(row)
                continue
            out.append(self._sample(row, first))
        return out

    def _take_header(self, header: list[str]) -> None:
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise JtlError(f"{self.path}:1: no header line naming {', '.join(missing)} (run JMeter with "
                           f"jmeter.save.saveservice.output_format=csv and print_field_names=true): "
                           f"{','.join(header)[:120]!r}")
        self.header, self.col = header, {name: i for i, name in enumerate(header)}

    def _sample(self, row: list[str], n: int) -> Sample:
        assert self.header is not None
        col = self.col
        if len(row) != len(self.header):
            raise JtlError(f"{self.path}:{n}: {len(row)} fields where the header names {len(self.header)}: "
                           f"{','.join(row)[:120]!r}")
        stamp = _ms(row[col["timeStamp"]], "timeStamp", self.path, n)
        elapsed = _ms(row[col["elapsed"]], "elapsed", self.path, n)
        success = row[col["success"]]
        if success not in ("true", "false"):
            raise JtlError(f"{self.path}:{n}: field success is {success!r}, not true or false")
        start = stamp if self.timestamp == "start" else stamp - elapsed
        optional = {name: row[col[name]] if name in col else "" for name in OPTIONAL}
        return Sample(start / 1000, (start + elapsed) / 1000, row[col["threadName"]], optional["label"],
                      success == "true", optional["responseCode"], optional["responseMessage"])


def _record_end(buf: bytes) -> int:
    """Where the last complete record of `buf` ends (after its newline): a newline outside quotes
    (a doubled quote inside a quoted field toggles twice, so counting quotes is enough)."""
    quoted, end = False, 0
    for i, byte in enumerate(buf):
        if byte == 0x22:
            quoted = not quoted
        elif byte == 0x0A and not quoted:
            end = i + 1
    return end


def _records(text: str) -> Iterable[tuple[list[str], int]]:
    """Each CSV record of `text` with the number of the file's lines it spans."""
    fh = io.StringIO(text)
    rows = csv.reader(fh)
    seen = 0
    for row in rows:
        lines = rows.line_num - seen
        seen = rows.line_num
        yield row, lines


def _ms(text: str, field: str, path: Path | str, n: int) -> int:
    if not text.isdigit():
        hint = " (set jmeter.save.saveservice.timestamp_format=ms)" if field == "timeStamp" else ""
        raise JtlError(f"{path}:{n}: field {field} is {text[:40]!r}, not a whole number of ms{hint}")
    return int(text)


# A JDBC sampler's response code begins with the SQLSTATE (JMeter's JDBC Request: "<SQLSTATE> <vendor
# code>"; the shipped example plan's BeanShell sampler sets the SQLSTATE alone). Classes by prefix,
# longest first: connection exceptions (08) split into the connect that failed and the connection
# that broke; PostgreSQL's operator intervention (57P01/57P02: the server went down under the
# session; 57P03: it cannot take connections yet); the rest as chaoskit's own clients name them.
_SQLSTATE = (("08001", ErrorClass.connect_refused), ("08004", ErrorClass.connect_refused),
             ("57P03", ErrorClass.connect_refused), ("57P01", ErrorClass.connection_lost),
             ("57P02", ErrorClass.connection_lost), ("08", ErrorClass.connection_lost),
             ("57014", ErrorClass.timeout), ("25006", ErrorClass.read_only), ("40001", ErrorClass.serialization),
             ("40P01", ErrorClass.serialization), ("23", ErrorClass.constraint), ("53", ErrorClass.resources),
             ("HY008", ErrorClass.timeout))
_STATE = re.compile(r"^([0-9A-Z]{5})\b")


def error_class(code: str, message: str, words: Callable[[str], ErrorClass | None]) -> ErrorClass:
    """A failed sample's class: its SQLSTATE where the code carries one that says the class, else
    the driver's reading of its message (`Driver.classify_words`), else `other`."""
    state = _STATE.match(code.strip())
    if state:
        for prefix, cls in _SQLSTATE:
            if state.group(1).startswith(prefix):
                return cls
    return words(message) or words(code) or ErrorClass.other


@dataclass(frozen=True)
class Settings:
    """A drill's JMeter group: the user's plan (absolute path), the JMeter to run it (`bin`: a
    command on PATH or an absolute path), and whether its samples write (their failures after
    the connection broke are then unknown commits)."""

    plan: str
    bin: str = "jmeter"
    writes: bool = True


# a plan's thread groups whose thread count is read from the plan: JMeter's own three kinds
THREAD_GROUPS = ("ThreadGroup", "SetupThreadGroup", "PostThreadGroup")
_PROPERTY_DEFAULT = re.compile(r"^\$\{__P\(\s*([A-Za-z0-9_.-]+)\s*,\s*(\d+)\s*\)\}$")
# the property chaoskit sets to the group's clients: a plan whose thread group reads
# ${__P(chaoskit.threads,N)} runs as many threads as a drill's group or an experiment's cell asks
THREADS_PROPERTY = "chaoskit.threads"


class PlanError(ValueError):
    """A plan this group cannot run: what, in one line."""


def plan_threads(path: Path | str, properties: Mapping[str, int] | None = None) -> int | None:
    """The plan's threads, all enabled thread groups together, with `properties` set as chaoskit
    sets them: each group's `num_threads` as a number or as `${__P(name,default)}` (the property's
    value where given, else its default); None when one cannot be read that way (an expression,
    or a plugin's thread group): then the group's `workers` must say it."""
    try:
        root = ElementTree.parse(str(path)).getroot()
    except (ElementTree.ParseError, DefusedXmlException, OSError) as exc:
        raise PlanError(f"{path}: not a JMeter plan JMeter could load: {str(exc)[:120]}") from None
    if root.tag != "jmeterTestPlan":
        raise PlanError(f"{path}: not a JMeter plan (its root element is {root.tag[:40]!r}, not jmeterTestPlan)")
    total = 0
    for el in root.iter():
        if not el.tag.endswith("ThreadGroup") or el.get("enabled", "true") != "true":
            continue
        if el.tag not in THREAD_GROUPS:
            return None
        prop = next((p for p in el.iter("stringProp") if p.get("name") == "ThreadGroup.num_threads"), None)
        if prop is None:
            prop = next((p for p in el.iter("intProp") if p.get("name") == "ThreadGroup.num_threads"), None)
        text = (prop.text or "").strip() if prop is not None else ""
        if text.isdigit():
            total += int(text)
            continue
        prop_ref = _PROPERTY_DEFAULT.match(text)
        if not prop_ref:
            return None
        total += int((properties or {}).get(prop_ref.group(1), prop_ref.group(2)))
    if total == 0:
        raise PlanError(f"{path}: no enabled thread group with a thread in it")
    return total


def jdbc_url(family: str, endpoints: Iterable[tuple[str, int]], database: str, connect_timeout_s: float,
             op_timeout_s: float) -> str:
    """The JDBC URL of a route's endpoints, each driver finding the writer itself as libpq's
    read-write search does: PostgreSQL's driver with `targetServerType=primary`, MariaDB's and
    MySQL's in failover order (`sequential` for MariaDB Connector/J 2.x, which also takes the
    `jdbc:mysql:` scheme). Timeouts in the driver's units: PostgreSQL's in whole seconds (its
    minimum 1), MySQL's in ms.

    The connect timeout is per endpoint, as libpq's `connect_timeout` is. PostgreSQL's driver has
    no such bound for a whole connection (its `connectTimeout` is the TCP handshake only), and its
    `loginTimeout` bounds one pass over *all* the hosts: it is the per-endpoint timeout times the
    number of endpoints. Given one endpoint's timeout for the pass, a plan on a busy control node
    whose pass takes a little longer (a refused old primary, a replica answering it is read-only,
    then the writer) failed every connect until the load eased, long after the writer was back."""
    pairs = [(h, int(p)) for h, p in endpoints]
    hosts = ",".join(f"{h}:{p}" for h, p in pairs)
    if family == "postgres":
        per_host = max(1, round(connect_timeout_s))
        return (f"jdbc:postgresql://{hosts}/{database}?targetServerType=primary"
                f"&connectTimeout={per_host}&socketTimeout={max(1, round(op_timeout_s))}"
                f"&loginTimeout={per_host * len(pairs)}")
    if family == "mysql":
        return (f"jdbc:mysql:sequential://{hosts}/{database}?connectTimeout={round(connect_timeout_s * 1000)}"
                f"&socketTimeout={round(op_timeout_s * 1000)}")
    raise PlanError(f"no JDBC URL for a {family} cluster")


def properties_text(props: dict[str, str]) -> str:
    """A Java properties file holding `props` exactly: the format's own characters (backslash,
    `=`, `:`, `#`, `!`; a key's spaces, a value's leading one) escaped with a backslash, and every
    character outside printable ASCII as `\\uXXXX` UTF-16 code units, so no value can end its line."""
    def esc(text: str, key: bool) -> str:
        out = []
        for i, ch in enumerate(text):
            if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
                out.append("\\" + ch)
            elif " " <= ch <= "~":
                out.append(ch)
            else:
                units = ch.encode("utf-16-be")
                out.extend(f"\\u{int.from_bytes(units[j:j + 2], 'big'):04x}" for j in range(0, len(units), 2))
        return "".join(out)
    return "".join(f"{esc(k, True)}={esc(v, False)}\n" for k, v in props.items())


def run_argv(bin_path: str, plan: str, jtl: str, log: str, properties_path: str) -> list[str]:
    """JMeter non-GUI on the plan: every sample to `jtl` as CSV with its header and flushed as it
    is written (the drill reads it live; a JMeter stopped at the load's end loses no finished
    sample), the start instant as timeStamp, JMeter's own log to `log`, the connection from the
    property file at `properties_path`, and no UDP listener for its shutdown port (it is stopped
    by signal). Each value is a whole `-Jname=value` word or the word after its option, which for
    JMeter's options is read as a value."""
    return [bin_path, "-n", "-t", plan, "-l", jtl, "-j", log, "-q", properties_path,
            "-Jjmeter.save.saveservice.output_format=csv", "-Jjmeter.save.saveservice.print_field_names=true",
            "-Jjmeter.save.saveservice.timestamp_format=ms", "-Jsampleresult.timestamp.start=true",
            "-Jjmeter.save.saveservice.autoflush=true", "-Jjmeterengine.nongui.port=0",
            "-Jsummariser.interval=5"]
