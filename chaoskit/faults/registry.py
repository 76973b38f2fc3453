"""Every fault kind, found in the modules of this package that declare a `FAMILY` and its
`FAULT_KINDS` (`chaoskit.plugins`). A new kind is its spec model (`chaoskit.faults.spec`) and its
declaration with its scripts in its family's module; a new family is one module."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import ModuleType

from chaoskit.faults.hostscript import FaultScripts, HostFacts
from chaoskit.faults.kinds import FaultKind
from chaoskit.faults.spec import KINDS, FaultBase
from chaoskit.plugins import Plugins

FAMILIES: Plugins[ModuleType] = Plugins("chaoskit.faults", ModuleType, "FAMILY", "fault family",
                                        skip=("delay_proxy",))


class _Kinds(Mapping[str, FaultKind]):
    """Kind name -> FaultKind, gathered from the families on first use."""

    def __init__(self) -> None:
        self._kinds: dict[str, FaultKind] | None = None

    def _all(self) -> dict[str, FaultKind]:
        if self._kinds is None:
            kinds = {k.name: k for module in FAMILIES.all().values() for k in module.FAULT_KINDS}
            if set(kinds) != set(KINDS):
                raise RuntimeError(f"fault kinds without a family: {sorted(set(KINDS) - set(kinds))}")
            self._kinds = {name: kinds[name] for name in KINDS}  # in the spec's order
        return self._kinds

    def __getitem__(self, name: str) -> FaultKind:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


REGISTRY: Mapping[str, FaultKind] = _Kinds()


def kind_of(spec: FaultBase) -> FaultKind:
    return REGISTRY[spec.kind]


def scripts_for(fault_id: str, spec: FaultBase, facts: HostFacts) -> FaultScripts:
    return REGISTRY[spec.kind].scripts(fault_id, spec, facts)
