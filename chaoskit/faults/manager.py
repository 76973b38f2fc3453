"""Inject, observe and revert faults; find every journaled fault again (`recover`).

The controller keeps what it injected and reverts all of it on normal end, error, Ctrl-C or
SIGTERM (`with FaultManager(...)` / `revert_all`). If the controller dies, each host's dead-man
reverts at the deadline, and `recover` reverts earlier from the journals alone.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from chaoskit.errors import HostUnreachable, InputError, PreflightError, RemoteCommandError
from chaoskit.faults import journal
from chaoskit.faults.kinds import FaultScripts, HostFacts, scripts_for
from chaoskit.faults.models import NETWORK_KINDS, PROCESS_KINDS, FaultSpec
from chaoskit.faults.targets import ALL_HOSTS, CLIENT, member_of, resolve_hosts, split_target, validate_target
from chaoskit.inventory.capabilities import probe_capabilities
from chaoskit.inventory.clock import ClockOffset, measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.models import Cluster, Inventory

if TYPE_CHECKING:
    from chaoskit.faults.client_link import ClientLink


@dataclass
class InjectedFault:
    id: str
    kind: str
    host: str
    target: str
    spec: dict[str, Any]
    t_scheduled: float | None
    t_sent: float  # control clock, when the inject script was sent
    t_effect: float  # control clock: host time of effect corrected by the measured offset
    t_effect_host: float
    offset_s: float
    t_apply_start: float  # control clock: host time just before the fault's commands ran
    offset_uncertainty_s: float
    t_reverted: float | None = None
    revert_verified: bool = False
    revert_error: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PlannedFault:
    host: str
    script: str


def _is_timestamp(word: str) -> bool:
    head, _, tail = word.partition(".")
    return head.isdigit() and tail.isdigit() and len(head) >= 9


class FaultManager:
    def __init__(self, inventory: Inventory, pool: RemotePool | None = None) -> None:
        self.inventory = inventory
        self.pool = pool or RemotePool(inventory)
        self._own_pool = pool is None
        self.injected: list[InjectedFault] = []
        # (fault id, host) sent but not yet confirmed: an interrupt can land between the host's
        # journal entry and our record of it, and revert_all must still undo it
        self.pending: list[tuple[str, str]] = []
        self.offsets: dict[str, ClockOffset] = {}
        self._capabilities: dict[str, Any] = {}
        # relays between the load and the database on this machine, when a drill targets `client`
        self.client_link: ClientLink | None = None

    # -- planning (no host touched except read-only topology queries) ---------------------
    def _cluster_for(self, spec: FaultSpec, host: str | None = None) -> Cluster | None:
        if spec.cluster:
            return self.inventory.cluster(spec.cluster)
        if host is None:
            return None
        owners = [c for c in self.inventory.clusters.values() if any(m.host == host for m in c.members)]
        return owners[0] if len(owners) == 1 else None

    def _facts(self, spec: FaultSpec, host: str) -> HostFacts:
        cluster = self._cluster_for(spec, host)
        member = member_of(cluster, host)
        processes = dict(member.processes) if member else {}
        if spec.kind in PROCESS_KINDS and not processes:
            raise InputError(f"{host}: no processes configured for it in any cluster (members[].processes)",
                             source=self.inventory.source, field="processes")
        peers: list[str] = []
        for peer in spec.peers:
            if peer == ALL_HOSTS:
                peer_hosts = list(self.inventory.hosts)
            elif peer.startswith("role:"):
                peer_hosts = resolve_hosts(peer if "@" in peer else peer + "@all", cluster, self.inventory)
            else:
                peer_hosts = [peer]
            peers += [self.inventory.hosts[p].address for p in peer_hosts if p != host]
        return HostFacts(host=host, processes=processes, service=member.service if member else None,
                         systemd=False, peer_addresses=tuple(dict.fromkeys(peers)))

    def plan(self, spec: FaultSpec, fault_id: str | None = None) -> tuple[str, list[PlannedFault]]:
        validate_target(spec, self.inventory)
        fault_id = fault_id or uuid.uuid4().hex[:12]
        hosts = resolve_hosts(spec.target, self._cluster_for(spec), self.inventory)
        planned = []
        for host in hosts:
            try:
                scripts = scripts_for(fault_id, spec, self._facts(spec, host))
            except ValueError as exc:
                raise InputError(str(exc), source="command line", field="--processes") from None
            planned.append(PlannedFault(host, journal.inject_script(fault_id, scripts, self._meta(fault_id, spec, host),
                                                                    spec.ttl)))
        return fault_id, planned

    def _meta(self, fault_id: str, spec: FaultSpec, host: str) -> dict[str, Any]:
        return {"id": fault_id, "kind": spec.kind, "host": host, "target": spec.target, "ttl": spec.ttl,
                "controller": f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}",
                "spec": spec.model_dump(mode="json")}

    # -- injecting ---------------------------------------------------------------------------
    def offset(self, host: str) -> ClockOffset:
        if host not in self.offsets:
            self.offsets[host] = measure_offset(self.pool.get(host))
        return self.offsets[host]

    def preflight(self, spec: FaultSpec, hosts: list[str]) -> None:
        """Refuse faults the host cannot carry, naming the host."""
        for host in hosts:
            if host not in self._capabilities:
                self._capabilities[host] = probe_capabilities(self.pool.get(host))
            caps = self._capabilities[host]
            if spec.kind == "netem" and not caps.netem:
                raise PreflightError(f"{host}: this kernel has no sch_netem ({caps.netem_reason}); netem faults "
                                     "cannot run here (use kind loss/bandwidth, or the latency proxy)")
            if spec.kind in NETWORK_KINDS - {"netem"} and spec.kind != "bandwidth" and not caps.iptables:
                raise PreflightError(f"{host}: iptables is not installed; {spec.kind} faults need it")
            if spec.kind == "bandwidth" and not caps.tc:
                raise PreflightError(f"{host}: tc is not installed; bandwidth faults need it")
            if spec.kind == "stress" and not caps.stress_ng:
                raise PreflightError(f"{host}: stress-ng is not installed; stress faults need it")

    def inject(self, spec: FaultSpec, t_scheduled: float | None = None) -> list[InjectedFault]:
        if split_target(spec.target)[0] == CLIENT:
            return [self._inject_client(spec, t_scheduled)]
        fault_id, planned = self.plan(spec)
        self.preflight(spec, [p.host for p in planned])
        for p in planned:
            self.offset(p.host)
        out = []
        for p in planned:
            remote = self.pool.get(p.host)
            self.pending.append((fault_id, p.host))
            t_sent = time.time()
            try:
                res = remote.shell(p.script, timeout=30)
            except RemoteCommandError as exc:
                raise RemoteCommandError(p.host, f"inject {spec.kind} ({fault_id})", exc.result) from None
            stamps = [float(x) for x in res.stdout.split() if _is_timestamp(x)]
            t_start_host, t_host = stamps[0], stamps[-1]
            off = self.offsets[p.host]
            fault = InjectedFault(
                id=fault_id, kind=spec.kind, host=p.host, target=spec.target, spec=spec.model_dump(mode="json"),
                t_scheduled=t_scheduled, t_sent=t_sent, t_effect=off.to_control(t_host), t_effect_host=t_host,
                offset_s=off.offset_s, t_apply_start=off.to_control(t_start_host),
                offset_uncertainty_s=off.uncertainty_s)
            self.injected.append(fault)
            self.pending.remove((fault_id, p.host))
            out.append(fault)
        return out

    def _inject_client(self, spec: FaultSpec, t_scheduled: float | None) -> InjectedFault:
        """Toxics on the load's own relays: on this machine, so its clock, with no offset."""
        validate_target(spec, self.inventory)
        if self.client_link is None:
            raise InputError("target client needs the load to run through a client link (a drill step with "
                             "target: client sets one up)", source="command line", field="--target")
        t_sent = time.time()
        t_effect = self.client_link.apply(spec)
        fault = InjectedFault(
            id=uuid.uuid4().hex[:12], kind=spec.kind, host=CLIENT, target=spec.target,
            spec=spec.model_dump(mode="json"), t_scheduled=t_scheduled, t_sent=t_sent, t_effect=t_effect,
            t_effect_host=t_effect, offset_s=0.0, t_apply_start=t_sent, offset_uncertainty_s=0.0)
        self.injected.append(fault)
        return fault

    # -- reverting ---------------------------------------------------------------------------
    def revert(self, fault: InjectedFault) -> None:
        if fault.t_reverted is not None:
            return
        if fault.host == CLIENT:
            try:
                assert self.client_link is not None
                fault.t_reverted = self.client_link.clear()
                fault.revert_verified = True
            except Exception as exc:  # the relays end with this controller anyway
                fault.revert_error = str(exc)
            return
        try:
            res = self.pool.get(fault.host).shell(journal.revert_script(fault.id), timeout=60, check=False)
        except HostUnreachable as exc:
            fault.revert_error = str(exc)
            return
        if res.exited == 4:  # no journal entry left: the dead-man (or recover) reverted it already
            fault.revert_verified = not self.is_active(fault)
            fault.t_reverted = time.time()
            return
        if res.exited != 0:
            fault.revert_error = (res.stderr or res.stdout).strip()[-300:]
            return
        t_host = float(res.stdout.strip().splitlines()[-1])
        fault.t_reverted = self.offset(fault.host).to_control(t_host)
        fault.revert_verified = True

    def proxy_stats(self, fault: InjectedFault) -> list[dict[str, Any]]:
        """A latency fault's measured added delay (per peer), read on the host before revert."""
        if fault.host == CLIENT:
            return self.client_link.stats() if self.client_link is not None else []
        script = (f"(J={journal.JOURNAL_DIR}; "
                  f"for f in \"$J/{fault.id}.proxy.d\"/stats-*.json; do [ -f \"$f\" ] && cat \"$f\" && echo; done)")
        res = self.pool.get(fault.host).shell(script, check=False)
        return [json.loads(line) for line in res.stdout.splitlines() if line.strip().startswith("{")]

    def is_active(self, fault: InjectedFault) -> bool:
        if fault.host == CLIENT:
            return self.client_link is not None and self.client_link.active
        res = self.pool.get(fault.host).shell(journal.active_script(fault.id), check=False)
        return res.exited == 0

    def revert_all(self) -> list[InjectedFault]:
        """Revert everything this controller injected (and anything still in flight), newest first;
        never raises. The revert uses the same shell channel, so it runs after an interrupted inject."""
        for fault_id, host in reversed(self.pending):
            with contextlib.suppress(Exception):
                res = self.pool.get(host).shell(journal.revert_script(fault_id), timeout=60, check=False)
                if res.exited in (0, 4):
                    self.pending.remove((fault_id, host))
        failed = []
        for fault in reversed(self.injected):
            with contextlib.suppress(Exception):
                self.revert(fault)
            if not fault.revert_verified:
                failed.append(fault)
        return failed

    # -- journals on hosts -----------------------------------------------------------------
    def journaled(self, hosts: list[str] | None = None) -> dict[str, list[dict] | BaseException]:
        results = fan_out_pool(self.pool, lambda r: journal.parse_list(r.shell(journal.LIST_SCRIPT).stdout), hosts)
        return results

    def revert_by_id(self, fault_id: str) -> dict[str, str]:
        results = fan_out_pool(self.pool, lambda r: r.shell(journal.revert_script(fault_id), check=False))
        out = {}
        for host, res in results.items():
            if isinstance(res, BaseException):
                out[host] = f"unreachable: {res}"
            elif res.exited == 0:
                out[host] = "reverted"
            elif res.exited != 4:
                out[host] = f"revert failed: {(res.stderr or res.stdout).strip()[-200:]}"
        return out

    def recover(self) -> dict[str, Any]:
        """Revert every journaled fault on every host (whoever injected it)."""
        report: dict[str, Any] = {}
        for host, entries in self.journaled().items():
            if isinstance(entries, BaseException):
                report[host] = {"error": str(entries)}
                continue
            done = {}
            for entry in entries:
                res = self.pool.get(host).shell(journal.revert_script(entry["id"]), timeout=60, check=False)
                done[entry["id"]] = "reverted" if res.exited in (0, 4) else \
                    f"failed: {(res.stderr or res.stdout).strip()[-200:]}"
            report[host] = done
        return report

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> FaultManager:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.revert_all()
        finally:
            self.close()


__all__ = ["FaultManager", "FaultScripts", "InjectedFault", "PreflightError"]
