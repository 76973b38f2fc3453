"""Replication faults of MySQL/MariaDB: a replica's threads stopped and started again, through the
server's own socket as root on its host (the client is `mariadb`, else `mysql`). The socket path
is data (env); the statements are fixed text chosen by the spec's `thread`."""

from __future__ import annotations

from chaoskit.faults.hostscript import FaultScripts, HostFacts
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.spec import ReplicaStopSpec

CLIENT = r"""
if command -v mariadb >/dev/null 2>&1; then cli=mariadb; else cli=mysql; fi
q() { "$cli" --socket="$SOCKET" -uroot -N -B -e "$1"; }
"""

STATEMENTS = {"sql": ("STOP SLAVE SQL_THREAD", "START SLAVE SQL_THREAD", "Slave_SQL_Running"),
              "io": ("STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD", "Slave_IO_Running"),
              "all": ("STOP SLAVE", "START SLAVE", "Slave_SQL_Running")}

INJECT = CLIENT + r"""
q "SHOW SLAVE STATUS" | grep -q . || { echo "$SOCKET: not a replica (no SHOW SLAVE STATUS row)" >&2; exit 3; }
q "$STOP" || exit 3
mark_effect
"""

# a replica promoted meanwhile (its replication reset by the HA manager) has nothing to start
REVERT = CLIENT + r"""
rows=$(q "SHOW SLAVE STATUS") || exit 3
[ -z "$rows" ] || q "$START"
"""

ACTIVE = CLIENT + r"""
status=$("$cli" --socket="$SOCKET" -uroot -e "SHOW SLAVE STATUS\G" 2>/dev/null) || exit 2
state=$(printf '%s\n' "$status" | sed -n "s/^ *$FIELD: //p")
case "$state" in
  No) exit 0 ;;
  "") exit 1 ;;
  *) exit 1 ;;
esac
"""


def replica_stop_scripts(fault_id: str, spec: ReplicaStopSpec, facts: HostFacts) -> FaultScripts:
    stop, start, field = STATEMENTS[spec.thread]
    return FaultScripts(inject=INJECT, revert=REVERT, active=ACTIVE,
                        env={"SOCKET": facts.db_socket or "", "STOP": stop, "START": start, "FIELD": field})


FAMILY = "replication"
FAULT_KINDS = (fault_kind("replica_stop", {"mariadb-client"}, replica_stop_scripts),)
