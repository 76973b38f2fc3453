"""What the lab is: names, addresses, ports and paths. The one source for `lab up` and lab.yaml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chaoskit.inventory.reach import LAB_NETNS_PREFIX

STATE_DIR = Path("/var/lib/chaoskit-lab")
BRIDGE = "ckbr0"
SUBNET_PREFIX = "10.77.0"
BRIDGE_ADDRESS = f"{SUBNET_PREFIX}.1"
NETNS_PREFIX = LAB_NETNS_PREFIX
SSH_USER = "ckops"  # the unprivileged login that escalates with sudo
PG_SCOPE = "chaoskit-lab"
PG_PORT = 5432
PATRONI_PORT = 8008
ETCD_PORT = 2379
MARIADB_PORT = 3306
MARIADB_DATABASE = "chaoskit"
MARIADB_USER = "chaoskit"
# Lab hosts share one kernel, so /proc is the same on all of them: each host's daemons (and what
# its sshd starts) run in a cgroup of their own under these v1 controllers, which the host metrics
# sampler reads instead (`metrics: {source: cgroup}` in lab.yaml)
CGROUP_ROOT = Path("/sys/fs/cgroup")
LAB_CONTROLLERS = ("cpuacct", "blkio")
LAB_CGROUP_PARENT = "chaoskit-lab"


@dataclass(frozen=True)
class LabHost:
    name: str
    octet: int
    role: str  # dcs | pg | mariadb | pgaf-monitor | pgaf | repmgr
    stack: str = "base"  # base (always up) or the recipe (stack) it belongs to
    jump: bool = False  # reached through the base's jump host in the lab inventory (as staging often is)

    @property
    def address(self) -> str:
        return f"{SUBNET_PREFIX}.{self.octet}"

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:
        return "ckv-" + self.name

    @property
    def dir(self) -> Path:
        return STATE_DIR / "hosts" / self.name

    @property
    def cgroup(self) -> str:
        """The host's cgroup, relative to each controller's root."""
        return f"{LAB_CGROUP_PARENT}/{self.name}"

    def cgroup_dirs(self) -> list[Path]:
        return [CGROUP_ROOT / c / self.cgroup for c in LAB_CONTROLLERS]


@dataclass(frozen=True)
class LabSpec:
    hosts: tuple[LabHost, ...]

    def by_role(self, role: str) -> list[LabHost]:
        return [h for h in self.hosts if h.role == role]

    def of_stacks(self, stacks: set[str] | frozenset[str] | tuple[str, ...]) -> list[LabHost]:
        """The hosts of these stacks, and always the base (dcs1: etcd, jump host)."""
        return [h for h in self.hosts if h.stack == "base" or h.stack in stacks]

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    @property
    def jump_host(self) -> LabHost:
        return self.by_role("dcs")[0]




class Paths:
    """Every file the lab writes lives under STATE_DIR, so `down` can remove it all."""

    root = STATE_DIR
    state = STATE_DIR / "state.json"
    lock = STATE_DIR / ".lock"
    ssh = STATE_DIR / "ssh"
    client_key = STATE_DIR / "ssh" / "id_ed25519"
    known_hosts = STATE_DIR / "ssh" / "known_hosts"
    authorized_keys = STATE_DIR / "ssh" / "authorized_keys"
    secrets = STATE_DIR / "secrets"
    cache = STATE_DIR / "cache"  # kept across `down` (the PyPI Patroni venv)
    tools = STATE_DIR / "bin"  # wrappers a stack puts first on its hosts' PATH (MHA's tools)
    sudoers = Path("/etc/sudoers.d/chaoskit-lab")

    @staticmethod
    def secret(name: str) -> Path:
        return STATE_DIR / "secrets" / name

    @staticmethod
    def pg_disk(host: LabHost) -> Path:
        """The member's own small filesystem (`chaoskit.lab.disks`): a full disk stays in it."""
        return host.dir / "disk"

    @staticmethod
    def pg_data(host: LabHost) -> Path:
        return host.dir / "disk" / "pgdata"

    @staticmethod
    def patroni_pid(host: LabHost) -> Path:
        return host.dir / "patroni.pid"

    @staticmethod
    def launcher(host: LabHost, daemon: str) -> Path:
        return host.dir / f"start-{daemon}"

    @staticmethod
    def single_pg_data(host: LabHost) -> Path:
        return host.dir / "pgsingle"

    @staticmethod
    def mariadb_cnf(host: LabHost) -> Path:
        return host.dir / "my.cnf"

    @staticmethod
    def mariadb_pid(host: LabHost) -> Path:
        return host.dir / "mysqld.pid"

    @staticmethod
    def mariadb_socket(host: LabHost) -> Path:
        return host.dir / "mysqld.sock"
