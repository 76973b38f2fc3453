"""Network faults in the host's own namespace: partition and loss (iptables/ip6tables chains of our
own), bandwidth (tbf) and netem (htb + netem toward peers) on a root qdisc of our own.

Nothing here deletes a chain or qdisc chaoskit did not create (names and handles derive from the
fault id), a configured root qdisc is never replaced, loopback is never cut, and the controller's
own SSH (its address and the server port it came in on, from SSH_CONNECTION) plus the SSH paths
this host forwards as a jump host are always exempt.
"""

from __future__ import annotations

import re

from chaoskit.faults.hostscript import FaultScripts, HostFacts, lines_file
from chaoskit.faults.kinds import fault_kind
from chaoskit.faults.spec import BandwidthSpec, LossSpec, NetemSpec, PartitionSpec

_TC_ARGS = re.compile(r"^[a-z0-9.% ]+$")


def chain_name(fault_id: str, suffix: str) -> str:
    return f"CK{fault_id[:8].upper()}{suffix}"


def qdisc_handle(fault_id: str) -> str:
    return f"{int(fault_id[:4], 16) % 0xFFF0 + 0x10:x}"


# Which address families need rules: those of the peers, or both for "all traffic" (IPv6 only where
# the host has ip6tables; a host with global IPv6 addresses and no ip6tables is refused).
FAMILIES = r"""
families() {
  if [ -s "$J/$ID.peers" ]; then
    while read -r pa; do family_of "$pa"; done < "$J/$ID.peers" | sort -u | tr '\n' ' '
    return
  fi
  if command -v ip6tables >/dev/null 2>&1; then echo "4 6"; return; fi
  if ip -6 addr show scope global 2>/dev/null | grep -q inet6; then
    echo "this host has IPv6 addresses and no ip6tables: an all-traffic fault would miss IPv6" >&2; return 3
  fi
  echo 4
}
"""

# Staging writes one iptables-restore file per address family; the instant loads each in one
# atomic transaction (chains, rules and the hooks into INPUT/OUTPUT together).
CHAINS_PREPARE = FAMILIES + r"""
ctl_ip=${SSH_CONNECTION%% *}
ctl_port=$(echo "$SSH_CONNECTION" | awk '{ print $4 }')
if [ -z "$ctl_ip" ] || [ -z "$ctl_port" ]; then echo 'cannot tell the controller address (SSH_CONNECTION)' >&2; exit 3; fi
if [ -s "$J/$ID.ctl" ] && ! grep -qxF -- "$ctl_ip" "$J/$ID.peers"; then echo "$ctl_ip" >> "$J/$ID.peers"; fi
fams=$(families)
rule() {
  case "$MODE" in
    drop) echo "$* -j DROP" ;;
    reject) echo "$* -p tcp -j REJECT --reject-with tcp-reset"; echo "$* -j REJECT" ;;
    loss) echo "$* -m statistic --mode random --probability $PROB -j DROP" ;;
  esac
}
: > "$J/$ID.fams"
for fam in $fams; do
  ipt=$(ipt_for "$fam")
  command -v "$ipt-restore" >/dev/null 2>&1 || { echo "$ipt-restore is missing on this host" >&2; exit 3; }
  {
    echo '*filter'
    echo ":$CHAIN_IN - [0:0]"
    echo ":$CHAIN_OUT - [0:0]"
    echo "-A $CHAIN_IN -i lo -j RETURN"
    echo "-A $CHAIN_OUT -o lo -j RETURN"
    if [ "$(family_of "$ctl_ip")" = "$fam" ]; then
      echo "-A $CHAIN_IN -s $ctl_ip -p tcp --dport $ctl_port -j RETURN"
      echo "-A $CHAIN_OUT -d $ctl_ip -p tcp --sport $ctl_port -j RETURN"
    fi
    while read -r xa xp; do
      [ -n "$xa" ] && [ "$(family_of "$xa")" = "$fam" ] || continue
      echo "-A $CHAIN_OUT -d $xa -p tcp --dport $xp -j RETURN"
      echo "-A $CHAIN_IN -s $xa -p tcp --sport $xp -j RETURN"
    done < "$J/$ID.exempt"
    for way in in out; do
      if [ "$way" = in ]; then chain=$CHAIN_IN; flag=-s; else chain=$CHAIN_OUT; flag=-d; fi
      case "$DIRECTION" in both) ;; "$way") ;; *) continue ;; esac
      if [ -s "$J/$ID.peers" ]; then
        while read -r pa; do
          [ "$(family_of "$pa")" = "$fam" ] || continue
          rule "-A $chain $flag $pa"
        done < "$J/$ID.peers"
      else
        rule "-A $chain"
      fi
    done
    echo "-I INPUT 1 -j $CHAIN_IN"
    echo "-I OUTPUT 1 -j $CHAIN_OUT"
    echo COMMIT
  } > "$J/$ID.rules$fam"
  echo "$fam" >> "$J/$ID.fams"
  "$ipt-restore" -w --test --noflush < "$J/$ID.rules$fam"
done
"""

