"""What a fault is, as given on the command line or in a playbook (validated, frozen)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from chaoskit.models import Frozen
from chaoskit.units import parse_duration, parse_rate

FaultKind = Literal["kill", "pause", "stop", "partition", "loss", "bandwidth", "netem", "stress", "latency", "proxy"]
PROCESS_KINDS = {"kill", "pause", "stop"}
NETWORK_KINDS = {"partition", "loss", "bandwidth", "netem", "latency", "proxy"}
PROXY_KINDS = {"latency", "proxy"}
DEFAULT_TTL = 300.0
MAX_TTL = 24 * 3600.0


class FaultSpec(Frozen):
    """One fault. `target` is a host name, `role:primary|replica|sync_standby|any` (with `cluster`),
    optionally followed by `@one|@all|@minority` (default one), or `client`: the load's own link
    to the database (latency/proxy toxics on relays of the control node)."""

    kind: FaultKind
    target: str
    cluster: str | None = None
    ttl: float = DEFAULT_TTL
    # process faults
    processes: tuple[str, ...] = ()  # names from the member's `processes`; empty = the database server
    signal: str = "KILL"
    # network faults
    peers: tuple[str, ...] = ()  # host names or role:... (resolved); empty = every lab/inventory host
    direction: Literal["both", "in", "out"] = "both"
    action: Literal["drop", "reject"] = "drop"
    interface: str = "eth0"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = Field(0.0, ge=0, le=100)
    corrupt_pct: float = Field(0.0, ge=0, le=100)
    duplicate_pct: float = Field(0.0, ge=0, le=100)
    rate: str | None = None  # bandwidth, e.g. 1mbit
    # latency / proxy: the link from the target host to `peers` on this port goes through a relay with
    # toxics: delay_ms (+ jitter_ms), rate, reset_after_ms, down; `stream` picks the direction that
    # delay and rate apply to (upstream = target host -> peer, downstream = peer -> target host)
    peer_port: int | None = Field(None, ge=1, le=65535)
    proxy_user: str = "nobody"
    stream: Literal["both", "upstream", "downstream"] = "both"
    reset_after_ms: float | None = Field(None, ge=0)
    down: bool = False
    # stress
    cpu_workers: int = Field(0, ge=0)
    io_workers: int = Field(0, ge=0)
    vm_workers: int = Field(0, ge=0)
    vm_bytes: str = "256M"

    @field_validator("ttl", mode="before")
    @classmethod
    def _ttl(cls, value: object) -> float:
        seconds = parse_duration(value)  # type: ignore[arg-type]
        if not 0 < seconds <= MAX_TTL:
            raise ValueError(f"ttl must be within (0, {MAX_TTL:.0f}s]: every fault heals itself in bounded time")
        return seconds

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str) -> str:
        name = value.upper().removeprefix("SIG")
        if name not in {"KILL", "TERM", "INT", "QUIT", "HUP", "ABRT", "SEGV", "STOP"}:
            raise ValueError(f"unsupported signal {value!r}")
        return name

    @classmethod
    def _role_needs_cluster(cls) -> bool:
        return True

    @model_validator(mode="after")
    def _kind_needs(self) -> FaultSpec:
        if self.kind == "loss" and not self.loss_pct:
            raise ValueError("loss needs loss_pct > 0")
        if self.kind == "bandwidth" and not self.rate:
            raise ValueError("bandwidth needs rate (e.g. 1mbit)")
        if self.kind == "netem" and not (self.delay_ms or self.loss_pct or self.corrupt_pct or self.duplicate_pct):
            raise ValueError("netem needs delay_ms, loss_pct, corrupt_pct or duplicate_pct")
        client = self.target == "client"
        if self.kind == "latency" and not ((client or (self.peers and self.peer_port)) and self.delay_ms):
            raise ValueError("latency needs peers, peer_port and delay_ms")
        if self.kind == "proxy" and not (client or (self.peers and self.peer_port)):
            raise ValueError("proxy needs peers and peer_port")
        if self.kind == "proxy" and not (self.delay_ms or self.rate or self.reset_after_ms is not None or self.down):
            raise ValueError("proxy needs a toxic: delay_ms, rate, reset_after_ms or down")
        if self.rate is not None:
            parse_rate(self.rate)
        if self.kind == "stress" and not (self.cpu_workers or self.io_workers or self.vm_workers):
            raise ValueError("stress needs cpu_workers, io_workers or vm_workers")
        if self.target.startswith("role:") and not self.cluster and self._role_needs_cluster():
            raise ValueError("a role target needs cluster")
        return self


def proxy_toxic_args(spec: FaultSpec) -> list[str]:
    """The relay's command-line toxics for a fault spec (host-side fault and control-node link alike)."""
    up = spec.stream in ("both", "upstream")
    down = spec.stream in ("both", "downstream")
    args = ["--delay-up-ms", f"{spec.delay_ms if up else 0:g}", "--delay-down-ms", f"{spec.delay_ms if down else 0:g}"]
    if spec.jitter_ms:
        args += ["--jitter-ms", f"{spec.jitter_ms:g}"]
    if spec.rate:
        bps = parse_rate(spec.rate)
        args += ["--rate-up-bps", f"{bps if up else 0:g}", "--rate-down-bps", f"{bps if down else 0:g}"]
    if spec.reset_after_ms is not None:
        args += ["--reset-after-ms", f"{spec.reset_after_ms:g}"]
    if spec.down:
        args.append("--down")
    return args
