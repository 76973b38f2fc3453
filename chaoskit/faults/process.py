"""Process faults: kill (named pids), crash (the member's whole process tree at one instant, as a
power loss), pause (freeze a process and its descendants), stop (graceful, started again on revert).

Processes are found by pid file, checked before they are signalled (pid > 1, alive, not an
ancestor of chaoskit's own shell, comm/exe as the inventory says), and never by name alone: lab
hosts share one process table, and a real host may run several instances.
"""

from __future__ import annotations

from chaoskit.faults.hostscript import FaultScripts, HostFacts, process_files, process_names
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.spec import CrashSpec, KillSpec, PauseSpec, StopSpec

# Staging checks and records the pids (and, for crash and pause, the process tree); the instant
# re-checks them with builtins only (`load_pids`) and acts.
RECORD = r"""
record_pids
"""

RECORD_TREE = r"""
record_pids
record_kids
"""

# A SIGKILL's process is still there while it exits, and the fault is in effect (`active`: a
# recorded process not running) only once it is gone: the instant waits for that (`wait_gone`,
# up to 5 s); the effect's instant stays the signal's. Crash's kill below does the same.
KILL_INJECT = r"""
load_pids || { record_pids; load_pids; }
kill -s "$SIGNAL" $PIDS
mark_effect
if [ "$SIGNAL" = KILL ]; then wait_gone $PIDS || true; fi
"""

# The member's tree frozen (the named processes, their recorded descendants, then what forked
# since staging): pause's whole effect, and a crash's instant.
FREEZE_TREE = r"""
load_pids || { record_pids; record_kids; load_pids; }
kill -s STOP $PIDS $KIDS 2>/dev/null || true
mark_effect
late=$(descendants $PIDS $KIDS)
if [ -n "$late" ]; then kill -s STOP $late 2>/dev/null || true; fi
for p in $late; do echo "child $p 0" >> "$J/$ID.pids"; done
"""

PAUSE_INJECT = FREEZE_TREE

# Freeze the whole tree first, then kill it: no process of the member runs (and acknowledges a
# commit) between the first death and the last; the freeze is the crash's instant.
CRASH_INJECT = FREEZE_TREE + r"""
kill -s KILL $PIDS $KIDS $late 2>/dev/null || true
wait_gone $PIDS $KIDS $late || true
"""

RESTART_REVERT = r"""
restart_missing
"""

RESTART_ACTIVE = r"""
if restart_pending; then exit 0; fi
exit 1
"""

PAUSE_REVERT = r"""
pids=$(all_recorded)
if [ -n "$pids" ]; then kill -s CONT $pids 2>/dev/null; fi
true
"""

PAUSE_ACTIVE = r"""
[ -f "$J/$ID.pids" ] || exit 1
for p in $(all_recorded); do
  if grep -q '^State:[[:space:]]*T' "/proc/$p/status" 2>/dev/null; then exit 0; fi
done
exit 1
"""

STOP_INJECT = r"""
load_pids || { record_pids; load_pids; }
for n in $PROCS; do
  sp=$(awk -v n="$n" '$1 == n { print $2 }' "$J/$ID.pids")
  cmd=$(proc_field "$n" 5)
  if [ -n "$cmd" ]; then sh -c "$cmd" </dev/null >/dev/null 2>&1; else kill -s TERM "$sp"; fi
done
mark_effect
for n in $PROCS; do
  sp=$(awk -v n="$n" '$1 == n { print $2 }' "$J/$ID.pids")
  i=0
  while alive "$sp" && [ "$i" -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
done
"""

SERVICE_INJECT = r"""
systemctl stop -- "$SERVICE"
mark_effect
"""

SERVICE_REVERT = r"""
systemctl start -- "$SERVICE"
"""

SERVICE_ACTIVE = r"""
command -v systemctl >/dev/null 2>&1 || exit 2
if systemctl is-active --quiet -- "$SERVICE"; then exit 1; fi
exit 0
"""


def _scripts(inject: str, revert: str, active: str, names: list[str], facts: HostFacts, prepare: str = RECORD,
             **env: str) -> FaultScripts:
    return FaultScripts(inject=inject, revert=revert, active=active, prepare=prepare,
                        env={"PROCS": " ".join(names), **env}, files=process_files(facts, names))


def kill_scripts(fault_id: str, spec: KillSpec, facts: HostFacts) -> FaultScripts:
    names = process_names(spec.processes, facts, all_by_default=False)
    return _scripts(KILL_INJECT, RESTART_REVERT, RESTART_ACTIVE, names, facts, SIGNAL=spec.signal,
                    ONLY_RECORDED="1")


def crash_scripts(fault_id: str, spec: CrashSpec, facts: HostFacts) -> FaultScripts:
    names = process_names(spec.processes, facts, all_by_default=True)
    return _scripts(CRASH_INJECT, RESTART_REVERT, RESTART_ACTIVE, names, facts, prepare=RECORD_TREE,
                    ONLY_RECORDED="1")


def pause_scripts(fault_id: str, spec: PauseSpec, facts: HostFacts) -> FaultScripts:
    names = process_names(spec.processes, facts, all_by_default=False)
    return _scripts(PAUSE_INJECT, PAUSE_REVERT, PAUSE_ACTIVE, names, facts, prepare=RECORD_TREE)


def stop_scripts(fault_id: str, spec: StopSpec, facts: HostFacts) -> FaultScripts:
    """The service manager where the host has one and the member names its service; else the
    configured stop command or SIGTERM, and the configured start command on revert."""
    if facts.systemd and facts.service:
        return FaultScripts(inject=SERVICE_INJECT, revert=SERVICE_REVERT, active=SERVICE_ACTIVE,
                            env={"SERVICE": facts.service})
    names = process_names(spec.processes, facts, all_by_default=False)
    for name in names:
        if not facts.processes[name].start:
            raise ValueError(f"{facts.host}: stop needs a start command for {name} (processes.{name}.start)")
    return _scripts(STOP_INJECT, RESTART_REVERT, RESTART_ACTIVE, names, facts, ONLY_RECORDED="1")


def restart_scripts(facts: HostFacts) -> FaultScripts:
    """The restart action: start every configured process of a member that is not running (the
    same shell as a kill's revert, so a restart in a drill is the same start as a heal)."""
    names = list(facts.processes)
    return _scripts("", RESTART_REVERT, RESTART_ACTIVE, names, facts, prepare="")


FAMILY = "process"
FAULT_KINDS = (
    fault_kind("kill", set(), kill_scripts),
    fault_kind("crash", set(), crash_scripts),
    fault_kind("pause", set(), pause_scripts),
    fault_kind("stop", set(), stop_scripts),
)
