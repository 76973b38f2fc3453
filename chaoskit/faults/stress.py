"""CPU / IO / memory stress on a host (stress-ng in its own process group, ended on revert and by
its own --timeout a little after the fault's TTL)."""

from __future__ import annotations

from chaoskit.faults.hostscript import FaultScripts, HostFacts
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.spec import StressSpec

STRESS_INJECT = r"""
command -v stress-ng >/dev/null 2>&1 || { echo 'stress-ng is not installed' >&2; exit 3; }
set -- --timeout "${TIMEOUT}s" --quiet
if [ "$CPU" -gt 0 ]; then set -- "$@" --cpu "$CPU"; fi
if [ "$IO" -gt 0 ]; then set -- "$@" --io "$IO"; fi
if [ "$VM" -gt 0 ]; then set -- "$@" --vm "$VM" --vm-bytes "$VM_BYTES"; fi
setsid stress-ng "$@" </dev/null >/dev/null 2>&1 &
echo "stress $!" > "$J/$ID.pids"
mark_effect
"""

STRESS_REVERT = r"""
sp=$(all_recorded | tr -d ' ')
if [ -n "$sp" ]; then end_groups "$sp" || true; fi
true
"""

STRESS_ACTIVE = r"""
sp=$(all_recorded | tr -d ' ')
if [ -n "$sp" ] && group_alive "$sp"; then exit 0; fi
exit 1
"""


def stress_scripts(fault_id: str, spec: StressSpec, facts: HostFacts) -> FaultScripts:
    return FaultScripts(inject=STRESS_INJECT, revert=STRESS_REVERT, active=STRESS_ACTIVE,
                        env={"CPU": str(spec.cpu_workers), "IO": str(spec.io_workers), "VM": str(spec.vm_workers),
                             "VM_BYTES": spec.vm_bytes, "TIMEOUT": str(int(spec.ttl) + 5)})


FAMILY = "stress"
FAULT_KINDS = (fault_kind("stress", {"stress-ng"}, stress_scripts),)