CHAINS_INJECT = r"""
while read -r fam; do
  "$(ipt_for "$fam")-restore" -w --noflush < "$J/$ID.rules$fam"
done < "$J/$ID.fams"
mark_effect
"""

CHAINS_REVERT = r"""
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  while "$ipt" -w -D INPUT -j "$CHAIN_IN" 2>/dev/null; do :; done
  while "$ipt" -w -D OUTPUT -j "$CHAIN_OUT" 2>/dev/null; do :; done
  "$ipt" -w -F "$CHAIN_IN" 2>/dev/null; "$ipt" -w -X "$CHAIN_IN" 2>/dev/null
  "$ipt" -w -F "$CHAIN_OUT" 2>/dev/null; "$ipt" -w -X "$CHAIN_OUT" 2>/dev/null
done
true
"""

CHAINS_ACTIVE = r"""
command -v iptables >/dev/null 2>&1 || exit 2
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null 2>&1 || continue
  if "$ipt" -w -S "$CHAIN_IN" >/dev/null 2>&1 || "$ipt" -w -S "$CHAIN_OUT" >/dev/null 2>&1; then exit 0; fi
done
exit 1
"""

QDISC_CHECK = r"""
cur=$(tc qdisc show dev "$IFACE" root | head -n 1)
ck=$(echo "$cur" | awk '{ print $2 }')
case "$ck" in
  noqueue|pfifo_fast|fq_codel|mq|fq|pfifo|sfq|"") ;;
  *) echo "$IFACE has a configured root qdisc ($cur): refusing to replace it" >&2; exit 3 ;;
esac
"""

# staging checks the interface and writes a tc batch; the instant is one `tc -batch`
ROOT_QDISC_PREPARE = QDISC_CHECK + r"""
echo "qdisc replace dev $IFACE root handle $HANDLE: $QDISC_ARGS" > "$J/$ID.tc"
"""

NETEM_PEERS_PREPARE = QDISC_CHECK + r"""
{
  echo "qdisc replace dev $IFACE root handle $HANDLE: htb default 1"
  echo "class add dev $IFACE parent $HANDLE: classid $HANDLE:1 htb rate 100gbit"
  echo "class add dev $IFACE parent $HANDLE: classid $HANDLE:2 htb rate 100gbit"
  echo "qdisc add dev $IFACE parent $HANDLE:2 handle $CHILD: $QDISC_ARGS"
  while read -r pa; do
    if [ "$(family_of "$pa")" = 6 ]; then
      echo "filter add dev $IFACE parent $HANDLE: protocol ipv6 prio 1 u32 match ip6 dst $pa/128 flowid $HANDLE:2"
    else
      echo "filter add dev $IFACE parent $HANDLE: protocol ip prio 1 u32 match ip dst $pa/32 flowid $HANDLE:2"
    fi
  done < "$J/$ID.peers"
} > "$J/$ID.tc"
"""

QDISC_INJECT = r"""
tc -batch "$J/$ID.tc"
mark_effect
"""

