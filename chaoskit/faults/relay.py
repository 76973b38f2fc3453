"""Latency and proxy faults on a host link, without netem: connections from the target host to
peer:port are redirected (nat OUTPUT, a chain of our own) into local relays with the fault's
toxics (`delay_proxy.py`, shipped in the journal), which run as `proxy_user` so their own upstream
connections are exempt by owner match. Existing connections are reset (ss -K) so they reconnect
through the relays. A `down` relay listens nowhere: redirected connections are refused.

The relay program is read by the unprivileged interpreter from its stdin (opened by root from the
0700 journal); its statistics go to a directory of its own under /var/lib/chaoskit/relay. A relay
counts as started only when the port it should listen on is held by *its* pid (any other process
on that port does not make the fault look applied), and it ends itself a minute after its TTL.
"""

from __future__ import annotations

import re
from pathlib import Path

from chaoskit.faults.hostscript import FaultScripts, HostFacts, lines_file
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.network import chain_name
from chaoskit.faults.spec import LatencySpec, ProxySpec, proxy_toxic_args
from chaoskit.faults.ttl import RELAY_EXTRA_S

RELAY_ROOT = "/var/lib/chaoskit/relay"
_TOKEN = re.compile(r"^[A-Za-z0-9.+-]+$")

# Staging starts the relays (listening, nothing redirected to them yet) and writes the nat rules;
# the instant loads the rules in one transaction and resets the existing connections.
RELAY_PREPARE = r"""
/usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null || { echo 'python3 >= 3.7 (/usr/bin/python3) is needed on the host for the link relay' >&2; exit 3; }
id -u -- "$PROXY_USER" >/dev/null 2>&1 || { echo "no user $PROXY_USER on this host for the link relay" >&2; exit 3; }
rr=$RELAY_ROOT
[ -L "$rr" ] && { echo "$rr is a symlink: refusing" >&2; exit 3; }
mkdir -p "$rr"; chown 0:0 "$rr"; chmod 0711 "$rr"
rd=$rr/$ID
rm -rf "$rd"; mkdir -m 0700 "$rd"; chown -- "$PROXY_USER" "$rd"
: > "$J/$ID.pids"
i=0
while read -r peer; do
  p=$((LPORT + i))
  setsid setpriv --reuid="$PROXY_USER" --regid="$(id -g -- "$PROXY_USER")" --clear-groups /usr/bin/python3 - \
    --port "$p" --upstream "$peer" --upstream-port "$PEER_PORT" $TOXICS --ttl "$RELAY_TTL" \
    --stats "$rd/stats-$i.json" < "$J/$ID.proxy.py" >/dev/null 2>&1 &
  rpid=$!
  echo "proxy $rpid" >> "$J/$ID.pids"
  if [ "$DOWN" = 1 ]; then
    sleep 0.2
    alive "$rpid" || { echo 'link relay did not start' >&2; exit 3; }
  else
    k=0
    until ss -Hltnp "sport = :$p" 2>/dev/null | grep -qF "pid=$rpid,"; do
      k=$((k + 1))
      if [ "$k" -gt 100 ] || ! alive "$rpid"; then echo "link relay $rpid is not listening on port $p" >&2; exit 3; fi
      sleep 0.05
    done
  fi
  i=$((i + 1))
done < "$J/$ID.peers"
: > "$J/$ID.fams"
for fam in 4 6; do
  i=0; n=0
  {
    echo '*nat'
    echo ":$CHAIN_NAT - [0:0]"
    while read -r peer; do
      if [ "$(family_of "$peer")" = "$fam" ]; then
        echo "-A $CHAIN_NAT -p tcp -d $peer --dport $PEER_PORT -m owner ! --uid-owner $PROXY_USER -j REDIRECT --to-ports $((LPORT + i))"
      fi
      i=$((i + 1))
    done < "$J/$ID.peers"
    echo "-I OUTPUT 1 -j $CHAIN_NAT"
    echo COMMIT
  } > "$J/$ID.rules$fam"
  if grep -q -- '-j REDIRECT' "$J/$ID.rules$fam"; then
    ipt=$(ipt_for "$fam")
    command -v "$ipt-restore" >/dev/null 2>&1 || { echo "$ipt-restore is missing on this host" >&2; exit 3; }
    echo "$fam" >> "$J/$ID.fams"
  fi
done
"""

RELAY_INJECT = r"""
while read -r fam; do
  "$(ipt_for "$fam")-restore" -w --noflush < "$J/$ID.rules$fam"
done < "$J/$ID.fams"
while read -r peer; do ss -K dst "$peer" dport = "$PEER_PORT" >/dev/null 2>&1 || true; done < "$J/$ID.peers"
mark_effect
"""

RELAY_REVERT = r"""
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  while "$ipt" -w -t nat -D OUTPUT -j "$CHAIN_NAT" 2>/dev/null; do :; done
  "$ipt" -w -t nat -F "$CHAIN_NAT" 2>/dev/null; "$ipt" -w -t nat -X "$CHAIN_NAT" 2>/dev/null
done
end_groups $(all_recorded) || true
while read -r peer; do ss -K dst "$peer" dport = "$PEER_PORT" >/dev/null 2>&1; done < "$J/$ID.peers"
rm -rf "$RELAY_ROOT/$ID"
true
"""

RELAY_ACTIVE = r"""
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  if "$ipt" -w -t nat -S "$CHAIN_NAT" >/dev/null 2>&1; then exit 0; fi
done
for rp in $(all_recorded); do group_alive "$rp" && exit 0; done
exit 1
"""


def proxy_port(fault_id: str) -> int:
    return 20000 + int(fault_id[:4], 16) % 20000


def relay_scripts(fault_id: str, spec: LatencySpec | ProxySpec, facts: HostFacts) -> FaultScripts:
    if not facts.peer_addresses:
        raise ValueError(f"{facts.host}: {spec.kind} needs at least one peer other than the host itself")
    toxics = proxy_toxic_args(spec)
    if not all(_TOKEN.match(t) for t in toxics):
        raise ValueError(f"unexpected relay arguments {toxics!r}")
    from chaoskit.faults import delay_proxy

    assert spec.peer_port is not None
    return FaultScripts(
        inject=RELAY_INJECT, revert=RELAY_REVERT, active=RELAY_ACTIVE, prepare=RELAY_PREPARE,
        env={"CHAIN_NAT": chain_name(fault_id, "N"), "LPORT": str(proxy_port(fault_id)),
             "PEER_PORT": str(spec.peer_port), "PROXY_USER": spec.proxy_user, "TOXICS": " ".join(toxics),
             "RELAY_TTL": f"{spec.ttl + RELAY_EXTRA_S:g}", "DOWN": "1" if isinstance(spec, ProxySpec) and spec.down
             else "0", "RELAY_ROOT": RELAY_ROOT},
        files={"peers": lines_file(facts.peer_addresses), "proxy.py": Path(delay_proxy.__file__).read_text()})


def stats_script(fault_id: str) -> str:
    """Print the relays' statistics files of a fault (read before its revert removes them)."""
    if not re.match(r"^[0-9a-f]{12}$", fault_id):
        raise ValueError(fault_id)
    return (f"(for f in {RELAY_ROOT}/{fault_id}/stats-*.json; do "
            "[ -f \"$f\" ] && cat \"$f\" && echo; done; true)")


FAMILY = "relay"
FAULT_KINDS = (
    fault_kind("latency", {"iptables", "python3.7", "ss", "setpriv"}, relay_scripts),
    fault_kind("proxy", {"iptables", "python3.7", "ss", "setpriv"}, relay_scripts),
)
