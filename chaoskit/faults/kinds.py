"""What chaoskit knows of one fault kind, declared once by its family's module (`FAULT_KINDS` in
process.py, network.py, relay.py, stress.py, replication.py; `chaoskit.faults.registry` finds
them): the spec model of its fields (`spec.KINDS`), what its host needs, its scripts, and what to
use instead when a host cannot carry it. `fault inject`, the drill's preflight and experiments
read it from there, so a drill that would abort at a step is refused before it starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaoskit.faults.hostscript import FaultScripts, HostFacts
from chaoskit.faults.spec import KINDS, FaultBase
from chaoskit.inventory.capabilities import Capabilities

# what every fault needs on its host: the journal, the dead-man and the process checks
JOURNAL_NEEDS = frozenset({"base64", "sha256sum", "setsid", "awk", "ps"})


@dataclass(frozen=True)
class FaultKind:
    name: str
    needs: frozenset[str]
    scripts: Callable[[str, Any, HostFacts], FaultScripts]
    instead: str = ""  # what to use where a host lacks what this kind needs (said in the refusal)
    checked: bool = False  # its scripts carry a `check` preflight runs on each host it may land on

    @property
    def spec(self) -> type[FaultBase]:
        return KINDS[self.name]

    @property
    def family(self) -> str:
        return self.spec.family

    def missing(self, caps: Capabilities) -> list[str]:
        return sorted(self.needs - set(caps.have))

    def refusal(self, host: str, what: str, caps: Capabilities) -> str | None:
        """Why `host` cannot carry this fault (`what` names it: "steps[2] (netem)", "a netem
        fault"), in one line; None if it can."""
        missing = self.missing(caps)
        if not missing:
            return None
        if "netem" in missing:
            why = f"{host}: this kernel has no sch_netem ({caps.netem_reason or 'not loadable'}); {what} needs it"
        else:
            why = f"{host}: {what} needs {', '.join(missing)}, which this host lacks"
        return f"{why} ({self.instead})" if self.instead else why


def fault_kind(name: str, needs: set[str], scripts: Callable[[str, Any, HostFacts], FaultScripts],
               instead: str = "", checked: bool = False) -> FaultKind:
    """A kind as a family declares it; the journal's own needs are added."""
    if name not in KINDS:
        raise ValueError(f"fault kind {name!r} has no spec model in chaoskit.faults.spec")
    return FaultKind(name, frozenset(needs) | JOURNAL_NEEDS, scripts, instead, checked)
