"""`data_dir_lost`: a member's data directory gone, the disaster a point-in-time restore is for
(a failed volume, an `rm -rf` in the wrong window). The member's process tree is frozen and
SIGKILLed at one instant (as `crash`: nothing is acknowledged after the first process dies), then
its data directory is renamed on its own filesystem to `<dir>.chaoskit-lost-<fault id>`. Nothing
is ever deleted: this is a drill, and the revert (the dead-man's too) renames it back and starts
again what was running. A directory something made in its place meanwhile (a manager's re-init,
an operator's restore) is kept beside it as `<dir>.chaoskit-new-<fault id>`; while a process of
the member runs from it the revert refuses, naming both paths, rather than move a live server's
files.

The directory is the inventory's (validated as a path, passed as data). On a backup repository
host it is the repository's directory, with no process to stop.
"""

from __future__ import annotations

from chaoskit.faults.disk import disk_dir
from chaoskit.faults.hostscript import FaultScripts, HostFacts, process_files, process_names
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.process import CRASH_INJECT
from chaoskit.faults.spec import DataDirLostSpec

PATHS = r"""
LOST="$DIR.chaoskit-lost-$ID"
NEW="$DIR.chaoskit-new-$ID"
"""

CHECK = PATHS + r"""
case "$DIR" in /?*) ;; *) echo "$DIR: not an absolute path below /" >&2; exit 3 ;; esac
[ -d "$DIR" ] || { echo "$DIR: no such directory on $(uname -n)" >&2; exit 3; }
MNT=$(findmnt -n -o TARGET -T "$DIR" 2>/dev/null | head -n 1)
if [ "$MNT" = "$DIR" ]; then
  echo "$DIR is a mount point: data_dir_lost renames the directory on its own filesystem;" \
    "a mount point cannot be renamed" >&2
  exit 3
fi
if [ -e "$LOST" ]; then echo "$LOST exists already (an earlier fault's? chaoskit recover)" >&2; exit 3; fi
"""

PREPARE = CHECK + r"""
if [ -n "$PROCS" ]; then record_pids || exit 3; record_kids || exit 3; fi
"""

MOVE = PATHS + r"""
mv -T -- "$DIR" "$LOST" || { echo "$DIR: could not be moved aside to $LOST" >&2; exit 3; }
"""

INJECT_WITH_PROCESSES = CRASH_INJECT + MOVE

INJECT_DIR_ONLY = MOVE + r"""
mark_effect
"""

REVERT = PATHS + r"""
if [ -d "$LOST" ]; then
  if [ -e "$DIR" ]; then
    for n in $PROCS; do
      if running_now "$n"; then
        echo "$n runs again, from a new $DIR: the lost directory is kept at $LOST," \
          "not moved over a live server's files" >&2
        exit 3
      fi
    done
    mv -T -- "$DIR" "$NEW" || { echo "$DIR: could not be kept aside as $NEW" >&2; exit 3; }
  fi
  mv -T -- "$LOST" "$DIR" || { echo "$LOST: could not be moved back to $DIR" >&2; exit 3; }
fi
if [ -n "$PROCS" ]; then restart_missing; fi
true
"""

ACTIVE = PATHS + r"""
[ -d "$LOST" ] && exit 0
if [ -n "$PROCS" ] && restart_pending; then exit 0; fi
exit 1
"""


def data_dir_lost_scripts(fault_id: str, spec: DataDirLostSpec, facts: HostFacts) -> FaultScripts:
    directory = disk_dir(spec, facts)
    names = process_names(spec.processes, facts, all_by_default=True) if facts.processes or spec.processes else []
    return FaultScripts(inject=INJECT_WITH_PROCESSES if names else INJECT_DIR_ONLY, revert=REVERT, active=ACTIVE,
                        prepare=PREPARE, check=CHECK,
                        env={"DIR": directory.rstrip("/") or "/", "PROCS": " ".join(names), "ONLY_RECORDED": "1"},
                        files=process_files(facts, names))


FAMILY = "data_dir"
FAULT_KINDS = (fault_kind("data_dir_lost", {"findmnt"}, data_dir_lost_scripts, checked=True),)
