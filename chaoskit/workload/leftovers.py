"""Load agents left running on loader hosts, ended by `chaoskit recover`.

An agent outlives a controller that died (it is detached on purpose: its spool is the run's
evidence); its lease ends it within `LEASE_S` of the last renewal. `recover` ends it now. It lists
every live agent below each loader host's spool directory (by its pid file: the process that wrote
it, still running) and reads who started it (`controller.json`: the controller, and the loader host
it was started on). It leaves alone an agent whose controller still runs on this machine, unless
forced, and one started on another loader host (hosts may share the spool's filesystem: each agent
is ended through its own host). Any other it asks to stop as its controller would (`stop`: it
spools its final batch), and SIGKILLs it only if it has not exited after `STOP_WAIT_S`. An agent's
directory, its spool included, is never removed here: after a dead controller it may hold the
only copy of the run's records.

What the host sends back is data: the pid as digits, the controller file and the directory in
base64; a directory that is not a plain absolute path below the spool is reported, not touched.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.inventory.remote import HostUnreachable, Remote
from chaoskit.lifeline import controller_alive
from chaoskit.workload.agent import CONTROLLER, PID, STOP
from chaoskit.workload.ssh_loader import live_pid, plain_path, subshell

STOP_WAIT_S = 10.0  # an agent asked to stop is SIGKILLed if it has not exited by then


@dataclass(frozen=True)
class Leftover:
    """A live agent on a loader host."""

    host: str
    directory: str
    pid: int
    controller: dict | None  # who started it, and on which loader host (None: not said, or not readable)

    def ended_by_recover(self, force: bool) -> str | None:
        """Why recover leaves it running (None: it ends it)."""
        if not force and self.controller is not None and controller_alive({"controller": self.controller}):
            return f"skipped: its controller (pid {self.controller.get('pid')}) still runs; --force ends it"
        return None


def list_script(spool: str) -> str:
    spool = plain_path(spool, "the loaders' spool")
    alive = live_pid('"$P"')
    return (f"S='{spool}'; for P in \"$S\"/*/*/{PID}; do [ -f \"$P\" ] || continue; D=${{P%/{PID}}}; "
            f"{alive}; [ -n \"$p\" ] || continue; "
            f"c=$(head -c 2000 -- \"$D/{CONTROLLER}\" 2>/dev/null | base64 -w0); "
            "printf 'agent %s %s %s\\n' \"$p\" \"${c:--}\" \"$(printf '%s' \"$D\" | base64 -w0)\"; done; echo listed")


def end_script(directory: str) -> str:
    wait_ticks = int(STOP_WAIT_S * 10)
    alive = live_pid(f'"$D/{PID}"')
    return subshell([
        f"D='{plain_path(directory, 'an agent directory')}'",
        f"touch -- \"$D/{STOP}\"",
        "i=0",
        f"while :; do {alive}; "
        "[ -n \"$p\" ] || { echo stopped; exit 0; }; "
        f"i=$((i+1)); [ $i -lt {wait_ticks} ] || break; sleep 0.1; done",
        "kill -9 \"$p\" && echo killed"])


def parse_listing(host: str, spool: str, stdout: str) -> tuple[list[Leftover], list[str]]:
    """The live agents a host listed, and what could not be read (said, never touched)."""
    found, odd = [], []
    if "listed" not in stdout.split():
        return [], [f"the listing did not finish: {stdout.strip()[-200:]!r}"]
    for line in stdout.splitlines():
        words = line.split()
        if not words or words[0] != "agent":
            continue
        try:
            pid, ctl, raw_dir = int(words[1]), words[2], base64.b64decode(words[3], validate=True).decode()
        except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
            odd.append(f"an unreadable line {line[:120]!r}")
            continue
        try:
            directory = plain_path(raw_dir, "an agent directory")
        except ValueError:
            odd.append(f"an agent directory that is not a plain path: {raw_dir[:120]!r}")
            continue
        if not directory.startswith(spool.rstrip("/") + "/"):
            odd.append(f"an agent directory outside the spool: {directory!r}")
            continue
        controller = None
        if ctl != "-":
            try:
                meta = json.loads(base64.b64decode(ctl, validate=True))
                controller = meta if isinstance(meta, dict) else None
            except (ValueError, binascii.Error):
                controller = None
        found.append(Leftover(host, directory, pid, controller))
    return found, odd


def leftovers(remote: Remote, spool: str) -> tuple[list[Leftover], list[str]]:
    res = remote.shell(list_script(spool), check=False, timeout=60)
    return parse_listing(remote.name, spool, res.stdout)


def end(remote: Remote, agent: Leftover) -> str:
    res = remote.shell(end_script(agent.directory), check=False, timeout=STOP_WAIT_S + 30)
    word = res.stdout.strip().split()[-1:] or [""]
    if word[0] == "stopped":
        return f"ended (pid {agent.pid}: it stopped when asked, its final batch spooled)"
    if word[0] == "killed":
        return f"killed (pid {agent.pid}: still running {STOP_WAIT_S:g} s after it was asked to stop)"
    return f"failed: {(res.stderr or res.stdout).strip()[-200:]}"


def recover_agents(inventory: Inventory, pool: RemotePool, force: bool = False) -> dict[str, dict[str, str]]:
    """Every loader host: each live agent's directory and what was done with it; a host that could
    not be asked has `{"error": why}`."""
    loaders = inventory.loaders
    if loaders is None:
        return {}
    report: dict[str, dict[str, str]] = {}
    for host in loaders.hosts:
        done: dict[str, str] = {}
        try:
            remote = pool.get(host)
            found, odd = leftovers(remote, loaders.spool)
            for i, why in enumerate(odd):
                done[f"unread-{i}"] = f"failed: {why}"
            for agent in found:
                if agent.controller is not None and agent.controller.get("loader", host) != host:
                    continue  # a spool shared with another loader host: that host's agent, ended through it
                held = agent.ended_by_recover(force)
                done[agent.directory] = held if held is not None else end(remote, agent)
        except HostUnreachable as exc:
            done = {"error": str(exc)[:300]}
        report[host] = done
    return report
