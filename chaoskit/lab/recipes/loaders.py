"""Two loader hosts, ld-a in zone a and ld-b in zone b (`lab up --stack loaders`): hosts with
nothing but their sshd, where load agents run (`chaoskit.workload.ssh_loader`). They share this
machine's filesystem, so the agent is this checkout's chaoskit under this machine's Python, reached
through a link the build makes (`Paths.root/bin/python3`): the path the lab inventory's
`loaders: {python}` names on every machine. Their agents spool under the lab's state directory.
The inventory's `loaders.ray` names the lab's Ray cluster (head on the bridge's address, this
machine's side; a token the build makes): `chaoskit loaders up -i inventories/lab.yaml` starts it,
`loaders down` stops it (`lab down` ends the nodes with their namespaces, not the head)."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from typing import Any

from chaoskit.lab.recipes import Build
from chaoskit.lab.spec import BRIDGE_ADDRESS, LabHost, LabSpec, Paths

NAME = "loaders"
DEFAULT = True  # two hosts with an sshd each: cheap, and every load test may place agents on them
HOSTS = (LabHost("ld-a", 81, "loader", NAME), LabHost("ld-b", 82, "loader", NAME))
ZONES = {"ld-a": "a", "ld-b": "b"}
RACKS = {"ld-a": "r1", "ld-b": "r2"}  # a second tag: a Ray label of each node (`where: {labels: {rack: r2}}`)
LOADGEN = {"ld-a": 1.0, "ld-b": 4.0}  # a custom Ray resource of each node (`where: {resources: {loadgen: 2}}`)
RAY_PORT = 16380  # and the next 110: the lab's Ray cluster (`chaoskit loaders up`)
# outside the lab's state directory, which `lab down` removes: the head's pid file outlives it, so
# `loaders down` can always stop what `loaders up` started
RAY_DIR = "/run/chaoskit-lab-ray"


def ray_token() -> str:
    return str(Paths.secrets / "ray-token")


def python_link() -> str:
    return str(Paths.root / "bin" / "python3")


def spool_dir() -> str:
    return str(Paths.root / "loader-spool")


def make_ray_token() -> None:
    token = Paths.secrets / "ray-token"
    if token.exists():
        return
    token.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(token.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.replace(token.with_suffix(".tmp"), token)


def build(b: Build) -> None:
    link = Paths.root / "bin" / "python3"
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name("python3.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(os.path.realpath(sys.executable))
    os.replace(tmp, link)
    make_ray_token()
    b.wait(lambda: health(b.spec), "the loader hosts' sshd")


def health(spec: LabSpec) -> tuple[bool, str]:
    if not os.path.exists(python_link()):
        return False, f"loaders: {python_link()} is missing"
    for host in HOSTS:
        try:
            with socket.create_connection((host.address, 22), timeout=1):
                pass
        except OSError as exc:
            return False, f"loaders: {host.name}'s sshd: {exc}"
    return True, "ok"


def clusters(spec: LabSpec) -> dict[str, Any]:
    return {}


def host_services(spec: LabSpec) -> dict[str, Any]:
    return {h.name: {"tags": {"az": ZONES[h.name], "rack": RACKS[h.name]}} for h in HOSTS}


def loaders(spec: LabSpec) -> dict[str, Any]:
    return {"hosts": [h.name for h in HOSTS], "python": python_link(), "spool": spool_dir(),
            "ray": {"head": BRIDGE_ADDRESS, "port": RAY_PORT, "token_file": ray_token(), "dir": RAY_DIR},
            "resources": {h.name: {"loadgen": LOADGEN[h.name]} for h in HOSTS}}


def postgres_data(spec: LabSpec) -> list[Any]:
    return []
