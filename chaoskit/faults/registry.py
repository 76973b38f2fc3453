"""Every fault kind in one table: its spec model, the host capabilities it needs, its scripts.

`fault inject`, the drill's preflight and experiments all read `needs` from here, so a drill that
would abort at a step because the host lacks stress-ng or tc is refused before it starts. A new
kind is one entry here plus its spec model and its scripts (in the module of its family).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaoskit.faults import network, process, relay, replication, stress
from chaoskit.faults.hostscript import FaultScripts, HostFacts
from chaoskit.faults.spec import KINDS, FaultBase

# what every fault needs on its host: the journal, the dead-man and the process checks
JOURNAL_NEEDS = frozenset({"base64", "sha256sum", "setsid", "awk", "ps"})


@dataclass(frozen=True)
class FaultKind:
    name: str
    spec: type[FaultBase]
    needs: frozenset[str]
    scripts: Callable[[str, Any, HostFacts], FaultScripts]


def _kind(name: str, needs: set[str], scripts: Callable[[str, Any, HostFacts], FaultScripts]) -> FaultKind:
    return FaultKind(name, KINDS[name], frozenset(needs) | JOURNAL_NEEDS, scripts)


REGISTRY: dict[str, FaultKind] = {k.name: k for k in (
    _kind("kill", set(), process.kill_scripts),
    _kind("crash", set(), process.crash_scripts),
    _kind("pause", set(), process.pause_scripts),
    _kind("stop", set(), process.stop_scripts),
    _kind("partition", {"iptables"}, network.partition_scripts),
    _kind("loss", {"iptables"}, network.loss_scripts),
    _kind("bandwidth", {"tc"}, network.bandwidth_scripts),
    _kind("netem", {"tc", "netem"}, network.netem_scripts),
    _kind("latency", {"iptables", "python3.7", "ss", "setpriv"}, relay.relay_scripts),
    _kind("proxy", {"iptables", "python3.7", "ss", "setpriv"}, relay.relay_scripts),
    _kind("stress", {"stress-ng"}, stress.stress_scripts),
    _kind("replica_stop", {"mariadb-client"}, replication.replica_stop_scripts),
)}
assert set(REGISTRY) == set(KINDS), "every spec model has a registry entry"


def kind_of(spec: FaultBase) -> FaultKind:
    return REGISTRY[spec.kind]


def scripts_for(fault_id: str, spec: FaultBase, facts: HostFacts) -> FaultScripts:
    return REGISTRY[spec.kind].scripts(fault_id, spec, facts)


def missing_needs(spec: FaultBase, have: frozenset[str] | set[str]) -> list[str]:
    return sorted(REGISTRY[spec.kind].needs - set(have))
