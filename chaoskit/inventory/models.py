"""Inventory models. Secrets are references (env var or file), never inline values."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, StringConstraints, field_validator, model_validator

from chaoskit.inventory import tags as tag_rules
from chaoskit.inventory.haconfig import HaConfig, validate_config
from chaoskit.models import Frozen
from chaoskit.secrets import Secret, SecretRef
from chaoskit.validation import (
    Command,
    Endpoint,
    HostAddress,
    JumpSpec,
    Name,
    NoControl,
    PosixUser,
    SafePath,
    ServiceName,
    SqlName,
    Tag,
    ip_address,
    ip_network,
    no_control,
    secret_like,
)

Engine = Literal["postgres", "mysql", "dameng"]
# the old single `kind:` -> what to write instead
_OLD_KINDS = {
    "postgres-patroni": "engine: postgres + ha: {kind: patroni}",
    "postgres": "engine: postgres (+ ha: {kind: none}, the default)",
    "mariadb-replication": "engine: mysql (+ ha: {kind: none}, or {kind: mha})",
    "mysql": "engine: mysql",
    "dameng": "engine: dameng (+ ha: {kind: dm})",
}


def _tags(value: object) -> object:
    """Tags compare case-insensitively (`env: Production` is production): stored lower-case;
    keys that differ only in case are refused (the loader merges levels, `inventory.tags`)."""
    if isinstance(value, dict):
        return tag_rules.fold(value, ("tags",))
    return value


class ProcessRef(Frozen):
    """How to find one process of a member on its host and control it: its pid file's first line,
    or, for a service installed as a systemd unit without one (DM's `DmService<instance>`,
    registered by dm_service_installer.sh), the unit's main pid. `comm` / `exe`, when given, are
    checked against the process found before it is signalled (a stale pid file can name an
    unrelated process; a unit's main pid can be its start script); with a unit, `comm` is required.
    `start` / `stop` are shell commands run as root on the host: code by design, so an inventory
    is trusted like a script."""

    pid_file: SafePath | None = None
    unit: ServiceName | None = None
    comm: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:+@][A-Za-z0-9_.:+@-]{0,14}$")] | None = None
    exe: SafePath | None = None
    start: Command | None = None
    stop: Command | None = None

    @model_validator(mode="after")
    def _found_one_way(self) -> ProcessRef:
        if (self.pid_file is None) == (self.unit is None):
            raise ValueError("give pid_file or unit (a systemd unit whose main pid it is), one of them")
        if self.unit is not None and self.comm is None:
            raise ValueError("a process found by its unit needs comm (the unit's main pid may be its start script)")
        return self


# a cgroup below each v1 controller's root: words of letters, digits, `_.-` joined by `/`, none
# starting with a dot (so never `..`)
_CGROUP_WORD = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"
CgroupPath = Annotated[str, StringConstraints(pattern=rf"^{_CGROUP_WORD}(/{_CGROUP_WORD}){{0,7}}$")]


class HostMetrics(Frozen):
    """Where the host metrics sampler (`chaoskit.hostmetrics`) reads this host's figures each
    second during a run: `proc` (the machine's /proc: CPU, load, memory, disks, network), a
    `cgroup` of its own (hosts that share a kernel, as the lab's do: CPU from cpuacct and block I/O
    from blkio under that cgroup, network from the host's namespace; load and memory are then not
    the host's and stay null), or `none` (not read; not `off`, which YAML reads as false)."""

    source: Literal["proc", "cgroup", "none"] = "proc"
    cgroup: CgroupPath | None = None

    @model_validator(mode="after")
    def _cgroup_named(self) -> HostMetrics:
        if (self.source == "cgroup") != (self.cgroup is not None):
            raise ValueError("cgroup: give it with source: cgroup, and only then")
        return self


class Host(Frozen):
    """A machine reached over SSH, and how to become root on it."""

    name: Name
    address: HostAddress
    port: int = Field(22, ge=1, le=65535)
    user: PosixUser = "root"
    key_file: NoControl | None = None
    known_hosts: NoControl | None = None
    strict_host_keys: bool = True
    jump: JumpSpec | None = None  # another host's name, or user@address:port
    become: bool = False
    become_method: Literal["sudo"] = "sudo"
    become_user: PosixUser = "root"
    connect_timeout: float = Field(5.0, gt=0, le=300)
    tags: dict[Tag, Tag] = Field(default_factory=dict)
    # services of the host that belong to no cluster member (etcd, HAProxy, PgBouncer, an HA
    # monitor or manager): process faults take them by name, found by pid file like a member's
    processes: dict[Name, ProcessRef] = Field(default_factory=dict)
    # label -> log file of those services, kept for each run's window like a member's logs
    logs: dict[Name, SafePath] = Field(default_factory=dict)
    metrics: HostMetrics = Field(default_factory=HostMetrics)

    _lower_tags = field_validator("tags", mode="before")(classmethod(lambda cls, v: _tags(v)))

    @property
    def is_production(self) -> bool:
        return tag_rules.is_production(self.tags)


class Member(Frozen):
    """One database node of a cluster: which host, which port, where its data and pids are."""

    host: Name
    db_port: int | None = Field(None, ge=1, le=65535)
    db_address: HostAddress | None = None  # defaults to the host's address
    data_dir: SafePath | None = None
    wal_dir: SafePath | None = None  # where the WAL lives when not under data_dir (a disk_full fills its filesystem)
    db_socket: SafePath | None = None  # the server's unix socket (replication faults act through it as root)
    processes: dict[Name, ProcessRef] = Field(default_factory=dict)
    service: ServiceName | None = None
    # label -> log file on the host (the database's, the HA agent's): the run's window of each is
    # kept with the evidence under logs/<host>/<label>.log
    logs: dict[Name, SafePath] = Field(default_factory=dict)


class DmServiceSettings(Frozen):
    """How DM clients reach the writer through a service name (DM's `dm_svc.conf`): chaoskit
    writes that file for its own clients from these settings and gives dmPython its path
    (`dmsvc_path`), so the route's failover behaviour is the one recorded with the run. Names
    and ranges as DM8's manual gives them: LOGIN_MODE 0 primary first, then normal, then standby;
    1 primary only; 2 standby only; 3 standby first; 4 normal first (DM8's default). SWITCH_TIMES:
    how many passes over the list before giving up (DM7 calls it SWITCH_TIME); SWITCH_INTERVAL:
    ms between passes. EP_SELECTOR and AUTO_RECONNECT (DM8 builds from 2021 on) are written only
    when given, with the values the manual defines."""

    endpoints: tuple[Endpoint, ...] = ()  # default: the members, address:port, in order
    login_mode: int = Field(1, ge=0, le=4)
    switch_times: int = Field(3, ge=1, le=1000)
    switch_interval_ms: int = Field(200, ge=0, le=600_000)
    ep_selector: int | None = Field(None, ge=0, le=1)
    auto_reconnect: int | None = Field(None, ge=0, le=2)


READ_ROUTE_ENGINES = ("postgres", "mysql", "dameng")
DM_WRITER_LOGIN_MODES = (0, 1)  # dm_svc LOGIN_MODE: primary first, primary only (DmServiceSettings)


Stanza = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]


class BackupRepository(Frozen):
    """Where backups are taken and kept: the host the backup tool runs on for a backup (pgBackRest's
    repository host), and the tool's configuration file there (default: the tool's own)."""

    host: Name
    config: SafePath | None = None
    os_user: PosixUser = "postgres"  # who owns the repository and runs the tool there
    # the repository's directory there (pgBackRest's repo1-path): a disk fault on the repository
    # host acts on its filesystem (a full repository)
    path: SafePath | None = None


class RestoreTarget(Frozen):
    """A host to restore on: never a member of a cluster (a restore overwrites `data_dir`). The
    restored server is started by the host's process `process` (its `start` command) and reached at
    the host's address and `port`, with the cluster's database, user and password; `log` is where
    it writes its log (the restore's phases are read there, with its line stamps)."""

    host: Name
    data_dir: SafePath
    port: int = Field(5432, ge=1, le=65535)
    config: SafePath | None = None
    log: SafePath | None = None
    os_user: PosixUser = "postgres"  # who runs the restore and owns the data directory
    process: Name = "postgres"


class BackupConfig(Frozen):
    """How the cluster is backed up and where it can be restored (`backup` and `restore` actions)."""

    tool: Name
    stanza: Stanza | None = None  # pgBackRest's stanza
    repository: BackupRepository
    restore_to: RestoreTarget | None = None


class Cluster(Frozen):
    """Database nodes under test, how their roles are found and how clients reach the writer."""

    name: Name
    engine: Engine
    ha: SerializeAsAny[HaConfig] = Field(default_factory=lambda: _default_ha())
    members: tuple[Member, ...] = ()
    # a managed service (RDS, PolarDB, Cloud SQL): no host to SSH into, no members; clients reach
    # it by its endpoints / dsn, and only what runs on the control node touches it (load, the
    # client link's relays, SQL)
    managed: bool = False
    port: int = Field(5432, ge=1, le=65535)
    database: SqlName = "postgres"
    user: SqlName
    password: Secret | None = None
    dsn: NoControl | None = None  # libpq DSN, may be multi-host with target_session_attrs
    endpoints: tuple[Endpoint, ...] = ()  # host:port list for MySQL-protocol writers, in order
    # a read route to the same members: clients connect where it sends them (a replica endpoint,
    # a proxy's read port, a libpq DSN with target_session_attrs=prefer-standby) and only read
    # through it; no writer is searched (chaoskit.db.base.Driver.connect_client)
    read_route: bool = False
    options: dict[Name, str | int | float | bool] = Field(default_factory=dict)  # passed to the driver
    # DM: the service name in `dsn` resolved by a dm_svc.conf chaoskit writes from these settings
    dm_svc: DmServiceSettings | None = None
    backup: BackupConfig | None = None
    tags: dict[Tag, Tag] = Field(default_factory=dict)

    _lower_tags = field_validator("tags", mode="before")(classmethod(lambda cls, v: _tags(v)))

    @field_validator("options")
    @classmethod
    def _options_without_secrets(cls, value: dict[str, object]) -> dict[str, object]:
        for key, v in value.items():
            if secret_like(key):
                raise ValueError(f"option {key!r} looks like a secret; secrets go in password: {{env: NAME}} or "
                                 "{file: PATH} only")
            if isinstance(v, str):
                no_control(v)
        return value

    @property
    def is_production(self) -> bool:
        return tag_rules.is_production(self.tags)

    @field_validator("members", mode="before")
    @classmethod
    def _member_shorthand(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"host": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="before")
    @classmethod
    def _old_shape(cls, data: object) -> object:
        if isinstance(data, dict) and "kind" in data and "engine" not in data:
            hint = _OLD_KINDS.get(str(data["kind"]), "engine: postgres|mysql|dameng and ha: {kind: ...}")
            raise ValueError(f"kind: {str(data['kind'])[:40]} is no longer a cluster field; write {hint}")
        if isinstance(data, dict) and ("role_probe" in data or "patroni" in data):
            raise ValueError("role_probe / patroni: moved into ha: {kind: patroni, api: {port: 8008}, "
                             "dcs: {endpoints: [...]}}")
        return data

    @field_validator("ha", mode="before")
    @classmethod
    def _manager_config(cls, value: object) -> object:
        return validate_config(value)

    @model_validator(mode="after")
    def _manager_fits_engine(self) -> Cluster:
        if self.engine not in self.ha.engines:
            raise ValueError(f"ha: {self.ha.kind} manages {'/'.join(sorted(self.ha.engines))}, not {self.engine}")
        error = self.ha.members_error([m.host for m in self.members])
        if error:
            raise ValueError(f"ha.{error}")
        return self

    @model_validator(mode="after")
    def _dsn_without_password(self) -> Cluster:
        if self.dsn is None:
            return self
        if self.engine == "postgres":
            try:
                from psycopg.conninfo import conninfo_to_dict

                keys = set(conninfo_to_dict(self.dsn))
            except Exception as exc:  # psycopg's ProgrammingError for a malformed DSN
                raise ValueError(f"dsn: not a valid libpq DSN: {str(exc).splitlines()[0][:100]}") from None
        else:
            keys = {m.lower() for m in re.findall(r"([A-Za-z_]+)\s*=", self.dsn)}
            # a URI's user:password@host (mysql://, dm://, ...)
            if re.search(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@?#]*:[^/@?#]*@", self.dsn):
                keys.add("password")
        if any(secret_like(k) or k == "passfile" for k in keys):
            raise ValueError("dsn: a password inside the DSN is an inline secret; use password: {env: NAME} or "
                             "{file: PATH}")
        return self

    @model_validator(mode="after")
    def _read_route_reads(self) -> Cluster:
        if not self.read_route:
            return self
        if self.engine not in READ_ROUTE_ENGINES:
            raise ValueError(f"read_route: read routes are built for {', '.join(READ_ROUTE_ENGINES)} clusters, "
                             f"not {self.engine}")
        if self.engine == "dameng" and self.dm_svc is not None and self.dm_svc.login_mode in DM_WRITER_LOGIN_MODES:
            raise ValueError(f"read_route: its dm_svc login_mode {self.dm_svc.login_mode} sends clients to the "
                             "primary; a read route says 2 (standby only) or 3 (standby first)")
        if self.engine == "postgres" and self.dsn is not None:
            from psycopg.conninfo import conninfo_to_dict

            attrs = str(conninfo_to_dict(self.dsn).get("target_session_attrs") or "any")
            if attrs in ("read-write", "primary"):
                raise ValueError(f"read_route: its dsn asks for target_session_attrs={attrs}, the writer; a read "
                                 "route says prefer-standby, standby, read-only or any")
        return self

    @model_validator(mode="after")
    def _dm_service(self) -> Cluster:
        if self.dm_svc is None:
            return self
        if self.engine != "dameng":
            raise ValueError("dm_svc: a DM service name's settings, for engine: dameng only")
        if self.dsn is None or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", self.dsn):
            raise ValueError("dm_svc: needs dsn: the service name (letters, digits, _), e.g. DM_TPCC")
        if "dmsvc_path" in self.options:
            raise ValueError("dm_svc: chaoskit writes the dm_svc.conf; drop options.dmsvc_path (or dm_svc)")
        return self

    @model_validator(mode="after")
    def _has_members(self) -> Cluster:
        if self.managed:
            if self.members:
                raise ValueError("a managed cluster has no members (no host to SSH into): give its endpoints "
                                 "(MySQL) or dsn (PostgreSQL) only")
            if not (self.endpoints or self.dsn):
                raise ValueError("a managed cluster is reached by its endpoints (MySQL) or dsn (PostgreSQL): "
                                 "give one")
            if self.ha.kind != "none":
                raise ValueError(f"a managed cluster fails over by itself (the service's): ha: none, not "
                                 f"{self.ha.kind}")
        elif not self.members:
            raise ValueError("a cluster needs at least one member (or managed: true for a service with no host)")
        return self


def _default_ha() -> HaConfig:
    return validate_config({"kind": "none"})


class LabMarker(Frozen):
    """This inventory describes chaoskit's local lab: commands refuse to use it while the lab's
    bridge does not hold this subnet (its addresses would leave through the default route)."""

    subnet: str = Field(pattern=r"^[0-9.]+/[0-9]{1,2}$")
    bridge: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")

    @field_validator("subnet")
    @classmethod
    def _is_a_network(cls, value: str) -> str:
        net = ip_network(value)
        if net.version != 4:
            raise ValueError("the lab subnet is an IPv4 network")
        return value


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or "/../" in value + "/":
        raise ValueError("an absolute path without '..'")
    return value


class RayPlane(Frozen):
    """The Ray cluster that places and starts the load agents (`chaoskit.workload.ray_plane`):
    either one chaoskit starts (`head`: the control node's address the loader hosts reach; `port`
    and the next 110 ports fixed; `dir` its own temporary directory on every node, short because
    Ray's socket paths are limited) or one the user already runs (`address`: host:port of its
    head). Token authentication is always on: `token_file` on the control node holds the token;
    `loaders up` copies it to each loader host."""

    head: str | None = None
    address: str | None = None
    port: int = Field(6380, ge=1024, le=65000)
    token_file: SafePath
    dir: SafePath = "/tmp/chaoskit-ray"

    @field_validator("head")
    @classmethod
    def _head(cls, value: str | None) -> str | None:
        if value is not None and ip_address(value).version != 4:
            raise ValueError("the head's IPv4 address")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("host:port of a running Ray cluster's head")
        ip_address(host)
        return value

    @field_validator("token_file", "dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return _absolute_path(value)

    @field_validator("dir")
    @classmethod
    def _short(cls, value: str) -> str:
        if len(value) > 40:  # Ray's socket paths under it must stay below 108 characters
            raise ValueError("at most 40 characters (Ray's socket paths under it are limited)")
        return value

    @model_validator(mode="after")
    def _one_form(self) -> RayPlane:
        if (self.head is None) == (self.address is None):
            raise ValueError("either head: (a Ray cluster chaoskit starts) or address: (one you run), not both")
        return self

    @property
    def gcs(self) -> str:
        """host:port of the head's GCS, where drivers and nodes connect."""
        return self.address or f"{self.head}:{self.port}"

    @property
    def managed(self) -> bool:
        """chaoskit starts and stops it (`loaders up` / `loaders down`)."""
        return self.head is not None


class Loaders(Frozen):
    """Hosts that run load agents (`chaoskit.workload.ssh_loader`): each is an inventory host (its
    tags, e.g. `az: b`, are what a client group's `where:` matches), with chaoskit installed for
    `python` (the same version as the controller's); each agent spools under `spool`. With `ray:`,
    agents are placed, started and read through Ray actors (`chaoskit.workload.ray_loader`), over
    SSH when a node is lost; without it, over SSH only."""

    hosts: tuple[Name, ...] = Field(min_length=1)
    python: SafePath = "/usr/bin/python3"
    spool: SafePath = "/var/lib/chaoskit/loader"
    ray: RayPlane | None = None
    # custom Ray resources of a loader host's node, for `where: {resources: ...}` (nodes chaoskit
    # starts; on a Ray cluster you run, its nodes' own)
    resources: dict[Name, dict[Name, Annotated[float, Field(gt=0, le=1e9)]]] = Field(default_factory=dict)

    @field_validator("python", "spool")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return _absolute_path(value)

    @field_validator("hosts")
    @classmethod
    def _once(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        doubled = sorted({h for h in value if value.count(h) > 1})
        if doubled:
            raise ValueError(f"host {doubled[0]} listed twice")
        return value

    @model_validator(mode="after")
    def _resources_of_loaders(self) -> Loaders:
        other = sorted(set(self.resources) - set(self.hosts))
        if other:
            raise ValueError(f"resources: {other[0]} is not one of the loader hosts ({', '.join(self.hosts)})")
        if self.resources and (self.ray is None or not self.ray.managed):
            raise ValueError("resources: are given to the Ray nodes chaoskit starts (ray: {head: ...}); a Ray "
                             "cluster you run has its nodes' own")
        return self


class Inventory(Frozen):
    """Hosts and clusters, checked for cross references."""

    source: str = "<memory>"
    sha256: str = ""  # of the bytes it was loaded from
    lab: LabMarker | None = None
    hosts: dict[Name, Host]
    clusters: dict[Name, Cluster] = Field(default_factory=dict)
    loaders: Loaders | None = None

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise KeyError(f"unknown host {name!r}; inventory has: {', '.join(sorted(self.hosts))}") from None

    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters)) or "none"
            raise KeyError(f"unknown cluster {name!r}; inventory has: {known}") from None

    def processes_on(self, host: str) -> dict[str, ProcessRef]:
        """Every process declared on a host: its own services and those of the cluster members
        it carries (a name is declared once per host: the loader refuses a second)."""
        out = dict(self.hosts[host].processes)
        for cluster in self.clusters.values():
            for member in cluster.members:
                if member.host == host:
                    out.update(member.processes)
        return out

    def repository_dir(self, host: str) -> str | None:
        """The backup repository directory a cluster's `backup.repository` declares on this host."""
        return next((c.backup.repository.path for c in self.clusters.values() if c.backup is not None
                     and c.backup.repository.host == host and c.backup.repository.path is not None), None)

    def hosts_tagged(self, key: str, value: str) -> list[str]:
        """Hosts whose tag `key` is `value`, in inventory order."""
        return [n for n, h in self.hosts.items() if h.tags.get(key.lower()) == value.lower()]

    def member_address(self, member: Member) -> str:
        return member.db_address or self.hosts[member.host].address

    def evidence(self) -> dict[str, Any]:
        """The inventory as the evidence keeps it: built field by field from an allow-list, never
        by dumping the model, so a field added later (or a value that slipped past a type) does
        not reach run.json. Secrets appear as their references, commands only as "given"."""
        lab = None if self.lab is None else {"subnet": self.lab.subnet, "bridge": self.lab.bridge}
        out: dict[str, Any] = {"hosts": {n: _host_evidence(h) for n, h in self.hosts.items()},
                               "clusters": {n: _cluster_evidence(c) for n, c in self.clusters.items()}, "lab": lab}
        if self.loaders is not None:
            out["loaders"] = {"hosts": list(self.loaders.hosts), "python": self.loaders.python,
                              "spool": self.loaders.spool}
            plane = self.loaders.ray
            if plane is not None:
                out["loaders"]["ray"] = {"gcs": plane.gcs, "managed": plane.managed, "dir": plane.dir,
                                         "token_file": plane.token_file}
        return out


_HOST_FIELDS = ("name", "address", "port", "user", "jump", "become", "become_user", "strict_host_keys")
_MEMBER_FIELDS = ("host", "db_port", "db_address", "data_dir", "wal_dir", "db_socket", "service")
_CLUSTER_FIELDS = ("name", "engine", "managed", "port", "database", "user", "dsn", "endpoints")


def _dm_svc_evidence(cluster: Cluster) -> dict[str, Any] | None:
    return None if cluster.dm_svc is None else cluster.dm_svc.model_dump(mode="json")


def _processes_evidence(processes: dict[str, ProcessRef]) -> dict[str, Any]:
    return {n: {"pid_file": p.pid_file, "unit": p.unit, "comm": p.comm, "exe": p.exe,
                "start": "given" if p.start else None, "stop": "given" if p.stop else None}
            for n, p in processes.items()}


def _host_evidence(host: Host) -> dict[str, Any]:
    return {**{f: getattr(host, f) for f in _HOST_FIELDS}, "tags": dict(host.tags),
            "processes": _processes_evidence(host.processes), "logs": dict(host.logs),
            "metrics": host.metrics.model_dump(mode="json")}


def _member_evidence(member: Member) -> dict[str, Any]:
    return {**{f: getattr(member, f) for f in _MEMBER_FIELDS}, "processes": _processes_evidence(member.processes),
            "logs": dict(member.logs)}


def _manager_evidence(ha: Frozen) -> dict[str, Any]:
    """A manager's settings: each declared field, a secret as its reference, a command as "given"
    (start/stop commands are code run as root and may carry the user's own environment)."""
    out: dict[str, Any] = {}
    for name in type(ha).model_fields:
        value = getattr(ha, name)
        if isinstance(value, SecretRef):
            out[name] = value.describe()
        elif secret_like(name) or name in ("start", "stop"):
            out[name] = None if value is None else "given"
        elif isinstance(value, Frozen):  # a section of the manager's settings (Patroni's api, dcs)
            out[name] = _manager_evidence(value)
        else:
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _cluster_evidence(cluster: Cluster) -> dict[str, Any]:
    return {**{f: _plain(getattr(cluster, f)) for f in _CLUSTER_FIELDS},
            "password": cluster.password.describe() if cluster.password else None,
            "ha": _manager_evidence(cluster.ha), "dm_svc": _dm_svc_evidence(cluster),
            "members": [_member_evidence(m) for m in cluster.members],
            "backup": None if cluster.backup is None else cluster.backup.model_dump(mode="json"),
            "options": dict(cluster.options), "tags": dict(cluster.tags)}
