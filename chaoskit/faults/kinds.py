"""Shell for every fault kind: inject, revert, is-active. Pure functions of the fault and the
facts about its host, so the exact commands can be shown (`--dry-run`) and unit-tested.

Conventions: scripts run as root in the host's own shell (network namespace included); `$J` is
the fault's journal directory and `$ID` its id. Reverts are idempotent: every step tolerates
"already undone". Nothing here deletes a chain or qdisc chaoskit did not create: names and
handles are derived from the fault id.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from chaoskit.faults.models import PROXY_KINDS, FaultSpec, proxy_toxic_args
from chaoskit.inventory.models import ProcessRef

START_WAIT_S = 60  # how long a revert waits for a restarted process to run
DEFAULT_QDISCS = ("noqueue", "pfifo_fast", "fq_codel", "mq", "fq", "pfifo", "sfq")


@dataclass(frozen=True)
class HostFacts:
    """What the scripts need to know about the target host."""

    host: str
    processes: dict[str, ProcessRef]  # name -> pid file / start / stop (the member's)
    service: str | None = None
    systemd: bool = False
    peer_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class FaultScripts:
    inject: str
    revert: str
    active: str  # exits 0 while the fault is in effect


def chain_name(fault_id: str, suffix: str) -> str:
    return f"CK{fault_id[:8].upper()}{suffix}"


def qdisc_handle(fault_id: str) -> str:
    return f"{int(fault_id[:4], 16) % 0xFFF0 + 0x10:x}"


def _pids_of(names: list[str], facts: HostFacts) -> str:
    """Shell that records `name pid` lines in $J/$ID.pids for the live processes named."""
    lines = [": > \"$J/$ID.pids\""]
    for name in names:
        pid_file = shlex.quote(facts.processes[name].pid_file)
        lines.append(
            f"pid=$(head -1 {pid_file} 2>/dev/null | tr -dc 0-9); "
            f"if [ -n \"$pid\" ] && [ -d /proc/$pid ] && ! grep -q '^State:.*[ZX]' /proc/$pid/status; then "
            f"echo \"{name} $pid\" >> \"$J/$ID.pids\"; fi")
    lines.append("[ -s \"$J/$ID.pids\" ] || { echo 'no live process found for the fault' >&2; exit 3; }")
    return "\n".join(lines)


DESCENDANTS = (
    "ps -e -o pid=,ppid= | awk -v roots=\"$(cut -d' ' -f2 \"$J/$ID.pids\" | tr '\\n' ' ')\" "
    "'BEGIN { n = split(roots, r, \" \"); for (i = 1; i <= n; i++) root[r[i]] = 1 } "
    "{ parent[$1] = $2 } "
    "END { for (p in parent) { if (p in root) continue; q = parent[p]; "
    "while (q in parent && !(q in root) && q > 1) q = parent[q]; if (q in root) print \"child \" p } }' "
    "> \"$J/$ID.pids.children\"")

ALIVE = ("alive() { [ -d /proc/$1 ] && ! grep -q '^State:.*[ZX]' /proc/$1/status 2>/dev/null; }")


def _process_names(spec: FaultSpec, facts: HostFacts) -> list[str]:
    names = list(spec.processes) or ([next(iter(facts.processes))] if facts.processes else [])
    missing = [n for n in names if n not in facts.processes]
    if missing or not names:
        known = ", ".join(facts.processes) or "none"
        raise ValueError(f"{facts.host}: no process {', '.join(missing) or '(any)'} in the inventory (known: {known})")
    return names


def _startable(names: list[str], facts: HostFacts, then: str) -> str:
    """For each named process that has a start command and is not running: run `then`
    ($start is its start command, $pid_file its pid file)."""
    out = [ALIVE]
    for name in names:
        ref = facts.processes[name]
        if not ref.start:
            continue
        out.append(f"pid_file={shlex.quote(ref.pid_file)}; start={shlex.quote(ref.start)}; "
                   "pid=$(head -1 \"$pid_file\" 2>/dev/null | tr -dc 0-9); "
                   f"if [ -z \"$pid\" ] || ! alive \"$pid\"; then {then}; fi")
    return "\n".join(out)


def restart_missing(names: list[str], facts: HostFacts) -> str:
    """Start each named process that is no longer running, and wait (bounded) until it runs:
    a revert is verified right after."""
    return _startable(names, facts, "sh -c \"$start\"; "
                      f"for i in $(seq {START_WAIT_S * 10}); do pid=$(head -1 \"$pid_file\" 2>/dev/null | tr -dc 0-9); "
                      "[ -n \"$pid\" ] && alive \"$pid\" && break; sleep 0.1; done")


def _restart_pending(names: list[str], facts: HostFacts) -> str:
    """Active while a process that has a start command is not running."""
    return _startable(names, facts, "exit 0") + "\nexit 1"


def process_fault(spec: FaultSpec, facts: HostFacts) -> FaultScripts:
    names = _process_names(spec, facts)
    record = _pids_of(names, facts)
    pids = "$(cut -d' ' -f2 \"$J/$ID.pids\" | tr '\\n' ' ')"
    if spec.kind == "kill":
        return FaultScripts(
            inject=f"{record}\nkill -{spec.signal} {pids}",
            revert=restart_missing(names, facts),
            active=_restart_pending(names, facts))
    if spec.kind == "pause":
        # Freeze the named processes first, then every descendant (one ps pass): a postmaster
        # frozen without its backends is not frozen.
        return FaultScripts(
            inject=f"{record}\nkill -STOP {pids}\n{DESCENDANTS}\n"
                   "children=$(cut -d' ' -f2 \"$J/$ID.pids.children\")\n"
                   "if [ -n \"$children\" ]; then kill -STOP $children 2>/dev/null || true; fi\n"
                   "cat \"$J/$ID.pids.children\" >> \"$J/$ID.pids\"; rm -f \"$J/$ID.pids.children\"",
            revert=f"[ -f \"$J/$ID.pids\" ] && kill -CONT {pids} 2>/dev/null; true",
            active=("for pid in $(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); do "
                    "grep -q '^State:.*T' /proc/$pid/status 2>/dev/null && exit 0; done; exit 1"))
    # stop: the service manager where there is one, else the configured or a graceful stop
    if facts.systemd and facts.service:
        svc = shlex.quote(facts.service)
        return FaultScripts(inject=f"systemctl stop {svc}", revert=f"systemctl start {svc}",
                            active=f"! systemctl is-active --quiet {svc}")
    stops = []
    for name in names:
        ref = facts.processes[name]
        if not ref.start:
            raise ValueError(f"{facts.host}: stop needs a start command for {name} (processes.{name}.start)")
        stops.append(ref.stop or f"pid=$(grep '^{name} ' \"$J/$ID.pids\" | cut -d' ' -f2); kill -TERM $pid; "
                                 f"for i in $(seq 100); do alive $pid || break; sleep 0.1; done")
    return FaultScripts(inject=f"{record}\n{ALIVE}\n" + "\n".join(stops),
                        revert=restart_missing(names, facts), active=_restart_pending(names, facts))


def _iptables_chains(fault_id: str, spec: FaultSpec, facts: HostFacts, target: str) -> FaultScripts:
    """Own chains hooked first into INPUT/OUTPUT; SSH from the controller is always exempt."""
    cin, cout = chain_name(fault_id, "I"), chain_name(fault_id, "O")
    peers = facts.peer_addresses
    lines = ["ctl=${SSH_CONNECTION%% *}",
             "[ -n \"$ctl\" ] || { echo 'cannot tell the controller address (SSH_CONNECTION)' >&2; exit 3; }",
             f"iptables -w -N {cin}", f"iptables -w -N {cout}",
             f"iptables -w -A {cin} -s \"$ctl\" -p tcp --dport 22 -j RETURN",
             f"iptables -w -A {cout} -d \"$ctl\" -p tcp --sport 22 -j RETURN"]
    for chain, flag, wanted in ((cin, "-s", spec.direction in ("both", "in")),
                                (cout, "-d", spec.direction in ("both", "out"))):
        if not wanted:
            continue
        for match in ([f"{flag} {p}" for p in peers] or [""]):
            if spec.action == "reject" and spec.kind == "partition":
                lines.append(f"iptables -w -A {chain} {match} -p tcp -j REJECT --reject-with tcp-reset")
                lines.append(f"iptables -w -A {chain} {match} -j REJECT")
            else:
                lines.append(f"iptables -w -A {chain} {match} {target}".replace("  ", " "))
    lines += [f"iptables -w -I INPUT 1 -j {cin}", f"iptables -w -I OUTPUT 1 -j {cout}"]
    revert = "\n".join([
        f"while iptables -w -D INPUT -j {cin} 2>/dev/null; do :; done",
        f"while iptables -w -D OUTPUT -j {cout} 2>/dev/null; do :; done",
        f"iptables -w -F {cin} 2>/dev/null; iptables -w -X {cin} 2>/dev/null",
        f"iptables -w -F {cout} 2>/dev/null; iptables -w -X {cout} 2>/dev/null; true"])
    active = f"iptables -w -S {cin} >/dev/null 2>&1 || iptables -w -S {cout} >/dev/null 2>&1"
    return FaultScripts(inject="\n".join(lines), revert=revert, active=active)


def _root_qdisc(fault_id: str, spec: FaultSpec, qdisc: str) -> FaultScripts:
    """Replace the default root qdisc with ours; refuse to touch a configured one."""
    dev = shlex.quote(spec.interface)
    handle = qdisc_handle(fault_id)
    defaults = "|".join(DEFAULT_QDISCS)
    inject = "\n".join([
        f"cur=$(tc qdisc show dev {dev} root | head -1)",
        f"case \"$(echo \"$cur\" | awk '{{print $2}}')\" in {defaults}|\"\") ;; "
        f"*) echo \"{spec.interface} has a configured root qdisc ($cur): refusing to replace it\" >&2; exit 3;; esac",
        f"tc qdisc replace dev {dev} root handle {handle}: {qdisc}"])
    revert = (f"tc qdisc show dev {dev} root | grep -q ' {handle}: ' && tc qdisc del dev {dev} root handle {handle}:;"
              " true")
    active = f"tc qdisc show dev {dev} root | grep -q ' {handle}: '"
    return FaultScripts(inject=inject, revert=revert, active=active)


def netem_args(spec: FaultSpec) -> str:
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
    return " ".join(parts)


def _netem_to_peers(fault_id: str, spec: FaultSpec, facts: HostFacts) -> FaultScripts:
    """netem only toward given peers: htb root, default class unshaped, one netem class + u32 filters."""
    dev = shlex.quote(spec.interface)
    h = qdisc_handle(fault_id)
    base = _root_qdisc(fault_id, spec, "htb default 1")
    lines = [base.inject,
             f"tc class add dev {dev} parent {h}: classid {h}:1 htb rate 100gbit",
             f"tc class add dev {dev} parent {h}: classid {h}:2 htb rate 100gbit",
             f"tc qdisc add dev {dev} parent {h}:2 handle {int(h, 16) + 1:x}: {netem_args(spec)}"]
    lines += [f"tc filter add dev {dev} parent {h}: protocol ip prio 1 u32 match ip dst {p}/32 flowid {h}:2"
              for p in facts.peer_addresses]
    return FaultScripts(inject="\n".join(lines), revert=base.revert, active=base.active)


def network_fault(fault_id: str, spec: FaultSpec, facts: HostFacts) -> FaultScripts:
    if spec.kind == "partition":
        return _iptables_chains(fault_id, spec, facts, "-j DROP")
    if spec.kind == "loss":
        return _iptables_chains(fault_id, spec, facts,
                                f"-m statistic --mode random --probability {spec.loss_pct / 100:.4f} -j DROP")
    if spec.kind == "bandwidth":
        return _root_qdisc(fault_id, spec, f"tbf rate {spec.rate} burst 32kbit latency 400ms")
    if facts.peer_addresses:
        return _netem_to_peers(fault_id, spec, facts)
    return _root_qdisc(fault_id, spec, netem_args(spec))


def stress_fault(spec: FaultSpec) -> FaultScripts:
    args = ["stress-ng", "--timeout", f"{int(spec.ttl) + 5}s", "--quiet"]
    for flag, n in (("--cpu", spec.cpu_workers), ("--io", spec.io_workers), ("--vm", spec.vm_workers)):
        if n:
            args += [flag, str(n)]
    if spec.vm_workers:
        args += ["--vm-bytes", spec.vm_bytes]
    inject = ("command -v stress-ng >/dev/null || { echo 'stress-ng is not installed' >&2; exit 3; }\n"
              f"setsid {shlex.join(args)} </dev/null >/dev/null 2>&1 &\n"
              "echo \"stress $!\" > \"$J/$ID.pids\"")
    revert = ("pid=$(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); "
              "[ -n \"$pid\" ] && kill -TERM -$pid 2>/dev/null; "
              "for i in $(seq 50); do [ -n \"$pid\" ] && kill -0 -$pid 2>/dev/null || break; sleep 0.1; done; true")
    active = "pid=$(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); [ -n \"$pid\" ] && kill -0 -$pid 2>/dev/null"
    return FaultScripts(inject=inject, revert=revert, active=active)


def proxy_port(fault_id: str) -> int:
    return 20000 + int(fault_id[:4], 16) % 20000


def proxy_fault(fault_id: str, spec: FaultSpec, facts: HostFacts) -> FaultScripts:
    """Outgoing connections from the host to peer:port are redirected (nat OUTPUT, our own chain)
    into a local relay with the fault's toxics, run as `proxy_user`, whose own upstream connection
    is exempt by owner match. Existing connections are reset (ss -K) so they reconnect through it.
    A `down` relay listens nowhere: the redirected connections are refused."""
    from pathlib import Path

    from chaoskit.faults import delay_proxy

    source = Path(delay_proxy.__file__).read_text()
    chain = chain_name(fault_id, "N")
    lport = proxy_port(fault_id)
    user = shlex.quote(spec.proxy_user)
    port = spec.peer_port
    toxics = " ".join(shlex.quote(a) for a in proxy_toxic_args(spec))
    lines = [
        "/usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null || "
        "{ echo 'python3 >= 3.7 (/usr/bin/python3) is needed on the host for the link relay' >&2; exit 3; }",
        f"cat > \"$J/$ID.proxy.py\" <<'CHAOSKIT_PROXY'\n{source}\nCHAOSKIT_PROXY",
        "mkdir -p \"$J/$ID.proxy.d\"", f"chown {user} \"$J/$ID.proxy.d\"",
    ]
    starts = []
    for i, peer in enumerate(facts.peer_addresses):
        p = lport + i
        starts.append(
            f"setsid setpriv --reuid={user} --regid=$(id -g {user}) --clear-groups /usr/bin/python3 "
            f"\"$J/$ID.proxy.py\" --port {p} --upstream {peer} --upstream-port {port} {toxics} "
            f"--ttl {spec.ttl + 60:g} --stats \"$J/$ID.proxy.d/stats-{peer}.json\""
            " </dev/null >/dev/null 2>&1 &\n"
            f"echo \"proxy $!\" >> \"$J/$ID.pids\"\n"
            + ("sleep 0.2; kill -0 $! 2>/dev/null || { echo 'link proxy did not start' >&2; exit 3; }" if spec.down else
               f"for i in $(seq 50); do ss -Hltn \"sport = :{p}\" | grep -q . && break; sleep 0.05; done\n"
               f"ss -Hltn \"sport = :{p}\" | grep -q . || {{ echo 'link proxy did not start' >&2; exit 3; }}"))
    lines += [": > \"$J/$ID.pids\"", *starts, f"iptables -w -t nat -N {chain}"]
    for i, peer in enumerate(facts.peer_addresses):
        lines.append(f"iptables -w -t nat -A {chain} -p tcp -d {peer} --dport {port} -m owner ! --uid-owner {user} "
                     f"-j REDIRECT --to-ports {lport + i}")
    lines.append(f"iptables -w -t nat -I OUTPUT 1 -j {chain}")
    lines += [f"ss -K dst {peer} dport = {port} >/dev/null 2>&1 || true" for peer in facts.peer_addresses]
    revert = "\n".join([
        f"while iptables -w -t nat -D OUTPUT -j {chain} 2>/dev/null; do :; done",
        f"iptables -w -t nat -F {chain} 2>/dev/null; iptables -w -t nat -X {chain} 2>/dev/null",
        "for pid in $(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); do kill -TERM \"-$pid\" 2>/dev/null; done",
        "for i in $(seq 50); do alive=0; for pid in $(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); do "
        "kill -0 \"-$pid\" 2>/dev/null && alive=1; done; [ $alive = 0 ] && break; sleep 0.1; done",
        *[f"ss -K dst {peer} dport = {port} >/dev/null 2>&1" for peer in facts.peer_addresses], "true"])
    active = (f"iptables -w -t nat -S {chain} >/dev/null 2>&1 && exit 0; "
              "for pid in $(cut -d' ' -f2 \"$J/$ID.pids\" 2>/dev/null); do "
              "kill -0 \"-$pid\" 2>/dev/null && exit 0; done; exit 1")
    return FaultScripts(inject="\n".join(lines), revert=revert, active=active)


def scripts_for(fault_id: str, spec: FaultSpec, facts: HostFacts) -> FaultScripts:
    if spec.kind in ("kill", "pause", "stop"):
        return process_fault(spec, facts)
    if spec.kind == "stress":
        return stress_fault(spec)
    if spec.kind in PROXY_KINDS:
        if not facts.peer_addresses:
            raise ValueError(f"{facts.host}: {spec.kind} needs at least one peer other than the host itself")
        return proxy_fault(fault_id, spec, facts)
    return network_fault(fault_id, spec, facts)
