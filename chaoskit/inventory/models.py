"""Inventory models. Secrets are references (env var or file), never inline values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from chaoskit.models import Frozen

ClusterKind = Literal["postgres-patroni", "postgres", "mariadb-replication", "mysql", "dameng"]
RoleProbe = Literal["sql", "patroni"]


class SecretRef(Frozen):
    """Where a secret lives: an environment variable or a file (first line, stripped)."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self

    def resolve(self) -> str:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise LookupError(f"environment variable {self.env} is not set")
            return value
        assert self.file is not None
        try:
            return Path(self.file).read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise LookupError(f"cannot read secret file {self.file}: {exc}") from None

    def describe(self) -> str:
        return f"env:{self.env}" if self.env else f"file:{self.file}"


def _no_inline_secret(value: object) -> object:
    if isinstance(value, str):
        raise ValueError("inline secrets are not allowed; use {env: NAME} or {file: PATH}")
    return value


class Host(Frozen):
    """A machine reached over SSH, and how to become root on it."""

    name: str
    address: str
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: str | None = None
    known_hosts: str | None = None
    strict_host_keys: bool = True
    jump: str | None = None  # another host's name, or user@address:port
    become: bool = False
    become_method: Literal["sudo"] = "sudo"
    become_user: str = "root"
    connect_timeout: float = Field(5.0, gt=0)
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_strings(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        return value

    @property
    def is_production(self) -> bool:
        return self.tags.get("env", "").lower() in {"prod", "production"}


class ProcessRef(Frozen):
    """How to find one process of a member on its host (pid file first line) and control it."""

    pid_file: str
    start: str | None = None
    stop: str | None = None


class Member(Frozen):
    """One database node of a cluster: which host, which port, where its data and pids are."""

    host: str
    db_port: int | None = Field(None, ge=1, le=65535)
    db_address: str | None = None  # defaults to the host's address
    data_dir: str | None = None
    processes: dict[str, ProcessRef] = Field(default_factory=dict)
    service: str | None = None


class PatroniApi(Frozen):
    port: int = Field(8008, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    verify: bool | str = True


class Cluster(Frozen):
    """Database nodes under test, how their roles are found and how clients reach the writer."""

    name: str
    kind: ClusterKind
    members: tuple[Member, ...]
    port: int = Field(5432, ge=1, le=65535)
    database: str = "postgres"
    user: str
    password: SecretRef | None = None
    dsn: str | None = None  # libpq DSN, may be multi-host with target_session_attrs
    endpoints: tuple[str, ...] = ()  # host:port list for MySQL-protocol writers, in order
    role_probe: RoleProbe = "sql"
    patroni: PatroniApi | None = None
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)  # passed to the driver
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("password", mode="before")
    @classmethod
    def _password_by_reference(cls, value: object) -> object:
        return _no_inline_secret(value)

    @field_validator("members", mode="before")
    @classmethod
    def _member_shorthand(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"host": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _probe_needs_api(self) -> Cluster:
        if not self.members:
            raise ValueError("a cluster needs at least one member")
        if self.role_probe == "patroni" and self.patroni is None:
            object.__setattr__(self, "patroni", PatroniApi())
        return self


class Inventory(Frozen):
    """Hosts and clusters, checked for cross references."""

    source: str = "<memory>"
    hosts: dict[str, Host]
    clusters: dict[str, Cluster] = Field(default_factory=dict)

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

    def member_address(self, member: Member) -> str:
        return member.db_address or self.hosts[member.host].address
