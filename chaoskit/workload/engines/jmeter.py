"""The JMeter engine (`tool: jmeter`): the user's plan, run non-GUI by the user's JMeter.

## Its output

JMeter's results file (JTL, CSV form) read sample by sample.

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

## Its group runner

A JMeter client group (`load.groups[].tool: jmeter`): the user's plan run once, non-GUI, by the
user's JMeter, for the whole load; every sample read from its JTL as JMeter writes it.

Each JMeter thread is one client of the group: threads get the group's worker ids in the order
their first sample is read (a plan's thread count is known at validate: `plan_threads`
or the group's `workers`). A sample is one op: its start and elapsed time from the JTL, `ok` when
JMeter marked it a success, else classed by its SQLSTATE or its words (`error_class`);
a failed write whose connection broke may have committed (unknown), one the server refused did
not (failed), as chaoskit's own clients judge theirs. JMeter does not give up a thread whose
connection broke: the plan's next sample tries again (a JDBC pool validates or reconnects; the
shipped example plan reconnects itself), so no client is started again here. JMeter ending before
the load's stop (the plan ran out, or the JVM failed) is said as an event and not hidden: the
group has no load after it.

JMeter is a launcher script that runs java as its child (JMeter 5.x's bin/jmeter does not exec),
so it runs under a process-group guard (`lifeline.guarded_group`): the load's stop, or the
controller's death, ends the script and the JVM together. The connection reaches the plan as
JMeter properties on a pipe (`-q /dev/fd/N`): nothing from the inventory is on a command line,
the password is never written to disk. Kept under `tools/<group>/`: `results.jtl` (JMeter's
samples as it wrote them), `jmeter.log` (its own log) and `jmeter.out` (its console).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from defusedxml import DefusedXmlException, ElementTree
from pydantic import ValidationInfo, field_validator

from chaoskit.db.base import Driver, ErrorClass
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.lifeline import guarded_group
from chaoskit.models import Frozen
from chaoskit.recorder import FAIL, OK, Recorder
from chaoskit.validation import SafePath, input_file
from chaoskit.workload.engine import LoadEngine, Measures, ToolGroupBase, group_driver
from chaoskit.workload.outcomes import outcome_for
from chaoskit.workload.spec import ClientGroup, LoadSpec
from chaoskit.workload.tool_group import STOP_GRACE_S

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


class Settings(Frozen):
    """What a JMeter group runs (`jmeter: {...}`, a playbook's group and an experiment's load
    alike): the user's plan (`plan`, a .jmx, relative to the playbook) with the user's JMeter
    (`bin`: a command on PATH, default `jmeter`, or a path, relative to the playbook or absolute,
    e.g. /opt/apache-jmeter-5.6/bin/jmeter). `writes` says whether its samples write (default
    true): a failed write whose connection broke is then an unknown commit."""

    plan: SafePath
    bin: SafePath = "jmeter"
    writes: bool = True

    @field_validator("plan")
    @classmethod
    def _plan(cls, value: str, info: ValidationInfo) -> str:
        return input_file(value, info)

    @field_validator("bin")
    @classmethod
    def _bin(cls, value: str, info: ValidationInfo) -> str:
        if "/" not in value:
            found = shutil.which(value)
            if found is None:
                raise ValueError(f"no command {value[:60]!r} on PATH: give JMeter's bin/jmeter as a path")
            return found
        path = input_file(value, info)
        if not os.access(path, os.X_OK):
            raise ValueError(f"{value[:200]!r} is not executable")
        return path


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


JDBC_DRIVER_CLASS = {"postgres": "org.postgresql.Driver", "mysql": "org.mariadb.jdbc.Driver"}


def connection_properties(driver: Driver, spec: LoadSpec, group: ClientGroup) -> dict[str, str]:
    """What the plan is given of its route, as JMeter properties (`${__P(chaoskit.jdbc.url)}` in a
    JDBC Connection Configuration, `props.get(...)` in a script)."""
    cluster = driver.cluster
    endpoints = driver.endpoints()
    props = {
        "chaoskit.jdbc.url": jdbc_url(driver.family, endpoints, cluster.database or "", spec.connect_timeout,
                                             spec.op_timeout),
        "chaoskit.jdbc.driver": JDBC_DRIVER_CLASS[driver.family],
        "chaoskit.jdbc.user": cluster.user or "",
        "chaoskit.db.hosts": ",".join(f"{h}:{p}" for h, p in endpoints),
        "chaoskit.db.name": cluster.database or "",
        "chaoskit.group": group.name,
        THREADS_PROPERTY: str(group.workers),
        "chaoskit.run_id": spec.run_id,
    }
    password = driver.password()
    if password is not None:
        props["chaoskit.jdbc.password"] = password
    return props


def book_sample(recorder: Recorder, worker: int, kind: str, s: Sample, writes: bool,
                words: Callable[[str], ErrorClass | None]) -> None:
    """One sample as one op: ok as JMeter marked it; a failure classed by its SQLSTATE or words,
    unknown where a write's connection broke (it may have committed), failed where the server
    refused it or it never connected (the same rule as chaoskit's own clients' commits)."""
    if s.ok:
        recorder.record(worker, kind, s.t_start, s.t_end, OK)
        return
    cls = error_class(s.code, s.message, words)
    outcome = outcome_for(cls, "commit", False) if writes else FAIL
    recorder.record(worker, kind, s.t_start, s.t_end, outcome, cls.value, f"{s.code} {s.message}".strip()[:200])


@dataclass(kw_only=True)
class JmeterGroup(ToolGroupBase):
    """The group's one JMeter, started at the first tick, read on every tick, stopped at the end."""

    driver: Driver

    def __post_init__(self) -> None:
        assert isinstance(self.group.settings, Settings)
        self.settings = self.group.settings
        self.kind = "write" if self.settings.writes else "read"
        self.jtl = self.raw / "results.jtl"
        self.reader = JtlReader(self.jtl)
        self.read_to = 0
        self.threads: dict[str, int] = {}
        self.free = list(self.group.worker_ids)
        self.dropped = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = False

    def _start(self, now: float) -> None:
        self.started = True
        props = properties_text(connection_properties(self.driver, self.spec, self.group))
        r, w = os.pipe()
        try:
            os.write(w, props.encode("ascii"))  # escaped to ASCII; far below a pipe's 64 KiB
        finally:
            os.close(w)
        argv = run_argv(self.settings.bin, self.settings.plan, str(self.jtl), str(self.raw / "jmeter.log"),
                               f"/dev/fd/{r}")
        with open(self.raw / "jmeter.out", "ab") as out:
            out.write(f"== started {now:.6f}\n".encode())
            out.flush()
            try:
                self.proc = subprocess.Popen(guarded_group(argv), stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, pass_fds=(r,), cwd=self.raw,
                                             start_new_session=True)
            finally:
                os.close(r)

    def _read(self) -> None:
        if not self.jtl.exists():
            return
        with open(self.jtl, "rb") as fh:
            fh.seek(self.read_to)
            data = fh.read()
        self.read_to += len(data)
        for sample in self.reader.feed(data):
            self._book(sample)

    def _book(self, s: Sample) -> None:
        worker = self.threads.get(s.thread)
        if worker is None:
            if not self.free:
                self.dropped += 1
                if self.dropped == 1:
                    self.event("tool_samples_dropped", s.t_end, self.group.first_worker, thread=s.thread,
                               why=f"the plan runs more threads than the group's {self.group.workers} workers")
                return
            worker = self.threads[s.thread] = self.free.pop(0)
        book_sample(self.recorder, worker, self.kind, s, self.settings.writes, self.driver.classify_words)

    def _ended(self, now: float) -> None:
        assert self.proc is not None
        code = self.proc.returncode
        self._read()
        self.proc = None
        if not self.stopping:
            said = (self.raw / "jmeter.out").read_text(errors="replace").strip().splitlines()
            self.event("tool_ended", now, self.group.first_worker, exit=code,
                       why=(said[-1][:200] if said else "no output") + " (not started again: the group has no "
                       "load after this)")

    def tick(self, now: float) -> None:
        if not self.started:
            self._start(now)
            return
        if self.proc is None:
            return
        self._read()
        if self.proc.poll() is not None:
            self._ended(now)

    def stop(self) -> None:
        """SIGTERM to the guard ends JMeter's script and JVM (every finished sample is already in the
        JTL: it is flushed sample by sample); then the rest of the JTL is read."""
        self.stopping = True
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self._ended(time.time())
        else:
            self._read()
        if self.dropped:
            self.event("tool_samples_dropped", time.time(), self.group.first_worker, samples=self.dropped,
                       why=f"the plan ran more threads than the group's {self.group.workers} workers")


