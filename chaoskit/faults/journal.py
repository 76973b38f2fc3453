"""The host-side journal: every fault is written down on its host, with its revert script and
deadlines, *before* it is applied, and a detached dead-man reverts it there if nobody else does.

Layout on the host, `J=/var/lib/chaoskit/faults/<uname -n>` (per host even where hosts share a
file system), root-owned, mode 0700:
- `$ID.json` what and who (the controller's host, pid and process start time);
- `$ID.env`, `$ID.proc.*`, `$ID.peers`, `$ID.exempt`, ...: the fault's data (see hostscript.py);
- `$ID.lib`, `$ID.inject`, `$ID.revert`, `$ID.active`, `$ID.deadman`: constant scripts;
- `$ID.deadline`: host time in ms when the dead-man reverts: the outer bound (TTL from staging),
  shortened to the planned end + margin when a fault with a duration takes effect;
- `$ID.state` staged | applying | active; `$ID.pids` the processes a fault acted on;
- `$ID.deadman.pid` the dead-man's process group (never frozen or killed by a process fault);
- `done/$ID`: host time and who reverted it (controller, deadman, recover): the evidence's
  `t_reverted` is the host's own, also when the dead-man did it; `done/$ID.log` beside it when
  the dead-man needed more than one attempt (each attempt's time and what the failed ones said).

Two steps: `stage_script` sends everything (base64, so no value can end a heredoc or a quote;
each file checked against its SHA-256 after writing) and arms the dead-man; `trigger_script` is
the instant: one `sh` on the open channel. Revert fails closed: an unknown state is reported as
unknown, never as reverted; the dead-man retries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

from chaoskit.faults.hostscript import HEADER, LIB, FaultScripts, check_files, render_env
from chaoskit.validation import is_fault_id

ROOT = "/var/lib/chaoskit"
JOURNAL_ROOT = f"{ROOT}/faults"
JOURNAL_DIR = f'{JOURNAL_ROOT}/"$(uname -n)"'

INJECT_WRAPPER = HEADER + r"""set -e
[ -f "$J/$ID.deadline" ] || { echo "fault $ID: no journal entry (reverted already?)" >&2; exit 4; }
t_eff=""
now; t_start=$_now
@BODY@
now; t_done=$_now
[ -n "$t_eff" ] || t_eff=$t_done
echo active > "$J/$ID.state"
echo "applied $t_start $t_eff $t_done"
if [ -n "${PLANNED_MS:-}" ]; then
  ns=${t_eff#*.}000000
  ms=$(echo "$ns" | cut -c1-3)
  pl=$(( ${t_eff%.*} * 1000 + 1$ms - 1000 + PLANNED_MS ))
  read -r dl < "$J/$ID.deadline"
  if [ "$pl" -lt "$dl" ]; then echo "$pl" > "$J/$ID.deadline.tmp"; mv -f "$J/$ID.deadline.tmp" "$J/$ID.deadline"; fi
fi
"""

PREPARE_WRAPPER = HEADER + "set -e\n@BODY@\n"

REVERT_WRAPPER = HEADER + r"""by=${1:-controller}
if ! mkdir "$J/$ID.lock" 2>/dev/null; then
  i=0
  while [ -d "$J/$ID.lock" ] && [ "$i" -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
  if [ -f "$J/done/$ID" ]; then echo "reverted $(cat "$J/done/$ID")"; exit 0; fi
  mkdir "$J/$ID.lock" 2>/dev/null || { echo "fault $ID: another revert holds the lock" >&2; exit 5; }
fi
if [ -f "$J/done/$ID" ] && [ ! -f "$J/$ID.active" ]; then rmdir "$J/$ID.lock"; echo "reverted $(cat "$J/done/$ID")"; exit 0; fi
# the kind's body in a subshell: an `exit` in it (nothing to undo, or it could not) ends the body
# only; the is-active check below judges, and the lock is always released
(
@BODY@
)
if [ ! -f "$J/$ID.active" ]; then echo "fault $ID: no is-active check: state unknown" >&2; rmdir "$J/$ID.lock"; exit 5; fi
sh "$J/$ID.active" >/dev/null 2>&1 && rc=0 || rc=$?
if [ "$rc" = 0 ]; then echo "fault $ID is still in effect after its revert" >&2; rmdir "$J/$ID.lock"; exit 1; fi
if [ "$rc" != 1 ]; then echo "fault $ID: is-active check failed ($rc): state unknown" >&2; rmdir "$J/$ID.lock"; exit 5; fi
t=$(date +%s.%N)
mkdir -p "$J/done"
echo "$t $by" > "$J/done/$ID.tmp" && mv -f "$J/done/$ID.tmp" "$J/done/$ID"
if [ "$by" != deadman ]; then
  dg=$(tr -dc '0-9' < "$J/$ID.deadman.pid" 2>/dev/null)
  if [ -n "$dg" ]; then kill -TERM "-$dg" 2>/dev/null; fi
fi
if grep -q -v ' attempt 1$' "$J/$ID.deadman.log" 2>/dev/null; then mv -f "$J/$ID.deadman.log" "$J/done/$ID.log"; fi
rm -rf "$J/$ID".*
echo "reverted $t $by"
"""

ACTIVE_WRAPPER = HEADER + "@BODY@\n"

# The dead-man: waits for the deadline (re-read every poll: a fault that takes effect shortens it to
# its planned end), then reverts, retrying; exits as soon as the journal entry is gone.
DEADMAN = r"""#!/bin/sh
J=${0%/*}; ID=${0##*/}; ID=${ID%.*}
while :; do
  [ -f "$J/$ID.deadline" ] || exit 0
  dl=$(cat "$J/$ID.deadline" 2>/dev/null | tr -dc '0-9')
  [ -n "$dl" ] || dl=0
  now=$(date +%s%3N)
  rem=$((dl - now))
  [ "$rem" -le 0 ] && break
  if [ "$rem" -gt 1500 ]; then sleep 1; else sleep 0.2; fi
done
n=0
while [ -f "$J/$ID.revert" ] && [ "$n" -lt 10 ]; do
  echo "$(date +%s.%N) attempt $((n + 1))" >> "$J/$ID.deadman.log"
  sh "$J/$ID.revert" deadman >/dev/null 2>>"$J/$ID.deadman.log" && exit 0
  n=$((n + 1))
  if [ "$n" -le 3 ]; then sleep 0.5; else sleep 3; fi
done
"""

PREPARE = r"""R=@ROOT@; JR=$R/faults; J=$JR/$(uname -n)
for d in "$R" "$JR" "$J"; do
  if [ -L "$d" ]; then echo "$d is a symlink: refusing to journal there" >&2; exit 3; fi
  [ -d "$d" ] || mkdir -m 0700 "$d"
done
chown 0:0 "$R" "$JR" "$J" && chmod 0711 "$R" && chmod 0700 "$JR" "$J"
[ "$(stat -c '%u %a' "$J")" = "0 700" ] || { echo "journal $J is not root's with mode 0700" >&2; exit 3; }
find "$J/done" -type f -mmin +1440 -delete 2>/dev/null || true"""


def _check_id(fault_id: str) -> str:
    if not is_fault_id(fault_id):
        raise ValueError(f"not a fault id: {fault_id!r}")
    return fault_id


def journal_files(fault_id: str, scripts: FaultScripts, meta: dict, planned_ms: int | None) -> dict[str, str]:
    """Every journal file of a fault: data (env, lists), constant scripts, the meta record."""
    _check_id(fault_id)
    check_files(scripts.files)
    env = dict(scripts.env)
    if planned_ms is not None:
        env["PLANNED_MS"] = str(int(planned_ms))
    files = {
        "env": render_env(env),
        "lib": LIB,
        "inject": INJECT_WRAPPER.replace("@BODY@", scripts.inject),
        "revert": REVERT_WRAPPER.replace("@BODY@", scripts.revert),
        "active": ACTIVE_WRAPPER.replace("@BODY@", scripts.active),
        "prepare": PREPARE_WRAPPER.replace("@BODY@", scripts.prepare),
        "deadman": DEADMAN,
        **scripts.files,
        "json": json.dumps(meta, sort_keys=True, separators=(",", ":")) + "\n",
    }
    for name in ("env", "peers", "exempt"):
        files.setdefault(name, "")
    return files


def _write_files(fault_id: str, files: dict[str, str]) -> list[str]:
    """Shell that writes each file from base64 (alphabet A-Z a-z 0-9 + / =: nothing in it can end
    a quote) and then checks every file against its SHA-256."""
    out = ['w() { printf \'%s\' "$2" | base64 -d > "$J/$ID.$1.tmp" && mv -f "$J/$ID.$1.tmp" "$J/$ID.$1"; }']
    sums = []
    for name, content in files.items():
        data = content.encode()
        out.append(f"w {name} {base64.b64encode(data).decode()}")
        sums.append(f"'{hashlib.sha256(data).hexdigest()}  {fault_id}.{name}'")
    out.append(f'(cd "$J" && printf \'%s\\n\' {" ".join(sums)} | sha256sum -c --quiet --status) || '
               '{ echo "journal write check failed on $(uname -n)" >&2; exit 3; }')
    return out


def _prepare(root: str) -> str:
    if not root.startswith("/") or any(c in root for c in " '\"$`\\"):
        raise ValueError(f"bad journal root {root!r}")
    return PREPARE.replace("@ROOT@", root)


def journal_dir(root: str = ROOT) -> str:
    return f'{root}/faults/"$(uname -n)"'


def stage_script(fault_id: str, files: dict[str, str], ttl_s: float, root: str = ROOT) -> str:
    """Journal a fault and arm its dead-man (outer bound `ttl_s` from now). Prints `staged`."""
    _check_id(fault_id)
    ttl_ms = max(1000, round(ttl_s * 1000))
    return "\n".join([
        "(", "set -e", "umask 077", _prepare(root), f"ID={fault_id}",
        *_write_files(fault_id, files),
        f'echo $(( $(date +%s%3N) + {ttl_ms} )) > "$J/$ID.deadline"',
        'echo staged > "$J/$ID.state"',
        'setsid sh "$J/$ID.deadman" </dev/null >/dev/null 2>&1 &',
        'echo $! > "$J/$ID.deadman.pid"',
        'if ! sh "$J/$ID.prepare"; then sh "$J/$ID.revert" controller >/dev/null 2>&1; exit 3; fi',
        'if command -v bash >/dev/null 2>&1; then sh=bash; else sh=sh; fi',
        'if command -v chrt >/dev/null 2>&1 && chrt -f 10 true 2>/dev/null; then sh="rt-$sh"; fi',
        'echo "staged $J $sh"', ")"])


_HOST_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,300}$")
# The instant's interpreter: bash where present (timestamps without a fork), at a real-time
# priority where chrt works (the inject script is short and bounded; on a loaded host it would
# otherwise queue behind the load for a CPU, milliseconds before the fault takes effect).
_SHELLS = {"sh": "sh", "bash": "bash", "rt-sh": "chrt -f 10 sh", "rt-bash": "chrt -f 10 bash"}


def parse_staged(stdout: str) -> tuple[str, str]:
    """(journal directory on the host, shell to trigger with) from the staging script's answer."""
    for line in reversed(stdout.splitlines()):
        words = line.split()
        if len(words) == 3 and words[0] == "staged" and _HOST_PATH.match(words[1]) and words[2] in _SHELLS:
            return words[1], words[2]
    return "", "sh"


def trigger_script(fault_id: str, root: str = ROOT, jdir: str = "", shell: str = "sh") -> str:
    """The instant: apply a staged fault. Prints `applied <host time before> <effect> <end>`; if
    applying fails, the revert runs at once and the command fails. With the journal directory and
    shell the staging reported, it is one exec of the shell and no other fork before the action."""
    _check_id(fault_id)
    if jdir and _HOST_PATH.match(jdir) and shell in _SHELLS:
        return (f"{_SHELLS[shell]} {jdir}/{fault_id}.inject || {{ rc=$?; sh {jdir}/{fault_id}.revert controller "
                ">/dev/null 2>&1; (exit $rc); }")
    return (f'(J={journal_dir(root)}; if sh "$J/{fault_id}.inject"; then exit 0; else rc=$?; fi; '
            f'sh "$J/{fault_id}.revert" controller >/dev/null 2>&1; exit "$rc")')


def revert_script(fault_id: str, by: str = "controller", root: str = ROOT) -> str:
    """Revert one journaled fault. Prints `reverted <host time> <by>`, or `already <host time> <by>`
    when it had been reverted before (the host's record); exit 4 when this host never had it, 1
    still in effect, 5 unknown. A revert that races another (the dead-man firing at the planned end
    as the controller heals) ends with the winner's record: the loser may find the journal entry
    removed under it (its script already open, or its prelude gone), and then the `done` record
    the winner wrote before removing the entry decides, never the loser's failure."""
    _check_id(fault_id)
    if by not in ("controller", "recover"):
        raise ValueError(by)
    return (f'(J={journal_dir(root)}; ID={fault_id}; rc=4; '
            f'if [ -f "$J/$ID.revert" ]; then sh "$J/$ID.revert" {by} && exit 0 || rc=$?; fi; '
            'if [ -f "$J/done/$ID" ] && [ ! -f "$J/$ID.active" ]; then echo "already $(cat "$J/done/$ID")"; exit 0; fi; '
            '[ "$rc" = 4 ] && echo "no journaled fault $ID here" >&2; exit "$rc")')


def active_script(fault_id: str, root: str = ROOT) -> str:
    """Exit 0 in effect, 1 not (or never journaled here), 2+ unknown."""
    _check_id(fault_id)
    return (f'(J={journal_dir(root)}; ID={fault_id}; '
            '[ -f "$J/$ID.active" ] || { [ -f "$J/$ID.json" ] && exit 2; exit 1; }; exec sh "$J/$ID.active")')


def oneshot_script(scripts: FaultScripts, body: str, root: str = ROOT) -> str:
    """Run `body` once with a fault family's data and prelude, in a private temporary directory
    (the restart action: not a fault, nothing to journal)."""
    files = {"env": render_env(scripts.env), "lib": LIB, "run": HEADER + body + "\n", **scripts.files}
    check_files(scripts.files)
    return "\n".join([
        "(", "set -e", "umask 077", _prepare(root), 'J=$(mktemp -d "$JR/run.XXXXXXXX")', "ID=x",
        *_write_files("x", files), 'rc=0; sh "$J/x.run" || rc=$?', 'rm -rf "$J"', 'exit "$rc"', ")"])


def list_script(root: str = ROOT) -> str:
    return LIST_SCRIPT.replace("@J@", journal_dir(root))


LIST_SCRIPT = "\n".join([
    "(", "J=@J@", "now=$(date +%s%3N)",
    'for f in "$J"/*.json; do [ -f "$f" ] || continue; id=${f##*/}; id=${id%.json}',
    # reverted and verified (its `done` record is written before its files are removed): not journaled
    '  [ -f "$J/done/$id" ] && continue',
    '  if [ -f "$J/$id.active" ]; then sh "$J/$id.active" >/dev/null 2>&1 && rc=0 || rc=$?; else rc=9; fi',
    '  printf "%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n" "$id" "$(cat "$J/$id.deadline" 2>/dev/null)" "$now" "$rc" '
    '"$(cat "$J/$id.state" 2>/dev/null)" "$(tr -d "\\t\\n" < "$f")"',
    "done", ")"])


def parse_list(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        parts = line.split("\t", 5)
        if len(parts) != 6:
            continue
        fid, deadline, now, rc, state, meta = parts
        try:
            data = json.loads(meta)
        except ValueError:
            data = {"unreadable": meta[:200]}
        active: bool | str = True if rc == "0" else False if rc == "1" else "unknown"
        remaining = (int(deadline) - int(now)) / 1000 if deadline.isdigit() and now.isdigit() else None
        data.update({"id": fid, "active": active, "state": state or "unknown",
                     "remaining_s": round(remaining, 1) if remaining is not None else None})
        out.append(data)
    return out


def parse_applied(stdout: str) -> tuple[float, float, float]:
    """Host times: before the fault's commands ran, right after its decisive action, at the end."""
    for line in reversed(stdout.splitlines()):
        words = line.split()
        if len(words) == 4 and words[0] == "applied":
            return float(words[1]), float(words[2]), float(words[3])
    raise ValueError(f"no applied line in {stdout[-200:]!r}")


def parse_reverted(stdout: str) -> tuple[float, str] | None:
    """(host time of the revert, who did it) from `reverted <t> <by>` (just now) or
    `already <t> <by>` (earlier, from the host's record)."""
    for line in reversed(stdout.splitlines()):
        words = line.split()
        if len(words) == 3 and words[0] in ("reverted", "already"):
            return float(words[1]), words[2]
    return None
