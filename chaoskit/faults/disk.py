"""Disk faults on the filesystem under a member's data (its WAL directory when declared, else its
data directory; on a backup repository host, the repository's directory): `disk_full` (a ballast
file leaves a given free space) and `disk_slow` (the member's processes throttled on that
filesystem's block device).

The directory is the inventory's (validated as a path, passed as data); the filesystem, its
mount point and its device are found on the host at staging, so a refusal (the host's root
filesystem, no block device, no blkio) comes before the instant. Both faults are undone by
the revert the dead-man runs too: the ballast is a file whose exact path the journal holds, the
throttle a cgroup of our own that the processes leave again.
"""

from __future__ import annotations

from chaoskit.faults.hostscript import FaultScripts, HostFacts, process_files, process_names
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.spec import DataDirLostSpec, DiskFullSpec, DiskSlowSpec
from chaoskit.units import parse_rate

# $DIR's filesystem: its mount point ($MNT) and device ($DEV, major:minor)
FIND_FS = r"""
[ -d "$DIR" ] || { echo "$DIR: no such directory on $(uname -n)" >&2; exit 3; }
MNT=$(findmnt -n -o TARGET -T "$DIR" 2>/dev/null | head -n 1)
DEV=$(findmnt -n -o MAJ:MIN -T "$DIR" 2>/dev/null | head -n 1 | tr -d ' ')
[ -n "$MNT" ] && [ -d "$MNT" ] || { echo "$DIR: its filesystem's mount point was not found (findmnt)" >&2; exit 3; }
"""

BALLAST = r"""
B=$(cat "$J/$ID.ballast" 2>/dev/null)
case "$B" in */.chaoskit-ballast-"$ID") ;; *) B="" ;; esac
"""

FULL_CHECK = FIND_FS + r"""
if [ "$(stat -c %d -- "$DIR")" = "$(stat -c %d /)" ] && [ "$ALLOW_ROOT" != 1 ]; then
  echo "$DIR is on the host's root filesystem: disk_full would fill / (allow_root_filesystem: true to do it anyway)" >&2
  exit 3
fi
[ -w "$MNT" ] || { echo "$MNT: not writable, no room for the ballast file" >&2; exit 3; }
"""

FULL_PREPARE = FULL_CHECK + r"""
if [ "$MNT" = / ]; then B="/.chaoskit-ballast-$ID"; else B="$MNT/.chaoskit-ballast-$ID"; fi
printf '%s\n' "$B" > "$J/$ID.ballast"
"""

# What to leave free: FREE bytes, or FREE_PCT percent of the filesystem's size; the space
# available to unprivileged writers (PostgreSQL, MySQL) is what counts (`stat -f` %a).
FULL_INJECT = BALLAST + r"""
[ -n "$B" ] || { echo "no ballast path in the journal" >&2; exit 3; }
set -- $(stat -f -c '%a %S %b' -- "$DIR")
avail=$(($1 * $2))
if [ -n "$FREE_PCT" ]; then keep=$(($3 * $2 / 100 * FREE_PCT)); else keep=$FREE; fi
want=$((avail - keep))
: > "$B"
# fallocate at once where it can; the last blocks of a filesystem may need room for the file's
# own extent tree (ext4), so else it leaves some slack and zeros fill what is left to the level
if [ "$want" -gt 0 ] && ! fallocate -l "$want" -- "$B" 2>/dev/null; then
  slack=4194304; [ "$want" -gt "$slack" ] || slack=$want
  fallocate -l "$((want - slack))" -- "$B" 2>/dev/null || : > "$B"
  set -- $(stat -f -c '%a %S' -- "$DIR")
  rest=$(($1 * $2 - keep))
  if [ "$rest" -gt 0 ]; then head -c "$rest" /dev/zero >> "$B" 2>/dev/null || true; fi
fi
mark_effect
set -- $(stat -f -c '%a %S' -- "$DIR")
echo "free_before=$avail ballast=$want free_after=$(($1 * $2))" > "$J/$ID.disk"
"""

FULL_REVERT = BALLAST + r"""
if [ -n "$B" ]; then rm -f -- "$B" || exit 3; fi
true
"""

FULL_ACTIVE = BALLAST + r"""
if [ -n "$B" ] && [ -e "$B" ]; then exit 0; fi
exit 1
"""

BLKIO = "/sys/fs/cgroup/blkio"

# The cgroup is ours (named after the fault id); its rules are written at staging, inert until the
# processes move in at the instant. Where they came from is kept to send them back.
SLOW_CHECK = FIND_FS + r"""
if [ ! -e "$BLKIO/blkio.throttle.write_bps_device" ]; then
  echo "no cgroup v1 blkio controller at $BLKIO (disk_slow needs it)" >&2; exit 3
fi
case "$DEV" in
  0:*|"") echo "$DIR is on $MNT, which has no block device (tmpfs or similar): nothing to throttle" >&2; exit 3 ;;
esac
"""

