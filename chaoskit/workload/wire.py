"""A recorder batch as bytes another host can send and the controller can trust: JSON, checked
field by field on the way in, never pickle (a loader host's spool is data, and unpickling data is
running code). `encode` and `decode` are exact inverses for every batch a recorder drains; a
payload that is not such a batch raises `WireError` naming the field, and nothing of it is used.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Base64Bytes,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chaoskit.recorder import COLUMNS, ERROR_CLASSES, STALL, Batch, Gap

VERSION = 1
Count = Annotated[int, Field(ge=0)]
Worker = Annotated[int, Field(ge=0, lt=1 << 31)]
Seq = Annotated[int, Field(ge=1, lt=1 << 62)]


def _error_class(value: str) -> str:
    if value not in ERROR_CLASSES:
        raise ValueError(f"unknown error class {value[:40]!r}")
    return value


def _gap_class(value: str) -> str:
    return value if value == STALL else _error_class(value)


ErrorClassName = Annotated[str, AfterValidator(_error_class)]
Text = Annotated[str, Field(max_length=200)]
Kind = Literal["write", "read"]
Outcome = Literal["ok", "fail", "info"]


class WireError(ValueError):
    """A payload that is not a batch (the field and why)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class GapWire(_Strict):
    worker: Worker
    last_ok_before: float | None
    first_err: float
    first_err_class: Annotated[str, AfterValidator(_gap_class)]
    first_ok_after: float | None
    errors: Annotated[int, Field(ge=0)]

    @model_validator(mode="after")
    def _stall_or_errors(self) -> GapWire:
        # a gap opens with an error (errors >= 1), or is a stall: an op acknowledged only after the
        # stall bound, with no error (recorder.STALL, errors 0)
        if (self.first_err_class == STALL) != (self.errors == 0):
            raise ValueError(f"a {self.first_err_class} gap with {self.errors} errors: a stall has none, any other "
                             "gap at least one")
        return self


