"""What a fault is, as given on the command line or in a playbook: one frozen model per kind.

Common to every kind: `target` (a host, a live role of the cluster, the hosts carrying a tag, or
`client`), `cluster`,
`ttl` (the host reverts the fault itself at the latest this long after staging it, even if the
controller is gone) and `duration` (revert this long after the fault took effect; the host's
dead-man does it at the planned end plus a small margin if the controller has not). Every
number is finite, every string matches its pattern (`chaoskit.validation`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, field_validator, model_validator

from chaoskit.faults.ttl import DEADMAN_MARGIN_S, DEFAULT_TTL_S, MAX_TTL_S
from chaoskit.models import Frozen
from chaoskit.units import canonical_rate, parse_duration, parse_rate, parse_size
from chaoskit.validation import Interface, Name, PosixUser, SizeSpec, is_name, no_control

Seconds = Annotated[float, BeforeValidator(parse_duration)]

ROLES = ("primary", "replica", "sync_standby", "any")
COUNTS = ("one", "all", "minority")
CLIENT = "client"  # as a target: the load's own link to the database, through relays on the control node
ALL_HOSTS = "all-hosts"  # as a peer: every other host of the inventory (not the controller)
# as a peer: the control node itself (the address the host sees chaoskit's SSH come from, and the
# head of a Ray cluster chaoskit runs there); the controller's SSH to the host stays exempt
CONTROL = "control"
_ROLE = re.compile(r"^role:(primary|replica|sync_standby|any)(@(one|all|minority))?$")
# the host an earlier step's fault landed on (`fault.0`): in a playbook only, known at run time
# ("partition the old primary while it rejoins": the member step 0 killed)
STEP_TARGET = re.compile(r"^fault\.([0-9]{1,3})$")
# every host carrying a tag (an inventory fact, not a live role): `tag:component=etcd@all`; the
# count is always written, since "the etcd hosts" could mean one of them or all
TAG_TARGET = re.compile(r"^tag:([A-Za-z0-9][A-Za-z0-9_.-]{0,62})=([A-Za-z0-9][A-Za-z0-9_.-]{0,127})"
                        r"@(one|all|minority)$")


def _target(value: str) -> str:
    no_control(value)
    if value == CLIENT or _ROLE.match(value) or TAG_TARGET.match(value) or STEP_TARGET.match(value) or is_name(value):
        return value
    if value.startswith("tag:"):
        raise ValueError(f"not a tag target: {value[:60]!r} (tag:KEY=VALUE@one|all|minority: a tag target "
                         "names how many of its hosts)")
    raise ValueError(f"not a target: {value[:60]!r} (a host name, role:primary|replica|sync_standby|any"
                     "[@one|all|minority], tag:KEY=VALUE@one|all|minority, fault.N (in a playbook), or client)")


def _peer(value: str) -> str:
    no_control(value)
    if value in (ALL_HOSTS, CONTROL) or _ROLE.match(value) or TAG_TARGET.match(value) or is_name(value):
        return value
    raise ValueError(f"not a peer: {value[:60]!r} (a host name, role:..., tag:KEY=VALUE@one|all|minority, "
                     "all-hosts or control)")


Target = Annotated[str, AfterValidator(_target)]
Peer = Annotated[str, AfterValidator(_peer)]
Percent = Annotated[float, Field(ge=0, le=100)]
SIGNALS = ("KILL", "TERM", "INT", "QUIT", "HUP", "ABRT", "SEGV", "STOP")


class FaultBase(Frozen):
    kind: str
    target: Target
    cluster: Name | None = None
    ttl: Seconds = DEFAULT_TTL_S
    duration: Seconds | None = None

    family: ClassVar[str] = ""
    client_target: ClassVar[bool] = False  # may target `client` (relays on the control node)

    @field_validator("ttl")
    @classmethod
    def _ttl_bounded(cls, value: float) -> float:
        if not 0 < value <= MAX_TTL_S:
            raise ValueError(f"ttl must be within (0, {MAX_TTL_S:.0f}s]: every fault heals itself in bounded time")
        return value

    @model_validator(mode="after")
    def _ttl_covers_duration(self) -> FaultBase:
        if self.duration is not None:
            if self.duration <= 0:
                raise ValueError("duration must be > 0")
            if self.ttl < self.duration + DEADMAN_MARGIN_S:
                raise ValueError(f"ttl ({self.ttl:g}s) must be at least duration + {DEADMAN_MARGIN_S:g}s "
                                 f"({self.duration + DEADMAN_MARGIN_S:g}s)")
        if self.target == CLIENT and not self.client_target:
            raise ValueError(f"target client is the load's own link: it takes latency or proxy faults, not "
                             f"{self.kind}")
        return self

    @property
    def processes_wanted(self) -> tuple[str, ...]:
        return ()

    @property
    def peers_wanted(self) -> tuple[str, ...]:
        return ()


class _Processes(FaultBase):
    family: ClassVar[str] = "process"
    processes: tuple[Name, ...] = ()  # names from the member's `processes`; empty: see each kind

    @property
    def processes_wanted(self) -> tuple[str, ...]:
        return self.processes


class KillSpec(_Processes):
    """Signal the named processes (SIGKILL by default): the first one listed, if none are named."""

    kind: Literal["kill"] = "kill"
    signal: str = "KILL"

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str) -> str:
        name = value.upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ValueError(f"unsupported signal {value[:20]!r} (one of {', '.join(SIGNALS)})")
        return name


class CrashSpec(_Processes):
    """A node crash, as a power loss: every process of the member (the named ones, all of them if
    none are named, and every descendant: backends, walsenders, the manager's agent) frozen then
    SIGKILLed at one instant, so none can acknowledge anything after the first one dies."""

    kind: Literal["crash"] = "crash"


class PauseSpec(_Processes):
    """SIGSTOP the named processes and then every descendant; SIGCONT on revert."""

    kind: Literal["pause"] = "pause"


class StopSpec(_Processes):
    """A graceful stop (the member's service where the host has systemd, else the configured stop
    command or SIGTERM); started again on revert."""

    kind: Literal["stop"] = "stop"


class _Peers(FaultBase):
    family: ClassVar[str] = "network"
    # whether `control` may be a peer: the kinds whose rules the host builds by address, there
    control_peer: ClassVar[bool] = False
    peers: tuple[Peer, ...] = ()  # host names or role:... (resolved); empty = all traffic

    @model_validator(mode="after")
    def _control(self) -> _Peers:
        if CONTROL in self.peers and not self.control_peer:
            raise ValueError(f"peer control (the control node) is for partition and loss, not {self.kind}")
        return self

    @property
    def peers_wanted(self) -> tuple[str, ...]:
        return self.peers


class PartitionSpec(_Peers):
    control_peer: ClassVar[bool] = True
    kind: Literal["partition"] = "partition"
    direction: Literal["both", "in", "out"] = "both"
    action: Literal["drop", "reject"] = "drop"


class LossSpec(_Peers):
    control_peer: ClassVar[bool] = True
    kind: Literal["loss"] = "loss"
    direction: Literal["both", "in", "out"] = "both"
    loss_pct: float = Field(gt=0, le=100)


class BandwidthSpec(FaultBase):
    family: ClassVar[str] = "network"
    kind: Literal["bandwidth"] = "bandwidth"
    interface: Interface = "eth0"
    rate: str

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str) -> str:
        return canonical_rate(value)


class NetemSpec(_Peers):
    kind: Literal["netem"] = "netem"
    interface: Interface = "eth0"
    delay_ms: float = Field(0.0, ge=0, le=60_000)
    jitter_ms: float = Field(0.0, ge=0, le=60_000)
    loss_pct: Percent = 0.0
    corrupt_pct: Percent = 0.0
    duplicate_pct: Percent = 0.0

    @model_validator(mode="after")
    def _something(self) -> NetemSpec:
        if not (self.delay_ms or self.loss_pct or self.corrupt_pct or self.duplicate_pct):
            raise ValueError("netem needs delay_ms, loss_pct, corrupt_pct or duplicate_pct")
        return self


class _Relay(_Peers):
    """A TCP relay with toxics on the link from the target host to `peers` on `peer_port`
    (or, with target client, on the load's own link). `stream` picks the direction delay and
    rate apply to (upstream = target host -> peer, downstream = peer -> target host)."""

    family: ClassVar[str] = "relay"
    client_target: ClassVar[bool] = True
    peer_port: int | None = Field(None, ge=1, le=65535)
    proxy_user: PosixUser = "nobody"
    stream: Literal["both", "upstream", "downstream"] = "both"
    delay_ms: float = Field(0.0, ge=0, le=60_000)
    jitter_ms: float = Field(0.0, ge=0, le=60_000)

    @model_validator(mode="after")
    def _link(self) -> _Relay:
        if self.target != CLIENT and not (self.peers and self.peer_port):
            raise ValueError(f"{self.kind} needs peers and peer_port (or target: client)")
        return self


class LatencySpec(_Relay):
    kind: Literal["latency"] = "latency"

    @model_validator(mode="after")
    def _delay(self) -> LatencySpec:
        if not self.delay_ms:
            raise ValueError("latency needs delay_ms > 0")
        return self


class ProxySpec(_Relay):
    kind: Literal["proxy"] = "proxy"
    rate: str | None = None
    reset_after_ms: float | None = Field(None, ge=0, le=86_400_000)
    down: bool = False

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        return None if value is None else canonical_rate(value)

    @model_validator(mode="after")
    def _toxic(self) -> ProxySpec:
        if not (self.delay_ms or self.rate or self.reset_after_ms is not None or self.down):
            raise ValueError("proxy needs a toxic: delay_ms, rate, reset_after_ms or down")
        return self


class StressSpec(FaultBase):
    family: ClassVar[str] = "stress"
    kind: Literal["stress"] = "stress"
    cpu_workers: int = Field(0, ge=0, le=1024)
    io_workers: int = Field(0, ge=0, le=1024)
    vm_workers: int = Field(0, ge=0, le=1024)
    vm_bytes: SizeSpec = "256M"

    @model_validator(mode="after")
    def _some(self) -> StressSpec:
        if not (self.cpu_workers or self.io_workers or self.vm_workers):
            raise ValueError("stress needs cpu_workers, io_workers or vm_workers")
        return self


class ReplicaStopSpec(FaultBase):
    """A MySQL/MariaDB replica's replication threads stopped (the SQL thread by default: events
    still arrive, nothing is applied, so the replica lags), started again at the revert. Run on
    the host through the server's socket as root (members[].db_socket)."""

    family: ClassVar[str] = "replication"
    kind: Literal["replica_stop"] = "replica_stop"
    thread: Literal["sql", "io", "all"] = "sql"


class _MemberDisk(FaultBase):
    """A fault on the filesystem that holds a member's data: its WAL directory when the member
    declares one (members[].wal_dir), else its data directory (members[].data_dir)."""

    family: ClassVar[str] = "disk"
    on: Literal["wal", "data"] = "wal"  # wal: the WAL directory if the member declares one, else data


class DataDirLostSpec(_MemberDisk):
    """The member's data directory lost, as a failed volume or an `rm -rf` by mistake leaves it:
    every process of the member (the named ones, all of them if none are named, and every
    descendant) frozen and SIGKILLed at one instant, as `crash`, then the directory moved aside
    on its own filesystem (`<data_dir>.chaoskit-lost-<fault id>`: nothing is deleted). The revert
    moves it back (a directory made in its place meanwhile is kept beside it, `.chaoskit-new-<id>`)
    and starts again what was running. On a backup repository host, the repository's directory
    (no process). Refused where the directory is a mount point (it cannot be moved)."""

    kind: Literal["data_dir_lost"] = "data_dir_lost"
    on: Literal["wal", "data"] = "data"
    processes: tuple[Name, ...] = ()

    @property
    def processes_wanted(self) -> tuple[str, ...]:
        return self.processes


def _free(value: str | int) -> str:
    text = str(value).strip()
    if text.endswith("%"):
        pct = text[:-1]
        if not pct.isascii() or not pct.isdigit() or not 0 <= int(pct) < 100:
            raise ValueError(f"not a free-space level: {text[:20]!r} (a size such as 0 or 64M, or a percentage 0%-99%)")
        return f"{int(pct)}%"
    return str(parse_size(text))


class DiskFullSpec(_MemberDisk):
    """The member's filesystem filled until `free` is left (bytes, `64M`, or `5%` of its size) by
    one ballast file at the filesystem's top, recorded in the journal and deleted at the revert (by
    the dead-man if the controller is gone). Refused on the host's root filesystem unless
    `allow_root_filesystem` says so: a full / stops more than the database."""

    kind: Literal["disk_full"] = "disk_full"
    free: Annotated[str, BeforeValidator(_free)] = "0"
    allow_root_filesystem: bool = False

    @property
    def free_bytes(self) -> int | None:
        return None if self.free.endswith("%") else int(self.free)


class DiskSlowSpec(_MemberDisk):
    """The member's processes (all of them and every descendant, or the named ones) throttled on
    the block device under its data: read/write bytes per second (`read_rate: 1mbps`) and/or
    operations per second, through the cgroup blkio controller; moved back where they were on
    revert. Refused where that filesystem has no block device (tmpfs) or the host has no blkio."""

    kind: Literal["disk_slow"] = "disk_slow"
    processes: tuple[Name, ...] = ()
    read_rate: str | None = None
    write_rate: str | None = None
    read_iops: int | None = Field(None, ge=1, le=10_000_000)
    write_iops: int | None = Field(None, ge=1, le=10_000_000)

    @field_validator("read_rate", "write_rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        return None if value is None else canonical_rate(value)

    @model_validator(mode="after")
    def _some(self) -> DiskSlowSpec:
        if not (self.read_rate or self.write_rate or self.read_iops or self.write_iops):
            raise ValueError("disk_slow needs read_rate, write_rate, read_iops or write_iops")
        return self

    @property
    def processes_wanted(self) -> tuple[str, ...]:
        return self.processes


SPEC_TYPES: tuple[type[FaultBase], ...] = (KillSpec, CrashSpec, PauseSpec, StopSpec, PartitionSpec, LossSpec,
                                          BandwidthSpec, NetemSpec, LatencySpec, ProxySpec, StressSpec,
                                          ReplicaStopSpec, DiskFullSpec, DiskSlowSpec, DataDirLostSpec)
KINDS: dict[str, type[FaultBase]] = {t.model_fields["kind"].default: t for t in SPEC_TYPES}
# any kind, picked by its `kind` (the union of SPEC_TYPES: a new kind is listed there once)
FaultSpec = Annotated[Union[SPEC_TYPES], Field(discriminator="kind")]  # type: ignore[valid-type]  # noqa: UP007
_ADAPTER: TypeAdapter[Any] = TypeAdapter(FaultSpec)


def parse_fault(data: dict[str, Any]) -> FaultBase:
    """A fault spec from plain data (its `kind` picks the model); raises pydantic's ValidationError."""
    return _ADAPTER.validate_python(data)


def proxy_toxic_args(spec: LatencySpec | ProxySpec) -> list[str]:
    """The relay's command-line toxics (host-side fault and control-node link alike). Only numbers
    and flags: every token matches [A-Za-z0-9.-]."""
    up = spec.stream in ("both", "upstream")
    down = spec.stream in ("both", "downstream")
    args = ["--delay-up-ms", f"{spec.delay_ms if up else 0:g}", "--delay-down-ms", f"{spec.delay_ms if down else 0:g}"]
    if spec.jitter_ms:
        args += ["--jitter-ms", f"{spec.jitter_ms:g}"]
    if isinstance(spec, ProxySpec):
        if spec.rate:
            bps = parse_rate(spec.rate)
            args += ["--rate-up-bps", f"{bps if up else 0:g}", "--rate-down-bps", f"{bps if down else 0:g}"]
        if spec.reset_after_ms is not None:
            args += ["--reset-after-ms", f"{spec.reset_after_ms:g}"]
        if spec.down:
            args.append("--down")
    return args
