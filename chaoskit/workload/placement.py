"""Client groups placed on loader hosts (`where:`): each share of such a group becomes a load agent
on one of its hosts (a tool group: one agent running its tool, on the first), through Ray when
the inventory's loaders have `ray:` (`chaoskit.workload.ray_loader`), else over SSH
(`chaoskit.workload.ssh_loader`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import chaoskit
from chaoskit.inventory.fanout import RemotePool
from chaoskit.workload.agent import AgentOrder
from chaoskit.workload.engine import engine
from chaoskit.workload.framed import LEASE_S, FramedSource
from chaoskit.workload.source import LoadSource
from chaoskit.workload.spec import ClientGroup
from chaoskit.workload.ssh_loader import _RUN_ID, LoaderRefused, SshLoader

if TYPE_CHECKING:
    from chaoskit.workload.runner import LoadRunner


def placed_shares(shares: list[tuple[ClientGroup, list[int]]], placement: dict[str, tuple[str, ...]]
                  ) -> list[tuple[ClientGroup, list[int], str]]:
    """(group, worker ids, loader host) per agent of the placed groups: a group's shares round robin
    over its hosts, its workers split into as many shares as it has hosts where it had fewer (every
    host it names takes an agent)."""
    out: list[tuple[ClientGroup, list[int], str]] = []
    for name, hosts in placement.items():
        mine = [(g, ids) for g, ids in shares if g.name == name]
        if not mine or not hosts:
            continue
        group = mine[0][0]
        if len(mine) < len(hosts):
            ids = sorted(w for _, share in mine for w in share)
            mine = [(group, ids[i::len(hosts)]) for i in range(len(hosts))]
        out += [(g, ids, hosts[turn % len(hosts)]) for turn, (g, ids) in enumerate(mine) if ids]
    return out


def loader_agent_sources(pool: RemotePool, placement: dict[str, tuple[str, ...]], run_id: str,
                      lease_s: float = LEASE_S) -> Callable[[LoadRunner], list[LoadSource]]:
    """For `LoadRunner(make_sources=...)`: each share of a group named in `placement` as a load
    agent on one of its loader hosts (round robin over the shares), spooling in
    `<loaders.spool>/<run_id>/<group>-<first worker>` there; every other share on the control node
    as before. Each loader host is checked once (chaoskit version, clock), and for each tool group
    that its tool is there, before any agent starts."""
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id!r}")

    def make(runner: LoadRunner) -> list[LoadSource]:
        loaders = runner.inventory.loaders
        if loaders is None:
            raise LoaderRefused("client groups placed on loader hosts need the inventory's loaders: section")
        for group_name, hosts in placement.items():
            for host in hosts:
                if host not in loaders.hosts:
                    raise LoaderRefused(f"group {group_name}: {host} is not one of the inventory's loader hosts "
                                        f"({', '.join(loaders.hosts)})")
        spec = runner.spec
        inventory_json = runner.inventory.model_dump_json()
        via_ray = None
        if loaders.ray is not None:  # placed, started and read through Ray actors (SSH when a node is lost)
            from chaoskit.workload.ray_loader import ray_hosts

            via_ray = ray_hosts(loaders.ray, runner.inventory, run_id)
        checked: dict[str, SshLoader] = {}
        out: list[LoadSource] = []
        # a tool group is one tool on its (first) loader host
        tools = [(g, list(g.worker_ids), placement[g.name][0]) for g in runner.tool_groups(spec)
                 if placement.get(g.name)]
        for group, share, host in placed_shares(runner.shares(), placement) + tools:
            rate_share = spec.rate * len(share) / spec.workers if spec.rate else None
            order = AgentOrder.of(runner.route(group).model_dump_json(), inventory_json, spec, group, share,
                                  runner.recorder.base, rate_share)
            tool = engine(group.tool)
            label = group.tool if tool.external() else share[0]
            name, directory = f"{group.name}/{label}@{host}", f"{loaders.spool}/{run_id}/{group.name}-{share[0]}"
            if via_ray is not None:
                from chaoskit.workload.ray_loader import RayLoader

                loader: SshLoader = RayLoader(name, via_ray.remote(host, pool.get(host)), directory, order,
                                              loaders.python, chaoskit.__version__, via_ray)
            else:
                loader = SshLoader(name, pool.get(host), directory, order, loaders.python, chaoskit.__version__)
            if host not in checked:
                loader.check()
                checked[host] = loader
            loader.require(tool.programs(group.settings), group.name)
            loader.offset = checked[host].offset
            if via_ray is not None:
                loader.ray_offset = checked[host].ray_offset  # type: ignore[attr-defined]
            loader.clock_offset_s = checked[host].clock_offset_s
            loader.clock_uncertainty_s = checked[host].clock_uncertainty_s
            out.append(FramedSource(loader, tuple(share), builtin=not tool.external(), lease_s=lease_s))
        placed = {w for s in out for w in s.workers}
        return out + [s for s in runner.local_sources() if placed.isdisjoint(s.workers)]

    return make
