"""Stage, trigger, observe and revert faults; find every journaled fault again (`recover`).

A fault reaches its host in two steps: `stage` journals it there (data, scripts, dead-man armed
with the outer TTL) and does every check that can happen early; `trigger` is the instant, one
`sh` on the open channel. `inject` does both at once.

The controller keeps what it staged and triggered and reverts all of it on normal end, error,
Ctrl-C or SIGTERM (`with FaultManager(...)` / `revert_all`). If the controller dies, each host's
dead-man reverts at the planned end (+ margin) or the outer TTL, and `recover` reverts earlier
from the journals alone, skipping faults whose controller is still running unless forced.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from chaoskit.errors import HostUnreachable, InputError, PreflightError, RemoteCommandError
from chaoskit.faults import journal
from chaoskit.faults.hostscript import HostFacts
from chaoskit.faults.registry import REGISTRY, kind_of, scripts_for
from chaoskit.faults.relay import stats_script
from chaoskit.faults.spec import ALL_HOSTS, CLIENT, CONTROL, FaultBase
from chaoskit.faults.targets import (
    RoleView,
    control_known_on,
    live_target,
    member_of,
    named_hosts,
    resolve_hosts,
    split_target,
    validate_target,
)
from chaoskit.faults.ttl import DEADMAN_MARGIN_S
from chaoskit.inventory.capabilities import Capabilities, probe_capabilities
from chaoskit.inventory.clock import ClockOffset, measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.inventory.remote import CommandResult
from chaoskit.lifeline import controller_alive, controller_identity

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
    t_staged: float | None  # control clock: when its journal entry was confirmed
    t_sent: float  # control clock: when the trigger was sent
    t_effect: float  # control clock: host time right after the decisive action, corrected by the offset
    t_effect_host: float
    t_apply_start: float  # control clock: host time just before the fault's commands ran
    t_applied: float  # control clock: host time at the end of the inject script
    offset_s: float
    offset_uncertainty_s: float
    planned_end: float | None = None  # control clock: t_effect + duration
    t_reverted: float | None = None  # control clock; from the host's own record
    reverted_by: str | None = None  # controller | deadman | recover
    revert_verified: bool = False
    revert_error: str | None = None
    step: int | None = None  # the playbook step that scheduled it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StagedFault:
    id: str
    host: str
    spec: FaultBase
    t_scheduled: float | None
    t_staged: float
    journal_dir: str = ""  # on the host, as its staging reported it
    shell: str = "sh"  # bash / real-time where the host allows: see journal._SHELLS


@dataclass(frozen=True)
class PlannedFault:
    host: str
    files: dict[str, str]
    script: str  # the staging script, as sent to the host's root shell


class FaultManager:
    def __init__(self, inventory: Inventory, pool: RemotePool | None = None,
                 roles: Callable[[Cluster], tuple[RoleView, set[str]]] | None = None,
                 journal_root: str = journal.ROOT, clock: Callable[[], float] = time.time) -> None:
        self.inventory = inventory
        # where the journal lives on every host (tests point it at a temporary directory)
        self.journal_root = journal_root
        self.clock = clock  # the control clock (t_staged, t_sent); a FakeClock in unit tests
        # SSH connections, opened (and the lab guard asked) on first use: planning and `rehearse`
        # touch no host, so `validate` works while the lab is down
        self._pool = pool
        self._own_pool = pool is None
        self.roles = roles or _discovered_roles(inventory)
        # Threads: a step's faults on several hosts are triggered at once, one thread per host
        # (`drill.steps`); the lists of what is staged and injected change under this lock, and each
        # host's SSH channel has its own (`inventory.remote`). Everything else is the drill thread's.
        self._lock = threading.Lock()
        self.injected: list[InjectedFault] = []
        self.staged: list[StagedFault] = []
        # (fault id, host) sent for staging but not yet confirmed: an interrupt can land between
        # the host's journal entry and our record of it, and revert_all must still undo it
        self.pending: list[tuple[str, str]] = []
        self.offsets: dict[str, ClockOffset] = {}
        self.capabilities: dict[str, Capabilities] = {}
        # relays between the load and the database on this machine, when a drill targets `client`
        self.client_link: ClientLink | None = None

    # -- planning (no host touched except read-only topology queries) ---------------------
    def cluster_for(self, spec: FaultBase, host: str | None = None) -> Cluster | None:
        if spec.cluster:
            return self.inventory.cluster(spec.cluster)
        if host is None:
            return None
        owners = [c for c in self.inventory.clusters.values() if any(m.host == host for m in c.members)]
        return owners[0] if len(owners) == 1 else None

    def facts(self, spec: FaultBase, host: str) -> HostFacts:
        cluster = self.cluster_for(spec, host)
        member = member_of(cluster, host)
        processes = self.inventory.processes_on(host)
        if REGISTRY[spec.kind].spec.family == "process" and not processes:
            raise InputError(f"{host}: no processes declared on it (hosts.{host}.processes, or a cluster "
                             "member's processes)", source=self.inventory.source, field="processes")
        if REGISTRY[spec.kind].spec.family == "replication" and (member is None or member.db_socket is None):
            raise InputError(f"{host}: a {spec.kind} fault runs through the server's socket: give the member "
                             "db_socket in the inventory", source=self.inventory.source, field="db_socket")
        # a disk fault's directory: a member's data, or a backup repository's (a full repository)
        data_dir = member.data_dir if member is not None else self.inventory.repository_dir(host)
        if REGISTRY[spec.kind].spec.family == "disk" and data_dir is None:
            raise InputError(f"{host}: a {spec.kind} fault acts on a member's data directory or a backup repository: "
                             "give the member data_dir, or the cluster's backup.repository path, in the inventory",
                             source=self.inventory.source, field="data_dir")
        peers: list[str] = []
        for peer in spec.peers_wanted:
            if peer == CONTROL:
                peers += self._control_addresses(host)
                continue
            if peer == ALL_HOSTS:
                peer_hosts = list(self.inventory.hosts)
            elif peer.startswith("role:"):
                peer_hosts = resolve_hosts(peer if "@" in peer else peer + "@all", cluster,
                                           lambda: self.roles(cluster))  # type: ignore[arg-type]
            elif peer.startswith("tag:"):
                peer_hosts = named_hosts(peer, self.inventory)
            else:
                peer_hosts = [peer]
            peers += [self.inventory.hosts[p].address for p in peer_hosts if p != host]
        caps = self.capabilities.get(host)
        return HostFacts(host=host, processes=processes, service=member.service if member else None,
                         systemd=bool(caps and caps.systemd), peer_addresses=tuple(dict.fromkeys(peers)),
                         peer_control=CONTROL in spec.peers_wanted,
                         exempt=self._jump_exempt(host), db_socket=member.db_socket if member else None,
                         data_dir=data_dir, wal_dir=member.wal_dir if member else None)

    def _control_addresses(self, host: str) -> list[str]:
        """The control node's addresses known here: the head of a Ray cluster chaoskit runs on it
        (the host adds the address chaoskit's SSH comes from itself)."""
        control_known_on(host, self.inventory, self.inventory.source)
        ray = self.inventory.loaders.ray if self.inventory.loaders else None
        return [ray.head] if ray is not None and ray.head is not None else []

    def _jump_exempt(self, host: str) -> tuple[tuple[str, int], ...]:
        """SSH endpoints of the hosts the controller reaches through this one."""
        me = self.inventory.hosts[host]
        out = []
        for h in self.inventory.hosts.values():
            if h.name == host or not h.jump:
                continue
            jump_addr = h.jump.rpartition("@")[2].split(":")[0].strip("[]")
            if h.jump == host or jump_addr == me.address:
                out.append((h.address, h.port))
        return tuple(dict.fromkeys(out))

    def resolve(self, spec: FaultBase) -> list[str]:
        validate_target(spec, self.inventory)
        cluster = self.cluster_for(spec)
        return resolve_hosts(spec.target, cluster, lambda: self.roles(cluster),  # type: ignore[arg-type]
                             self.inventory)

    def plan(self, spec: FaultBase, fault_id: str | None = None,
             hosts: list[str] | None = None) -> tuple[str, list[PlannedFault]]:
        fault_id = fault_id or uuid.uuid4().hex[:12]
        hosts = hosts if hosts is not None else self.resolve(spec)
        planned = []
        for host in hosts:
            try:
                scripts = scripts_for(fault_id, spec, self.facts(spec, host))
            except ValueError as exc:
                raise InputError(str(exc), source="command line", field="processes") from None
            planned_ms = None if spec.duration is None else int((spec.duration + DEADMAN_MARGIN_S) * 1000)
            files = journal.journal_files(fault_id, scripts, self._meta(fault_id, spec, host), planned_ms)
            script = journal.stage_script(fault_id, files, spec.ttl, root=self.journal_root)
            planned.append(PlannedFault(host, files, script))
        return fault_id, planned

    def host_refusal(self, spec: FaultBase, host: str) -> str | None:
        """Why `host` cannot carry `spec`, from its kind's read-only check run there (the
        filesystem under the member's data is the root one, has no block device); None if it can
        or the kind has no check."""
        if not REGISTRY[spec.kind].checked:
            return None
        try:
            scripts = scripts_for("0" * 12, spec, self.facts(spec, host))
        except ValueError as exc:
            return f"{host}: {exc}"
        res = self.pool.get(host).shell(journal.oneshot_script(scripts, scripts.check, root=self.journal_root),
                                        check=False, timeout=60)
        if res.exited == 0:
            return None
        said = (res.stderr or res.stdout).strip().splitlines()
        return f"{host}: {said[-1] if said else f'the {spec.kind} check exited {res.exited}'}"

    @property
    def pool(self) -> RemotePool:
        if self._pool is None:
            self._pool = RemotePool(self.inventory)
        return self._pool

    def rehearse(self, spec: FaultBase) -> None:
        """Plan the fault, scripts and journal included, for every host it could land on, from the
        spec and the inventory alone (nothing is sent; roles are not asked): what `plan` would
        refuse at the fault's instant, `validate` refuses now. A role target could land on any
        member; a peer chosen by role is a live fact and is left to the instant."""
        validate_target(spec, self.inventory)
        base = split_target(spec.target)[0]
        if base == CLIENT:
            return
        cluster = self.cluster_for(spec)
        hosts = ([m.host for m in cluster.members] if live_target(base) and cluster
                 else named_hosts(spec.target, self.inventory))
        live_roles = self.roles
        self.roles = lambda c: ({m.host: "primary" for m in c.members}, {m.host for m in c.members})
        try:
            for host in hosts:
                try:
                    self.plan(spec, fault_id="0" * 12, hosts=[host])
                except InputError as exc:
                    if exc.source != "topology":
                        raise
        finally:
            self.roles = live_roles

    def _meta(self, fault_id: str, spec: FaultBase, host: str) -> dict[str, Any]:
        return {"id": fault_id, "kind": spec.kind, "host": host, "target": spec.target, "ttl": spec.ttl,
                "duration": spec.duration, "controller": controller_identity(),
                "spec": spec.model_dump(mode="json")}

    # -- capabilities and clocks -----------------------------------------------------------
    def measured(self, host: str, offset: ClockOffset, capabilities: Capabilities) -> None:
        """What a preflight measured on a host (every host at once), kept for the faults to come."""
        self.offsets[host] = offset
        self.capabilities[host] = capabilities

    def host_capabilities(self, host: str) -> Capabilities:
        if host not in self.capabilities:
            self.capabilities[host] = probe_capabilities(self.pool.get(host))
        return self.capabilities[host]

    def preflight(self, spec: FaultBase, hosts: list[str]) -> None:
        """Refuse faults a host cannot carry, naming the host and what it lacks."""
        for host in hosts:
            why = kind_of(spec).refusal(host, f"a {spec.kind} fault", self.host_capabilities(host))
            if why:
                raise PreflightError(why)

    def offset(self, host: str) -> ClockOffset:
        if host not in self.offsets:
            self.offsets[host] = measure_offset(self.pool.get(host))
        return self.offsets[host]

    # -- staging and triggering --------------------------------------------------------------
    def stage(self, spec: FaultBase, t_scheduled: float | None = None,
              hosts: list[str] | None = None) -> list[StagedFault]:
        """Journal the fault on each target host (dead-man armed) without applying it."""
        hosts = hosts if hosts is not None else self.resolve(spec)
        self.preflight(spec, hosts)
        fault_id, planned = self.plan(spec, hosts=hosts)
        for p in planned:
            self.offset(p.host)
        out = []
        for p in planned:
            self.pending.append((fault_id, p.host))
            try:
                res = self.pool.get(p.host).shell(p.script, timeout=60)
            except RemoteCommandError as exc:
                raise RemoteCommandError(p.host, f"stage {spec.kind} ({fault_id})", exc.result) from None
            jdir, shell = journal.parse_staged(res.stdout)
            staged = StagedFault(fault_id, p.host, spec, t_scheduled, self.clock(), jdir, shell)
            self.staged.append(staged)
            self.pending.remove((fault_id, p.host))
            out.append(staged)
        return out

    def trigger(self, staged: StagedFault) -> InjectedFault:
        """The instant: apply a staged fault (one `sh` on the open channel)."""
        remote = self.pool.get(staged.host)
        t_sent = self.clock()
        try:
            res = remote.shell(journal.trigger_script(staged.id, root=self.journal_root, jdir=staged.journal_dir,
                                                     shell=staged.shell),
                               timeout=60)
        except RemoteCommandError as exc:
            self._forget_staged(staged)
            raise RemoteCommandError(staged.host, f"inject {staged.spec.kind} ({staged.id})", exc.result) from None
        t_start, t_eff, t_done = journal.parse_applied(res.stdout)
        off = self.offset(staged.host)
        t_effect = off.to_control(t_eff)
        fault = InjectedFault(
            id=staged.id, kind=staged.spec.kind, host=staged.host, target=staged.spec.target,
            spec=staged.spec.model_dump(mode="json"), t_scheduled=staged.t_scheduled, t_staged=staged.t_staged,
            t_sent=t_sent, t_effect=t_effect, t_effect_host=t_eff, t_apply_start=off.to_control(t_start),
            t_applied=off.to_control(t_done), offset_s=off.offset_s, offset_uncertainty_s=off.uncertainty_s,
            planned_end=None if staged.spec.duration is None else t_effect + staged.spec.duration)
        with self._lock:
            self.injected.append(fault)
        self._forget_staged(staged)
        return fault

    def _forget_staged(self, staged: StagedFault) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self.staged.remove(staged)

    def discard(self, staged: StagedFault) -> None:
        """Unjournal a staged fault that will not be triggered (e.g. its role moved)."""
        with contextlib.suppress(Exception):
            self._revert_on(staged.host, staged.id)
        self._forget_staged(staged)

    def inject(self, spec: FaultBase, t_scheduled: float | None = None) -> list[InjectedFault]:
        if split_target(spec.target)[0] == CLIENT:
            return [self._inject_client(spec, t_scheduled)]
        return [self.trigger(s) for s in self.stage(spec, t_scheduled)]

    def _inject_client(self, spec: FaultBase, t_scheduled: float | None) -> InjectedFault:
        """Toxics on the load's own relays: on this machine, so its clock, with no offset."""
        if self.client_link is None:
            raise InputError("target client needs the load to run through a client link (a drill step with "
                             "target: client sets one up)", source="command line", field="--target")
        t_sent = self.clock()
        t_effect = self.client_link.apply(spec)
        fault = InjectedFault(
            id=uuid.uuid4().hex[:12], kind=spec.kind, host=CLIENT, target=spec.target,
            spec=spec.model_dump(mode="json"), t_scheduled=t_scheduled, t_staged=None, t_sent=t_sent,
            t_effect=t_effect, t_effect_host=t_effect, t_apply_start=t_sent, t_applied=t_effect, offset_s=0.0,
            offset_uncertainty_s=0.0, planned_end=None if spec.duration is None else t_effect + spec.duration)
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
                fault.reverted_by = "controller"
                fault.revert_verified = True
                fault.revert_error = None
            except Exception as exc:  # the relays end with this controller anyway
                fault.revert_error = str(exc)
            return
        try:
            res = self._revert_on(fault.host, fault.id)
        except HostUnreachable as exc:
            fault.revert_error = str(exc)
            return
        done = journal.parse_reverted(res.stdout) if res.exited == 0 else None
        if done is None:
            fault.revert_error = {1: "still in effect after its revert", 4: "no journal entry and no revert record",
                                  5: "state unknown"}.get(res.exited, f"revert exited {res.exited}")
            detail = (res.stderr or res.stdout).strip()[-300:]
            if detail:
                fault.revert_error += f": {detail}"
            return
        t_host, by = done
        fault.t_reverted = self.offset(fault.host).to_control(t_host)
        fault.reverted_by = by
        fault.revert_verified = True
        fault.revert_error = None  # an earlier attempt's error: this one verified the heal

    def _revert_on(self, host: str, fault_id: str, by: str = "controller") -> CommandResult:
        return self.pool.get(host).shell(journal.revert_script(fault_id, by=by, root=self.journal_root),
                                         timeout=120, check=False)

    def proxy_stats(self, fault: InjectedFault) -> list[dict[str, Any]]:
        """A latency fault's measured added delay (per peer), read on the host before revert."""
        if fault.host == CLIENT:
            return self.client_link.stats() if self.client_link is not None else []
        res = self.pool.get(fault.host).shell(stats_script(fault.id), check=False)
        return [json.loads(line) for line in res.stdout.splitlines() if line.strip().startswith("{")]

    def is_active(self, fault: InjectedFault) -> bool | None:
        """True in effect, False not, None unknown."""
        if fault.host == CLIENT:
            return self.client_link is not None and self.client_link.active
        res = self.pool.get(fault.host).shell(journal.active_script(fault.id, root=self.journal_root), check=False)
        return True if res.exited == 0 else False if res.exited == 1 else None

    def revert_all(self) -> list[InjectedFault]:
        """Revert everything this controller staged or injected (and anything still in flight),
        newest first; never raises. The revert uses the same shell channel, so it runs after an
        interrupted stage or trigger."""
        for fault_id, host in reversed(list(self.pending)):
            with contextlib.suppress(Exception):
                res = self._revert_on(host, fault_id)
                if res.exited in (0, 4):
                    self.pending.remove((fault_id, host))
        for staged in reversed(list(self.staged)):
            self.discard(staged)
        failed = []
        for fault in reversed(self.injected):
            with contextlib.suppress(Exception):
                self.revert(fault)
            if not fault.revert_verified:
                failed.append(fault)
        return failed

    # -- journals on hosts -----------------------------------------------------------------
    def journaled(self, hosts: list[str] | None = None) -> dict[str, list[dict] | BaseException]:
        listing = journal.list_script(root=self.journal_root)
        return fan_out_pool(self.pool, lambda r: journal.parse_list(r.shell(listing).stdout), hosts)

    def revert_by_id(self, fault_id: str) -> dict[str, str]:
        script = journal.revert_script(fault_id, by="recover", root=self.journal_root)
        results = fan_out_pool(self.pool, lambda r: r.shell(script, timeout=120, check=False))
        out = {}
        for host, res in results.items():
            if isinstance(res, BaseException):
                out[host] = f"unreachable: {res}"
            elif res.exited == 0 and res.stdout.strip().splitlines()[-1].startswith("already"):
                out[host] = f"already reverted ({res.stdout.strip().split()[-1]})"
            elif res.exited == 0:
                out[host] = "reverted"
            elif res.exited != 4:
                out[host] = f"revert failed: {(res.stderr or res.stdout).strip()[-200:]}"
        return out

    def recover(self, force: bool = False, hosts: list[str] | None = None) -> dict[str, Any]:
        """Revert every journaled fault on every host (or on `hosts`), except those of a controller
        still running on this machine (a drill in progress) unless `force`."""
        report: dict[str, Any] = {}
        for host, entries in self.journaled(hosts).items():
            if isinstance(entries, BaseException):
                report[host] = {"error": str(entries)}
                continue
            done = {}
            for entry in entries:
                if not force and controller_alive(entry):
                    ctl = entry["controller"]
                    done[entry["id"]] = f"skipped: its controller (pid {ctl['pid']}) still runs; --force reverts it"
                    continue
                res = self._revert_on(host, entry["id"], by="recover")
                done[entry["id"]] = "reverted" if res.exited in (0, 4) else \
                    f"failed: {(res.stderr or res.stdout).strip()[-200:]}"
            report[host] = done
        return report

    def close(self) -> None:
        if self._own_pool and self._pool is not None:
            self._pool.close()

    def __enter__(self) -> FaultManager:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.revert_all()
        finally:
            self.close()


def _discovered_roles(inventory: Inventory) -> Callable[[Cluster], tuple[RoleView, set[str]]]:
    """Roles asked of every member now (SQL, and the HA manager's sync standby)."""

    def roles(cluster: Cluster) -> tuple[RoleView, set[str]]:
        from chaoskit.topology.roles import discover_roles

        found = discover_roles(cluster, inventory)
        return {r.member: r.sql_role for r in found}, {r.member for r in found if r.sync_standby}

    return roles


__all__ = ["FaultManager", "InjectedFault", "PreflightError", "StagedFault"]
