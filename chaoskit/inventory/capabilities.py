"""What a host can do, measured on the host (never assumed).

The answer is a set of capability names that fault kinds declare as their needs
(`chaoskit.faults.registry`): commands present, `python3.7` (a /usr/bin/python3 >= 3.7 for the
link relay), `systemd` (the host runs it), `blkio` (the cgroup v1 block I/O throttle) and
`netem`. netem is probed by adding a netem qdisc to
the loopback of a throwaway network namespace (`unshare -n`): a definitive answer that cannot
disturb the host's own interfaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chaoskit.inventory.remote import Remote

COMMANDS = ("tc", "iptables", "ip6tables", "iptables-restore", "nft", "stress-ng", "ss", "setpriv", "setsid",
            "base64", "sha256sum", "awk", "ps", "unshare", "systemctl", "findmnt", "fallocate", "stat")

PROBE = r"""
for c in """ + " ".join(COMMANDS) + r"""; do
  if command -v "$c" >/dev/null 2>&1; then echo "have=$c"; fi
done
if [ -d /run/systemd/system ]; then echo "have=systemd"; fi
if [ -e /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device ]; then echo "have=blkio"; fi
if command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1; then echo "have=mariadb-client"; fi
if /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null; then echo "have=python3.7"; fi
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
    have: frozenset[str] = field(default_factory=frozenset)
    netem_reason: str = ""
    kernel: str = ""

    @property
    def netem(self) -> bool:
        return "netem" in self.have

    @property
    def iptables(self) -> bool:
        return "iptables" in self.have

    @property
    def nft(self) -> bool:
        return "nft" in self.have

    @property
    def systemd(self) -> bool:
        return "systemd" in self.have

    def to_dict(self) -> dict[str, object]:
        return {"have": sorted(self.have), "netem": self.netem, "netem_reason": self.netem_reason,
                "iptables": self.iptables, "nft": self.nft, "kernel": self.kernel}


def parse_capabilities(stdout: str) -> Capabilities:
    have: set[str] = set()
    reason, kernel = "unknown", ""
    for line in stdout.splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key == "have":
            have.add(value)
        elif key == "netem":
            if value.startswith("1"):
                have.add("netem")
                reason = ""
            else:
                reason = value[1:].strip() or "unknown"
        elif key == "kernel":
            kernel = value
    return Capabilities(have=frozenset(have), netem_reason=reason, kernel=kernel)


def probe_capabilities(remote: Remote) -> Capabilities:
    return parse_capabilities(remote.shell(PROBE, check=False).stdout)
