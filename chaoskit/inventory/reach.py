"""Whether an inventory's hosts can be reached at all, asked before any packet leaves.

The lab's inventory points at 10.77.0.0/24. With the lab down those addresses go out through the
default route, where on a user's network they may be real machines: any command given an
inventory marked `lab:` stops unless the lab's bridge holds that subnet (`refuse_unreachable_lab`),
and the SSH transport (`fanout.RemotePool`) asks again and refuses the hosts of stacks that are not
up. Only the inventory and the kernel's view are read: nothing here knows the lab's recipes.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

from chaoskit.errors import InputError
from chaoskit.inventory.models import Inventory

LAB_NETNS_PREFIX = "ck-"  # a lab host's network namespace is this + its name


def _addresses_on(interface: str) -> list[str]:
    res = subprocess.run(["ip", "-j", "addr", "show", "dev", interface], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return []
    try:
        data = json.loads(res.stdout or "[]")
    except ValueError:
        return []
    return [f"{a['local']}/{a['prefixlen']}" for link in data for a in link.get("addr_info", [])]


def lab_is_up(subnet: str, bridge: str) -> bool:
    net = ipaddress.ip_network(subnet, strict=False)
    return any(ipaddress.ip_interface(a).network == net for a in _addresses_on(bridge))


def refuse_unreachable_lab(inv: Inventory) -> None:
    if inv.lab is None:
        return
    if not lab_is_up(inv.lab.subnet, inv.lab.bridge):
        raise InputError(f"the lab is not up ({inv.lab.subnet} is not on bridge {inv.lab.bridge}): run "
                         "`chaoskit lab up` first; nothing was sent", source=inv.source, field="lab")


def lab_hosts_not_running(inv: Inventory) -> frozenset[str]:
    """The hosts of a lab inventory whose namespace does not exist (their stack is not up): they
    are left out of every-host operations and refused at once rather than waited for. Every host
    of a lab inventory is a lab host (`lab up` writes it), named as its namespace is."""
    if inv.lab is None:
        return frozenset()
    res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    existing = {line.split()[0] for line in res.stdout.splitlines() if line.strip()}
    return frozenset(h for h in inv.hosts if LAB_NETNS_PREFIX + h not in existing)
