"""Two loader hosts, ld-a in zone a and ld-b in zone b (`lab up --stack loaders`): hosts with
nothing but their sshd, where load agents run (`chaoskit.workload.ssh_loader`). They share this
machine's filesystem, so the agent is this checkout's chaoskit under this machine's Python, reached
through a link the build makes (`Paths.root/bin/python3`): the path the lab inventory's
`loaders: {python}` names on every machine. Their agents spool under the lab's state directory."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from chaoskit.lab.recipes import Build
from chaoskit.lab.spec import LabHost, LabSpec, Paths

NAME = "loaders"
DEFAULT = True  # two hosts with an sshd each: cheap, and every load test may place agents on them
HOSTS = (LabHost("ld-a", 81, "loader", NAME), LabHost("ld-b", 82, "loader", NAME))
ZONES = {"ld-a": "a", "ld-b": "b"}


def python_link() -> str:
    return str(Paths.root / "bin" / "python3")


def spool_dir() -> str:
    return str(Paths.root / "loader-spool")


def build(b: Build) -> None:
    link = Paths.root / "bin" / "python3"
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name("python3.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(os.path.realpath(sys.executable))
    os.replace(tmp, link)
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
    return {h.name: {"tags": {"az": ZONES[h.name]}} for h in HOSTS}


def loaders(spec: LabSpec) -> dict[str, Any]:
    return {"hosts": [h.name for h in HOSTS], "python": python_link(), "spool": spool_dir()}


def postgres_data(spec: LabSpec) -> list[Any]:
    return []