class BatchWire(_Strict):
    v: Literal[1]
    intervals: list[tuple[int, list[Count], Base64Bytes]]
    errors: list[tuple[float, Worker, Kind, Outcome, ErrorClassName, Text]]
    errors_dropped: Count
    gaps: list[GapWire]
    ledger: list[tuple[Worker, Seq, Base64Bytes]]
    ops: list[tuple[float, float, Worker, Kind, Outcome, Seq | None, Text | None, ErrorClassName | None,
                    Annotated[int, Field(ge=0)] | None]]
    rows: dict[str, tuple[Count, Count]]
    watermark: int
    txns: list[tuple[Worker, float, float, Outcome,
                     list[tuple[Literal["append", "r", "set", "get"], int, int | list[int] | None]]]] = []

    @field_validator("txns")
    @classmethod
    def _micro_ops(cls, value: list[Any]) -> list[Any]:
        for txn in value:
            for f, _, v in txn[4]:
                if (f != "r") != isinstance(v, int):
                    raise ValueError(f"a transaction's {f} carries {type(v).__name__}: an append, a register's set "
                                     "and get carry a value, a list's read the list it read (or null)")
        return value

    @field_validator("intervals")
    @classmethod
    def _columns(cls, value: list[tuple[int, list[int], bytes]]) -> list[tuple[int, list[int], bytes]]:
        for _, counts, _ in value:
            if len(counts) != len(COLUMNS):
                raise ValueError(f"an interval has {len(counts)} counts, not {len(COLUMNS)}")
        return value

    @field_validator("ledger")
    @classmethod
    def _whole_entries(cls, value: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
        for _, _, raw in value:
            if len(raw) % 4:
                raise ValueError(f"a ledger run of {len(raw)} bytes is not whole 4-byte entries")
        return value

    @field_validator("rows")
    @classmethod
    def _row_ids(cls, value: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for key in value:
            if not key.isdigit() or len(key) > 18:
                raise ValueError(f"row id {key[:30]!r} is not a number")
        return value


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode("ascii")


def encode(batch: Batch) -> bytes:
    doc = {
        "v": VERSION,
        "intervals": [[idx, list(counts), _b64(encoded)] for idx, counts, encoded in batch.intervals],
        "errors": [list(e) for e in batch.errors],
        "errors_dropped": batch.errors_dropped,
        "gaps": [{"worker": g.worker, "last_ok_before": g.last_ok_before, "first_err": g.first_err,
                  "first_err_class": g.first_err_class, "first_ok_after": g.first_ok_after, "errors": g.errors}
                 for g in batch.gaps],
        "ledger": [[worker, first, _b64(raw)] for worker, first, raw in batch.ledger],
        "ops": [list(op) for op in batch.ops],
        "rows": {str(row): list(counts) for row, counts in batch.rows.items()},
        "watermark": batch.watermark,
        "txns": [[w, t0, t1, outcome, [[f, k, list(v) if isinstance(v, tuple) else v] for f, k, v in ops]]
                 for w, t0, t1, outcome, ops in batch.txns],
    }
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def decode(payload: bytes) -> Batch:
    """The batch `payload` encodes; `WireError` (the first field at fault) when it is not one."""
    try:
        wire = BatchWire.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the payload)"
        raise WireError(f"not a batch: {where}: {first['msg']}") from None
    from chaoskit.history import Op

    return Batch(
        intervals=[(idx, list(counts), bytes(encoded)) for idx, counts, encoded in wire.intervals],
        errors=[tuple(e) for e in wire.errors],
        errors_dropped=wire.errors_dropped,
        gaps=[Gap(g.worker, g.last_ok_before, g.first_err, g.first_err_class, g.first_ok_after, g.errors)
              for g in wire.gaps],
        ledger=[(worker, first, bytes(raw)) for worker, first, raw in wire.ledger],
        ops=[Op(*op) for op in wire.ops],
        rows={int(row): list(counts) for row, counts in wire.rows.items()},
        watermark=wire.watermark,
        txns=[(w, t0, t1, outcome, tuple((f, k, tuple(v) if isinstance(v, list) else v) for f, k, v in ops))
              for w, t0, t1, outcome, ops in wire.txns],
    )



# -- deliveries: what a loader's agent spools, one frame each -------------------------------------
DELIVERY_KINDS = ("ready", "batch", "final", "event")
Scalar = str | int | float | bool | None


class HeaderWire(_Strict):
    kind: Literal["ready", "batch", "final", "event"]
    t: float  # when the agent spooled it, on the control clock as the agent knows it


EVENT_KIND = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def encode_delivery(kind: str, t: float, payload: Batch | dict[str, Scalar] | None = None) -> bytes:
    """One frame's payload: a header line ({"kind", "t"}), then the batch or the event."""
    if kind not in DELIVERY_KINDS:
        raise ValueError(f"not a delivery kind: {kind}")
    head = json.dumps({"kind": kind, "t": t}, separators=(",", ":"), allow_nan=False).encode()
    if kind in ("batch", "final"):
        assert isinstance(payload, Batch)
        return head + b"\n" + encode(payload)
    if kind == "event":
        assert isinstance(payload, dict)
        return head + b"\n" + json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
    return head + b"\n"


def decode_delivery(data: bytes) -> tuple[str, float, Batch | dict[str, Scalar] | None]:
    """(kind, t, the batch or the event or None); `WireError` when it is not a delivery."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        raise WireError("not a delivery: no header line")
    try:
        header = HeaderWire.model_validate_json(head)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise WireError(f"not a delivery: header.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    if header.kind in ("batch", "final"):
        return header.kind, header.t, decode(body)
    if header.kind == "event":
        return header.kind, header.t, _event(body)
    if body:
        raise WireError(f"not a delivery: a {header.kind} carries nothing")
    return header.kind, header.t, None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _event(body: bytes) -> dict[str, Scalar]:
    if len(body) > 4096:
        raise WireError(f"not a delivery: an event of {len(body)} bytes (at most 4096)")
    try:
        doc = json.loads(body, parse_constant=_no_constant)
    except ValueError:
        raise WireError("not a delivery: the event is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        raise WireError("not a delivery: an event is an object with a kind")
    for key, value in doc.items():
        flat = value is None or isinstance(value, str | int | float | bool)
        if len(key) > 40 or not flat:
            raise WireError(f"not a delivery: event field {str(key)[:40]!r} is not a flat value")
        if isinstance(value, str) and len(value) > 1000:
            raise WireError(f"not a delivery: event field {key!r} is over 1000 characters")
    if not EVENT_KIND.match(doc["kind"]):
        raise WireError(f"not a delivery: event kind {doc['kind'][:40]!r}")
    return doc