TEST = "jmeter"  # the grid's workload that runs an experiment's plan


class Jmeter(LoadEngine):
    name = "jmeter"
    on_loaders = False  # its plan and its bin are files of the control node (checked there at validate)
    measures = Measures(0.0, False, True, False)  # its JTL: every sample's start and elapsed time
    speaks = ("postgres", "mysql")  # the JDBC URLs chaoskit gives a plan (`jdbc_url`)
    settings = Settings
    settings_example = "{plan: my-plan.jmx}"
    tests = (TEST,)
    paced_by = "its plan's timers"

    @classmethod
    def group_workers(cls, settings: Settings, workers: int, given: bool) -> int:
        """A JMeter group's clients are its plan's threads: read from the plan, or said by
        `workers` where the plan's thread counts are expressions JMeter alone can work out (with
        `workers` given, chaoskit.threads is set to it: a plan may take its threads from it)."""
        try:
            threads = plan_threads(settings.plan, {THREADS_PROPERTY: workers} if given else None)
        except PlanError as exc:
            raise ValueError(str(exc)) from None
        if threads is None and not given:
            raise ValueError("the plan's thread count is not a number nor ${__P(name,default)} in every thread "
                             "group: say it with workers")
        if threads is not None and given and threads != workers:
            raise ValueError(f"workers ({workers}) is not the plan's {threads} threads; leave workers out")
        return workers if threads is None else threads

    @classmethod
    def check_ladder(cls, settings: Settings, workers: tuple[int, ...]) -> None:
        """A JMeter cell's clients are its plan's threads: the plan must run `workers` threads when
        chaoskit.threads is set to it (a thread group of `${__P(chaoskit.threads,N)}`), else the
        cells would all measure the plan's own count under other names."""
        for n in workers:
            try:
                threads = plan_threads(settings.plan, {THREADS_PROPERTY: n})
            except PlanError as exc:
                raise ValueError(str(exc)) from None
            if threads != n:
                raise ValueError(f"grid.workers {n}: the plan runs {threads or 'an unknown number of'} threads "
                                 f"with {THREADS_PROPERTY}={n}; a JMeter ladder's thread group takes its "
                                 f"threads from ${{__P({THREADS_PROPERTY},N)}}")

    @classmethod
    def cell_settings(cls, settings: Settings, test: str, prepare: bool) -> Settings:
        return settings  # the plan, its threads set through chaoskit.threads (validated by check_ladder)

    @classmethod
    def describe(cls, group: ClientGroup, route: Cluster) -> list[str]:
        """What the group runs on the control node, as `chaoskit validate` shows it (nothing is reached)."""
        s = group.settings
        assert isinstance(s, Settings)
        argv = run_argv(s.bin, s.plan, f"tools/{group.name}/results.jtl", f"tools/{group.name}/jmeter.log",
                        "/dev/fd/<pipe>")
        return [" ".join(argv) + f"   (properties on the pipe: chaoskit.jdbc.url/.driver/.user/.password of cluster "
                f"{route.name}, chaoskit.db.hosts, chaoskit.db.name; the plan's {group.workers} threads, run once "
                "for the whole load)"]

    @classmethod
    def runner(cls, group: ClientGroup, cluster: Cluster, inventory: Inventory, spec: LoadSpec, raw: Path,
               recorder: Recorder, rate_share: float | None) -> JmeterGroup:
        """Nothing to prepare: a plan's tables are the plan's (a setUp thread group makes them)."""
        return JmeterGroup(group, spec, raw, recorder, rate_share, driver=group_driver(cluster, inventory, spec, group))
