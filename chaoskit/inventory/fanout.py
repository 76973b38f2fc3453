"""Run one function against many hosts in parallel; per-host results, never one exception.

Like fabric's GroupResult: the caller gets `{host: result | exception}` and decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from chaoskit.errors import HostUnreachable
from chaoskit.inventory.models import Inventory
from chaoskit.inventory.reach import lab_hosts_not_running, refuse_unreachable_lab
from chaoskit.inventory.remote import Remote, SshRemote

T = TypeVar("T")


class RemotePool:
    """Persistent connections to the hosts of one inventory, opened on first use."""

    def __init__(self, inventory: Inventory, factory: Callable[[str], Remote] | None = None) -> None:
        self.absent: frozenset[str] = frozenset()
        if factory is None:  # real SSH: a lab inventory must not reach out while the lab is down
            refuse_unreachable_lab(inventory)
            self.absent = lab_hosts_not_running(inventory)
        self.inventory = inventory
        self._factory = factory or (lambda name: SshRemote(inventory.hosts[name], inventory))
        self._remotes: dict[str, Remote] = {}

    def get(self, name: str) -> Remote:
        if name in self.absent:
            raise HostUnreachable(name, "a lab host whose stack is not up (chaoskit lab up --stack ...)")
        if name not in self._remotes:
            self.inventory.host(name)  # raises KeyError with the known names
            self._remotes[name] = self._factory(name)
        return self._remotes[name]

    def close(self) -> None:
        for remote in self._remotes.values():
            remote.close()
        self._remotes.clear()

    def __enter__(self) -> RemotePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fan_out_pool(pool: RemotePool, fn: Callable[[Remote], T], hosts: Iterable[str] | None = None,
                 max_workers: int = 16) -> dict[str, T | BaseException]:
    # every host: those that exist (a lab inventory lists the hosts of stacks that are not up)
    names = list(hosts) if hosts is not None else [h for h in pool.inventory.hosts if h not in pool.absent]

    def call(name: str) -> T | BaseException:
        try:
            return fn(pool.get(name))
        except Exception as exc:  # per-host outcome, reported by the caller
            return exc

    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(max_workers, len(names))) as ex:
        return dict(zip(names, ex.map(call, names), strict=True))


def fan_out(inventory: Inventory, fn: Callable[[Remote], T],
            hosts: Iterable[str] | None = None) -> dict[str, T | BaseException]:
    """One-shot: open, run, close."""
    with RemotePool(inventory) as pool:
        return fan_out_pool(pool, fn, hosts)
