"""JMeter's results file (JTL, CSV form) read sample by sample.

A JTL line is one sample: `timeStamp` (ms since the epoch: the sample's start when
`sampleresult.timestamp.start=true`, as JMeter's own jmeter.properties sets it, else its end),
`elapsed` (ms), `success`, `threadName`, and the sampler's `responseCode` / `responseMessage`
(a JDBC sampler puts the SQLSTATE and the driver's message there). Columns are found by the
header line, so JMeter must write one (`jmeter.save.saveservice.print_field_names=true`, the
default since 3.x): without it, column order depends on the user's save settings and guessing
would misread them. Fixture: tests/fixtures/tools/jmeter-2.13-server-stopped.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import NamedTuple

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
    if timestamp not in TIMESTAMPS:
        raise ValueError(f"timestamp must be one of {TIMESTAMPS}, not {timestamp!r}")
    out = []
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        rows = csv.reader(fh)
        header = next(rows, None)
        if header is None:
            raise JtlError(f"{path}:1: the file is empty")
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise JtlError(f"{path}:1: no header line naming {', '.join(missing)} (run JMeter with "
                           f"jmeter.save.saveservice.output_format=csv and print_field_names=true): "
                           f"{','.join(header)[:120]!r}")
        col = {name: i for i, name in enumerate(header)}
        for n, row in enumerate(rows, 2):
            if not row:
                continue
            if len(row) != len(header):
                raise JtlError(f"{path}:{n}: {len(row)} fields where the header names {len(header)}: "
                               f"{','.join(row)[:120]!r}")
            stamp = _ms(row[col["timeStamp"]], "timeStamp", path, n)
            elapsed = _ms(row[col["elapsed"]], "elapsed", path, n)
            success = row[col["success"]]
            if success not in ("true", "false"):
                raise JtlError(f"{path}:{n}: field success is {success!r}, not true or false")
            start = stamp if timestamp == "start" else stamp - elapsed
            optional = {name: row[col[name]] if name in col else "" for name in OPTIONAL}
            out.append(Sample(start / 1000, (start + elapsed) / 1000, row[col["threadName"]], optional["label"],
                              success == "true", optional["responseCode"], optional["responseMessage"]))
    out.sort(key=lambda s: (s.t_start, s.thread))
    return out


def _ms(text: str, field: str, path: Path, n: int) -> int:
    if not text.isdigit():
        hint = " (set jmeter.save.saveservice.timestamp_format=ms)" if field == "timeStamp" else ""
        raise JtlError(f"{path}:{n}: field {field} is {text[:40]!r}, not a whole number of ms{hint}")
    return int(text)
