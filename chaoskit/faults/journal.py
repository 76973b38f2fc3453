"""The host-side journal: every fault is written down on its host, with its revert script and
deadline, *before* it is applied, and a detached dead-man process reverts it at the deadline.

Layout on the host (`J=/var/lib/chaoskit/faults/<uname -n>`, per host even where hosts share
a file system): `$ID.json` (what and who), `$ID.deadline` (host epoch), `$ID.inject`,
`$ID.revert` (idempotent; verifies with `$ID.active`, then removes the journal entry),
`$ID.active` (exit 0 while in effect), `$ID.deadman` (process group of the dead-man),
`$ID.pids` (processes a process fault acted on).

Everything is sent as one script through the host's persistent root shell, wrapped in a
subshell so that a failing step can never end that shell.
"""

from __future__ import annotations

import json
import shlex

from chaoskit.faults.kinds import FaultScripts

JOURNAL_ROOT = "/var/lib/chaoskit/faults"
JOURNAL_DIR = f'{JOURNAL_ROOT}/"$(uname -n)"'
_EOF = "CHAOSKIT_EOF"


def _heredoc(path: str, body: str) -> str:
    return f"cat > {path} <<'{_EOF}'\n{body}\n{_EOF}"


def _header(fault_id: str) -> str:
    return f"J={JOURNAL_DIR}; ID={shlex.quote(fault_id)}"


def inject_script(fault_id: str, scripts: FaultScripts, meta: dict, ttl: float) -> str:
    """Journal, arm the dead-man, apply; print the host times just before and just after applying.
    If applying fails, the revert runs at once and the script fails."""
    header = _header(fault_id)
    revert = "\n".join([
        "#!/bin/sh", header, scripts.revert,
        'if [ "$1" != deadman ]; then pg=$(cat "$J/$ID.deadman" 2>/dev/null); '
        '[ -n "$pg" ] && kill -TERM "-$pg" 2>/dev/null; fi',
        'if sh "$J/$ID.active"; then echo "fault $ID is still in effect after its revert" >&2; exit 1; fi',
        'rm -rf "$J/$ID".*', "date +%s.%N"])
    # timestamps bracket the application: the fault took effect between the two
    inject = "\n".join(["#!/bin/sh", "set -e", header, "date +%s.%N", scripts.inject, "date +%s.%N"])
    active = "\n".join(["#!/bin/sh", header, scripts.active])
    ttl_s = max(1, round(ttl))
    return "\n".join([
        "(", header, 'mkdir -p "$J"',
        _heredoc('"$J/$ID.json"', json.dumps(meta, sort_keys=True)),
        _heredoc('"$J/$ID.revert"', revert),
        _heredoc('"$J/$ID.active"', active),
        _heredoc('"$J/$ID.inject"', inject),
        f'echo $(( $(date +%s) + {ttl_s} )) > "$J/$ID.deadline"',
        f"setsid sh -c 'sleep {ttl_s}; exec sh \"$0/$1.revert\" deadman' \"$J\" \"$ID\""
        ' </dev/null >/dev/null 2>&1 &',
        'echo $! > "$J/$ID.deadman"',
        'if ! sh "$J/$ID.inject"; then sh "$J/$ID.revert" >/dev/null 2>&1; exit 3; fi',
        ")"])


def revert_script(fault_id: str) -> str:
    """Revert one journaled fault; exit 4 when this host has no such fault."""
    return "\n".join(["(", _header(fault_id),
                      '[ -f "$J/$ID.revert" ] || { echo "no journaled fault $ID here" >&2; exit 4; }',
                      'sh "$J/$ID.revert"', ")"])


def active_script(fault_id: str) -> str:
    return "\n".join(["(", _header(fault_id), '[ -f "$J/$ID.active" ] && sh "$J/$ID.active"', ")"])


LIST_SCRIPT = "\n".join([
    "(", f"J={JOURNAL_DIR}", 'now=$(date +%s)',
    'for f in "$J"/*.json; do [ -f "$f" ] || continue; id=$(basename "$f" .json);',
    '  if sh "$J/$id.active" >/dev/null 2>&1; then act=1; else act=0; fi;',
    '  printf "%s\\t%s\\t%s\\t%s\\t%s\\n" "$id" "$(cat "$J/$id.deadline" 2>/dev/null)" "$now" "$act" "$(cat "$f")";',
    "done", ")"])


def parse_list(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        parts = line.split("\t", 4)
        if len(parts) != 5:
            continue
        fid, deadline, now, act, meta = parts
        try:
            data = json.loads(meta)
        except ValueError:
            data = {"id": fid, "unreadable": meta[:200]}
        data.update({"id": fid, "active": act == "1",
                     "remaining_s": (int(deadline) - int(now)) if deadline.isdigit() and now.isdigit() else None})
        out.append(data)
    return out
