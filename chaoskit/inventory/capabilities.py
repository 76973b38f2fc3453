"""What a host can do, measured on the host (never assumed).

netem is probed by adding a netem qdisc to the loopback of a throwaway network namespace
(`unshare -n`): a definitive answer that cannot disturb the host's own interfaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaoskit.inventory.remote import Remote

PROBE = r"""
have() { command -v "$1" >/dev/null 2>&1 && echo 1 || echo 0; }
echo "tc=$(have tc)"
echo "iptables=$(have iptables)"
echo "nft=$(have nft)"
echo "stress_ng=$(have stress-ng)"
echo "systemctl=$( [ -d /run/systemd/system ] && echo 1 || echo 0)"
if command -v tc >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; then
  out=$(unshare -n sh -c 'ip link set lo up && tc qdisc add dev lo root netem delay 1ms' 2>&1) \
    && echo "netem=1" || echo "netem=0 $out"
else
  echo "netem=0 tc or unshare missing"
fi
echo "kernel=$(uname -r)"
"""


@dataclass(frozen=True)
class Capabilities:
    tc: bool
    netem: bool
    netem_reason: str
    iptables: bool
    nft: bool
    stress_ng: bool
    systemd: bool
    kernel: str


def probe_capabilities(remote: Remote) -> Capabilities:
    res = remote.shell(PROBE, check=False)
    facts: dict[str, str] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        facts[key.strip()] = value.strip()
    netem_raw = facts.get("netem", "0 no answer")
    netem_ok = netem_raw.startswith("1")
    reason = "" if netem_ok else (netem_raw[1:].strip() or "unknown")
    return Capabilities(
        tc=facts.get("tc") == "1", netem=netem_ok, netem_reason=reason,
        iptables=facts.get("iptables") == "1", nft=facts.get("nft") == "1",
        stress_ng=facts.get("stress_ng") == "1", systemd=facts.get("systemctl") == "1",
        kernel=facts.get("kernel", ""),
    )