QDISC_REVERT = r"""
if tc qdisc show dev "$IFACE" root | grep -qF " $HANDLE: "; then tc qdisc del dev "$IFACE" root handle "$HANDLE":; fi
true
"""

QDISC_ACTIVE = r"""
command -v tc >/dev/null 2>&1 || exit 2
if tc qdisc show dev "$IFACE" root | grep -qF " $HANDLE: "; then exit 0; fi
exit 1
"""


def _exempt(facts: HostFacts) -> str:
    return "".join(f"{addr} {port}\n" for addr, port in facts.exempt)


def _chains(fault_id: str, direction: str, mode: str, facts: HostFacts, prob: str = "") -> FaultScripts:
    return FaultScripts(
        inject=CHAINS_INJECT, revert=CHAINS_REVERT, active=CHAINS_ACTIVE, prepare=CHAINS_PREPARE,
        env={"CHAIN_IN": chain_name(fault_id, "I"), "CHAIN_OUT": chain_name(fault_id, "O"),
             "DIRECTION": direction, "MODE": mode, "PROB": prob},
        files={"peers": lines_file(facts.peer_addresses), "exempt": _exempt(facts),
               "ctl": "1\n" if facts.peer_control else ""})


def partition_scripts(fault_id: str, spec: PartitionSpec, facts: HostFacts) -> FaultScripts:
    return _chains(fault_id, spec.direction, spec.action, facts)


def loss_scripts(fault_id: str, spec: LossSpec, facts: HostFacts) -> FaultScripts:
    return _chains(fault_id, spec.direction, "loss", facts, prob=f"{spec.loss_pct / 100:.4f}")


def _tc_args(args: str) -> str:
    if not _TC_ARGS.match(args):
        raise ValueError(f"unexpected tc arguments {args!r}")
    return args


def bandwidth_scripts(fault_id: str, spec: BandwidthSpec, facts: HostFacts) -> FaultScripts:
    return FaultScripts(inject=QDISC_INJECT, revert=QDISC_REVERT, active=QDISC_ACTIVE, prepare=ROOT_QDISC_PREPARE,
                        env={"IFACE": spec.interface, "HANDLE": qdisc_handle(fault_id),
                             "QDISC_ARGS": _tc_args(f"tbf rate {spec.rate} burst 32kbit latency 400ms")})


def netem_args(spec: NetemSpec) -> str:
    parts = ["netem"]
    if spec.delay_ms:
        parts.append(f"delay {spec.delay_ms:g}ms" + (f" {spec.jitter_ms:g}ms distribution normal"
                                                      if spec.jitter_ms else ""))
    if spec.loss_pct:
        parts.append(f"loss {spec.loss_pct:g}%")
    if spec.corrupt_pct:
        parts.append(f"corrupt {spec.corrupt_pct:g}%")
    if spec.duplicate_pct:
        parts.append(f"duplicate {spec.duplicate_pct:g}%")
    return _tc_args(" ".join(parts))


def netem_scripts(fault_id: str, spec: NetemSpec, facts: HostFacts) -> FaultScripts:
    handle = qdisc_handle(fault_id)
    env = {"IFACE": spec.interface, "HANDLE": handle, "QDISC_ARGS": netem_args(spec)}
    if not facts.peer_addresses:
        return FaultScripts(inject=QDISC_INJECT, revert=QDISC_REVERT, active=QDISC_ACTIVE, prepare=ROOT_QDISC_PREPARE,
                            env=env)
    return FaultScripts(inject=QDISC_INJECT, revert=QDISC_REVERT, active=QDISC_ACTIVE, prepare=NETEM_PEERS_PREPARE,
                        env={**env, "CHILD": f"{int(handle, 16) + 1:x}"},
                        files={"peers": lines_file(facts.peer_addresses)})


FAMILY = "network"
FAULT_KINDS = (
    fault_kind("partition", {"iptables"}, partition_scripts),
    fault_kind("loss", {"iptables"}, loss_scripts),
    fault_kind("bandwidth", {"tc"}, bandwidth_scripts),
    fault_kind("netem", {"tc", "netem"}, netem_scripts, instead="use the latency proxy, or loss/bandwidth"),
)