# The fault's cgroup sits under the one its first process came from (the host's own, where a
# host's processes are accounted together: the host metrics keep counting their I/O, since a
# parent's io_service_bytes_recursive holds its children's). That origin is journaled at staging;
# without it (the journal file lost) the cgroup is found by its name.
FAULT_CGROUP = r"""
fault_cgroup() {
  orig=$(cat "$J/$ID.cgroup" 2>/dev/null)
  case "$orig" in /*) ;; *) orig=/ ;; esac
  case "$orig" in */../*|*/..) orig=/ ;; esac
  CG="$BLKIO${orig%/}/chaoskit-$ID"
  [ -d "$CG" ] || [ -s "$J/$ID.cgroup" ] || {
    found=$(find "$BLKIO" -maxdepth 8 -type d -name "chaoskit-$ID" 2>/dev/null | head -n 1)
    [ -n "$found" ] && CG=$found; }
}
"""

SLOW_PREPARE = SLOW_CHECK + FAULT_CGROUP + r"""
record_pids
record_kids
first=$(awk 'NR == 1 { print $2 }' "$J/$ID.pids")
awk -F: '$2 ~ /(^|,)blkio(,|$)/ { print $3; exit }' "/proc/$first/cgroup" > "$J/$ID.cgroup"
fault_cgroup
mkdir -p -- "$CG" || exit 3
for rule in "read_bps_device $RBPS" "write_bps_device $WBPS" "read_iops_device $RIOPS" "write_iops_device $WIOPS"; do
  set -- $rule
  [ -n "${2:-}" ] || continue
  echo "$DEV $2" > "$CG/blkio.throttle.$1" 2>/dev/null || {
    echo "$DIR: the kernel refused a blkio throttle on device $DEV ($MNT)" >&2
    rmdir -- "$CG" 2>/dev/null; exit 3; }
done
"""

SLOW_INJECT = FAULT_CGROUP + r"""
fault_cgroup
load_pids || { record_pids; record_kids; load_pids; }
for p in $PIDS $KIDS; do echo "$p" > "$CG/cgroup.procs" 2>/dev/null; done
mark_effect
for p in $(descendants $PIDS $KIDS); do echo "$p" > "$CG/cgroup.procs" 2>/dev/null; done
"""

# Every process in our cgroup (those moved in and what they forked since) back where the first
# named process was, then the cgroup removed; the rules go with it.
SLOW_REVERT = FAULT_CGROUP + r"""
fault_cgroup
[ -d "$CG" ] || exit 0
back="$BLKIO${orig%/}"
[ -d "$back" ] || back=$BLKIO
i=0
while [ "$i" -lt 50 ]; do
  left=$(cat "$CG/cgroup.procs" 2>/dev/null)
  [ -z "$left" ] && break
  for p in $left; do echo "$p" > "$back/cgroup.procs" 2>/dev/null || echo "$p" > "$BLKIO/cgroup.procs" 2>/dev/null; done
  i=$((i + 1))
done
rmdir -- "$CG" 2>/dev/null || { sleep 0.2; rmdir -- "$CG"; } || exit 3
"""

SLOW_ACTIVE = FAULT_CGROUP + r"""
fault_cgroup
if [ -d "$CG" ] && [ -n "$(cat "$CG/cgroup.procs" 2>/dev/null)" ]; then exit 0; fi
exit 1
"""


def disk_dir(spec: DiskFullSpec | DiskSlowSpec | DataDirLostSpec, facts: HostFacts) -> str:
    """The directory whose filesystem the fault acts on, as the member declares it."""
    if spec.on == "wal" and facts.wal_dir:
        return facts.wal_dir
    if facts.data_dir:
        return facts.data_dir
    raise ValueError(f"{facts.host}: a {spec.kind} fault acts on the member's data directory: give the member "
                     "data_dir (and wal_dir where the WAL lives elsewhere) in the inventory")


def disk_full_scripts(fault_id: str, spec: DiskFullSpec, facts: HostFacts) -> FaultScripts:
    free = spec.free_bytes
    return FaultScripts(inject=FULL_INJECT, revert=FULL_REVERT, active=FULL_ACTIVE, prepare=FULL_PREPARE,
                        check=FULL_CHECK,
                        env={"DIR": disk_dir(spec, facts), "FREE": "" if free is None else str(free),
                             "FREE_PCT": spec.free.removesuffix("%") if free is None else "",
                             "ALLOW_ROOT": "1" if spec.allow_root_filesystem else "0"})


def disk_slow_scripts(fault_id: str, spec: DiskSlowSpec, facts: HostFacts) -> FaultScripts:
    names = process_names(spec.processes, facts, all_by_default=True)

    def rate(value: str | None) -> str:
        return "" if value is None else str(max(1, int(parse_rate(value))))

    return FaultScripts(inject=SLOW_INJECT, revert=SLOW_REVERT, active=SLOW_ACTIVE, prepare=SLOW_PREPARE,
                        check=SLOW_CHECK,
                        env={"DIR": disk_dir(spec, facts), "BLKIO": BLKIO, "PROCS": " ".join(names),
                             "RBPS": rate(spec.read_rate), "WBPS": rate(spec.write_rate),
                             "RIOPS": str(spec.read_iops or ""), "WIOPS": str(spec.write_iops or "")},
                        files=process_files(facts, names))


FAMILY = "disk"
FAULT_KINDS = (
    fault_kind("disk_full", {"findmnt", "fallocate", "stat"}, disk_full_scripts, checked=True),
    fault_kind("disk_slow", {"findmnt", "stat", "blkio"}, disk_slow_scripts, checked=True,
               instead="disk_slow needs the cgroup v1 blkio controller; a cgroup v2-only host is not supported yet"),
)
