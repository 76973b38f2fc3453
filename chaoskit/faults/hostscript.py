"""How a fault's shell reaches its host without any value becoming code.

A fault kind produces `FaultScripts`: three bodies (inject, revert, is-active) that are constant
text (module-level strings, never formatted with data), plus the data they act on:
- `env`: scalar values, written to the journal as `NAME='value'` lines (shlex-quoted) and sourced;
- `files`: lists (one peer address per line, one file per process with its pid file, comm, exe,
  start and stop commands on separate lines), read with `read -r` / `sed`.
Every value is validated at the boundary first (no control characters, strict patterns), so a
value can never end a line, and the journal travels to the host base64-encoded (`journal.py`):
nothing a value holds can end a heredoc or a quote.

`LIB` is the shell prelude every script sources: pid checks (a stale pid file must not get a
signal), process trees, the protected dead-man groups.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from chaoskit.inventory.models import ProcessRef
from chaoskit.validation import no_control

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,40}$")
_FILE_SUFFIX = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")
CODE_FILES = ("proxy.py",)  # our own source code (may hold tabs); everything else is data


@dataclass(frozen=True)
class HostFacts:
    """What the scripts need to know about the target host."""

    host: str
    processes: dict[str, ProcessRef]  # name -> pid file / comm / exe / start / stop (the member's)
    service: str | None = None
    systemd: bool = False
    peer_addresses: tuple[str, ...] = ()
    # the control node is a peer too: the host adds the address chaoskit's SSH comes from
    peer_control: bool = False
    # SSH endpoints (address, port) of hosts reached through this one as a jump host: a network
    # fault here must not cut the controller's path to them
    exempt: tuple[tuple[str, int], ...] = ()
    db_socket: str | None = None  # the member's database server socket (members[].db_socket)
    data_dir: str | None = None  # the member's data directory (members[].data_dir)
    wal_dir: str | None = None  # its WAL directory, where that is elsewhere (members[].wal_dir)


@dataclass(frozen=True)
class FaultScripts:
    """`prepare` runs when the fault is staged (pid checks, process trees, rule files: everything
    that can happen before the instant); `inject` is the instant itself and calls `mark_effect`
    right after the decisive action; `active` exits 0 while the fault is in effect, 1 once it is
    not, anything else: unknown. `check`, where a kind has one, is read-only and exits 3 with the
    reason where the host cannot carry the fault (the filesystem under a member's data is the
    root one, has no block device): preflight runs it, so the drill is refused before it starts."""

    inject: str
    revert: str
    active: str
    prepare: str = ""
    check: str = ""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def render_env(env: dict[str, str]) -> str:
    """`NAME='value'` lines; names are fixed identifiers, values checked and quoted."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"bad script variable name {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"script variable {name} must be a string, got {type(value).__name__}")
        no_control(value)
        lines.append(f"{name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def check_files(files: dict[str, str]) -> None:
    for suffix, content in files.items():
        if not _FILE_SUFFIX.match(suffix):
            raise ValueError(f"bad journal file name {suffix!r}")
        if suffix in CODE_FILES:
            continue
        for line in content.splitlines():
            no_control(line)


def process_names(wanted: tuple[str, ...], facts: HostFacts, all_by_default: bool) -> list[str]:
    """The processes a fault acts on: those it names, else all the host declares (or the first),
    each one declared there; refused naming what is missing and what is known."""
    if wanted:
        names = list(wanted)
    elif all_by_default:
        names = list(facts.processes)
    else:
        names = list(facts.processes)[:1]
    missing = [n for n in names if n not in facts.processes]
    if missing or not names:
        known = ", ".join(facts.processes) or "none"
        raise ValueError(f"{facts.host}: no process {', '.join(missing) or '(any)'} in the inventory (known: {known})")
    return names


def process_files(facts: HostFacts, names: list[str]) -> dict[str, str]:
    """One journal file per process: pid file, comm, exe, start, stop, systemd unit (one per line,
    may be empty; the pid comes from the pid file, else from the unit's main pid)."""
    out = {}
    for name in names:
        ref = facts.processes[name]
        out[f"proc.{name}"] = "\n".join([ref.pid_file or "", ref.comm or "", ref.exe or "", ref.start or "",
                                        ref.stop or "", ref.unit or ""]) + "\n"
    return out


def lines_file(values: list[str] | tuple[str, ...]) -> str:
    return "".join(f"{v}\n" for v in values)


# The prelude of every script. $J is the journal directory and $ID the fault id: both derived from
# the script's own path ($0), never from data.
HEADER = r"""#!/bin/sh
LC_ALL=C; export LC_ALL
J=${0%/*}; ID=${0##*/}; ID=${ID%.*}
. "$J/$ID.lib"
. "$J/$ID.env"
"""

LIB = r"""
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$1/status" 2>/dev/null; }
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'; }
# End process groups of our own (relays, stress-ng): SIGTERM, up to 1 s to go, then SIGKILL and up
# to 1 s more (a zombie counts as gone). A revert never waits longer on a process that ignores or
# is slow to act on SIGTERM: the dead-man's promise (planned end + margin) includes this wait.
end_groups() {
  for _g in "$@"; do kill -TERM "-$_g" 2>/dev/null; done
  _i=0
  while [ "$_i" -le 20 ]; do
    _up=""
    for _g in "$@"; do if group_alive "$_g"; then _up="$_up $_g"; fi; done
    [ -z "$_up" ] && return 0
    if [ "$_i" = 10 ]; then for _g in $_up; do kill -KILL "-$_g" 2>/dev/null; done; fi
    sleep 0.1; _i=$((_i + 1))
  done
  return 1
}
# Up to 5 s until each pid given is gone (or a zombie): a SIGKILL takes effect when its process
# has exited (every thread torn down, out of the kernel), not when it is sent. 1 if one is left.
wait_gone() {
  _i=0
  while [ "$_i" -lt 50 ]; do
    _up=""
    for _p in "$@"; do if alive "$_p"; then _up=1; fi; done
    [ -z "$_up" ] && return 0
    sleep 0.1; _i=$((_i + 1))
  done
  return 1
}
family_of() { case "$1" in *:*) echo 6 ;; *) echo 4 ;; esac; }
ipt_for() { if [ "$1" = 6 ]; then echo ip6tables; else echo iptables; fi; }
# wall-clock time without a fork where the shell is bash (EPOCHREALTIME): at the instant every fork
# waits for a CPU, and on a loaded host that is milliseconds
now() { if [ -n "${EPOCHREALTIME:-}" ]; then _now=$EPOCHREALTIME; else _now=$(date +%s.%N); fi; }
mark_effect() { now; t_eff=$_now; }
start_time_of() {
  _st=""
  [ -r "/proc/$1/stat" ] || return 1
  read -r _l < "/proc/$1/stat" || return 1
  _l=${_l##*) }
  set -- $_l
  [ "$#" -ge 20 ] || return 1
  shift 19
  _st=$1
}
ancestors() {
  ps -e -o pid=,ppid= | awk -v me="$$" '{ p[$1] = $2 } END { x = me; while (x > 1 && (x in p)) { print x; x = p[x] } }'
}
proc_field() { sed -n "${2}p" "$J/$ID.proc.$1" 2>/dev/null; }
pid_from_file() { head -n 1 -- "$1" 2>/dev/null | tr -dc '0-9' | cut -c1-10; }
# a process's pid: its pid file's, else its systemd unit's main pid (0: none)
pid_of() {
  _f=$(proc_field "$1" 1)
  if [ -n "$_f" ]; then pid_from_file "$_f"; return; fi
  _u=$(proc_field "$1" 6)
  [ -n "$_u" ] || return 0
  _p=$(systemctl show -p MainPID --value -- "$_u" 2>/dev/null | tr -dc '0-9' | cut -c1-10)
  [ "$_p" = 0 ] || echo "$_p"
}
# why pid $2 is not the program the inventory names for process $1 (comm, exe); nothing when it is
not_the_program() {
  _wc=$(proc_field "$1" 2); _we=$(proc_field "$1" 3)
  if [ -n "$_wc" ]; then
    _got=$(cat "/proc/$2/comm" 2>/dev/null)
    if [ "$_got" != "$_wc" ]; then echo "is '$_got', not '$_wc'"; return; fi
  fi
  if [ -n "$_we" ]; then
    _got=$(readlink "/proc/$2/exe" 2>/dev/null)
    if [ "$_got" != "$_we" ]; then echo "runs '$_got', not '$_we'"; fi
  fi
}
checked_pid() {
  pf=$(proc_field "$1" 1); [ -n "$pf" ] || pf="unit $(proc_field "$1" 6)"
  cp=$(pid_of "$1")
  if [ -z "$cp" ]; then echo "$1: no pid in $pf" >&2; return 3; fi
  if [ "$cp" -le 1 ]; then echo "$1: refusing pid $cp from $pf (pid <= 1)" >&2; return 3; fi
  if ! alive "$cp"; then echo "$1: pid $cp from $pf is not running (stale pid file?)" >&2; return 3; fi
  for a in $MY_ANCESTORS; do
    if [ "$a" = "$cp" ]; then echo "$1: refusing pid $cp from $pf: an ancestor of chaoskit's own shell" >&2; return 3; fi
  done
  why=$(not_the_program "$1" "$cp")
  if [ -n "$why" ]; then echo "$1: pid $cp from $pf $why" >&2; return 3; fi
  echo "$cp"
}
protected_groups() { cat "$J"/*.deadman.pid 2>/dev/null | tr -dc '0-9\n' | tr '\n' ' '; }
descendants() {
  ps -e -o pid=,ppid=,pgid= | awk -v roots="$*" -v prot="$(protected_groups)" -v me="$$" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) root[r[i]] = 1
            n = split(prot, q, " "); for (i = 1; i <= n; i++) keep[q[i]] = 1 }
    { parent[$1] = $2; group[$1] = $3 }
    END { for (p in parent) {
            if (p in root || p == me || group[p] in keep) continue
            x = parent[p]
            while (x in parent && !(x in root) && x > 1) x = parent[x]
            if (x in root) print p } }' | tr '\n' ' '
}
# "name pid starttime" per named process (all checks), then "child pid starttime" per descendant
record_pids() {
  MY_ANCESTORS=$(ancestors | tr '\n' ' ')
  : > "$J/$ID.pids.tmp"
  for n in $PROCS; do
    rp=$(checked_pid "$n") || return 3
    start_time_of "$rp" || { echo "$n: pid $rp vanished" >&2; return 3; }
    echo "$n $rp $_st" >> "$J/$ID.pids.tmp"
  done
  mv -f "$J/$ID.pids.tmp" "$J/$ID.pids"
}
record_kids() {
  load_pids || return 3
  for k in $(descendants $PIDS); do
    start_time_of "$k" && echo "child $k $_st" >> "$J/$ID.pids"
  done
  true
}
# At the instant, builtins only: the named processes must be the ones recorded (same start time),
# else 1 (record again); a child that exited is dropped, never signalled by a reused pid.
load_pids() {
  PIDS=""; KIDS=""
  [ -s "$J/$ID.pids" ] || return 1
  while read -r ln lp ls; do
    if start_time_of "$lp" && [ "$_st" = "$ls" ]; then
      if [ "$ln" = child ]; then KIDS="$KIDS $lp"; else PIDS="$PIDS $lp"; fi
    elif [ "$ln" != child ]; then
      return 1
    fi
  done < "$J/$ID.pids"
  [ -n "$PIDS" ]
}
all_recorded() { cut -d' ' -f2 "$J/$ID.pids" 2>/dev/null | tr -dc '0-9\n' | tr '\n' ' '; }
# a fault starts again only what it recorded at staging (ONLY_RECORDED): a process that was not
# running when the fault was staged (a refused staging, a service an operator stopped) is left as
# it was; the restart action (no ONLY_RECORDED) starts every declared process not running
recorded() { [ -z "${ONLY_RECORDED:-}" ] || grep -q "^$1 " "$J/$ID.pids" 2>/dev/null; }
# the named process runs: its pid (file or unit) is alive, is what the inventory says it is
# (comm, exe), and is not another process that took the pid of the one this fault ended (same pid
# as recorded, other start time): pids are reused, on a busy host within seconds
running_now() {
  _rp=$(pid_of "$1")
  [ -n "$_rp" ] && alive "$_rp" || return 1
  [ -z "$(not_the_program "$1" "$_rp")" ] || return 1
  _rec=$(awk -v n="$1" '$1 == n { print $2, $3; exit }' "$J/$ID.pids" 2>/dev/null)
  if [ -n "$_rec" ] && [ "${_rec%% *}" = "$_rp" ]; then
    start_time_of "$_rp" && [ "$_st" = "${_rec#* }" ] || return 1
  fi
  return 0
}
# clock ticks since boot now, the unit of a process's start time (start_time_of)
ticks_now() { awk -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" '{ printf "%d\n", $1 * hz }' /proc/uptime; }
# the named process's pid (file or unit) is alive and started at or after tick $2: what the start
# command just started, whatever program it is yet
started_since() {
  _rp=$(pid_of "$1")
  [ -n "$_rp" ] && alive "$_rp" && start_time_of "$_rp" && [ "$_st" -ge "$(($2 - 1))" ]
}
# Start each recorded process that is not running and wait (up to 60 s) until it runs. A process
# its start command started that is still not the inventory's program after 3 s is a launcher
# waiting for something else (the lab's repmgrd waits for its PostgreSQL, which only a rejoin
# starts): not waited for; said on stderr, and the revert's check still finds it pending.
restart_missing() {
  for n in $PROCS; do
    recorded "$n" || continue
    st=$(proc_field "$n" 4); [ -n "$st" ] || continue
    if ! running_now "$n"; then
      t0=$(ticks_now)
      sh -c "$st" </dev/null >/dev/null 2>&1
      i=0; w=0
      while [ "$i" -lt 600 ]; do
        if running_now "$n"; then break; fi
        if started_since "$n" "$t0"; then w=$((w + 1)); else w=0; fi
        if [ "$w" -ge 30 ]; then
          echo "$n: started (pid $_rp) but it $(not_the_program "$n" "$_rp") yet: waiting for something else?" >&2
          break
        fi
        sleep 0.1; i=$((i + 1))
      done
    fi
  done
}
restart_pending() {
  for n in $PROCS; do
    recorded "$n" || continue
    st=$(proc_field "$n" 4); [ -n "$st" ] || continue
    if ! running_now "$n"; then return 0; fi
  done
  return 1
}
"""
