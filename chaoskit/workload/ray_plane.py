"""The Ray cluster that places and starts load agents (issue: load from several machines): its
head on the control node and one node per loader host, started and stopped by chaoskit
(`chaoskit loaders up|down`), or one the user runs (`loaders: {ray: {address}}`).

Ray is the control plane only: which node runs an agent, starting it, reading its spool while the
node is in the cluster. A node cut from its head is declared dead and its raylet exits within a
minute, taking its actors with it, so records never live only in Ray: agents spool on their host's
disk and the controller reads what a lost node's agents spooled over SSH.

How each piece starts, and the care taken:
- every Ray process is `ray start --block` in a session of its own, under a pid file holding its
  pid and start time; `down` signals that process (which ends the daemons it started), then ends
  whatever is left *of its session*, never `ray stop` (which ends every Ray process on a machine);
- explicit `--node-ip-address`, fixed ports (`port` for the head's GCS and the next ones, the
  same on every node), its own `--temp-dir`, usage statistics off, no dashboard, and token
  authentication on (`RAY_AUTH_MODE=token`): the token is read from `token_file` on the control
  node and copied to each loader host through its shell's input (base64, checked by SHA-256 there),
  never on a command line;
- every node must run the Ray version `chaoskit[loaders]` pins (`RAY_VERSION`): a node with
  another one is refused by name with both versions, before anything starts.

Nothing from the inventory reaches a shell as code: the addresses are checked IP addresses, the
directory a checked plain path in single quotes, the labels the checked host name and zone tag.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaoskit.inventory.models import Inventory, RayPlane
from chaoskit.inventory.remote import Remote
from chaoskit.lifeline import process_start_time
from chaoskit.workload.ssh_loader import host_status, live_pid, subshell

if TYPE_CHECKING:
    from chaoskit.inventory.fanout import RemotePool

RAY_VERSION = "2.60.0"  # what chaoskit[loaders] pins: the head and every node must run exactly this
WORKER_PORTS = 100  # ports port+10 .. port+109 for Ray's workers
STOP_WAIT_S = 20.0
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class RayUnavailable(RuntimeError):
    """Ray is not installed here, or its cluster cannot be reached: said in one line."""


def installed_ray() -> str | None:
    """The Ray version this Python has (None: not installed)."""
    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return None


def require_ray() -> None:
    version = installed_ray()
    if version is None:
        raise RayUnavailable("Ray is not installed on the control node: pip install 'chaoskit[loaders]'")
    if version != RAY_VERSION:
        raise RayUnavailable(f"the control node runs ray {version}, chaoskit pins {RAY_VERSION}: "
                             f"pip install 'chaoskit[loaders]'")


def token_of(plane: RayPlane) -> bytes:
    """The token, read from its file on the control node (refused when missing or empty)."""
    path = Path(plane.token_file)
    try:
        token = path.read_bytes().strip()
    except OSError as exc:
        raise RayUnavailable(f"loaders.ray.token_file: {plane.token_file} cannot be read ({exc.strerror}); "
                             "create it, e.g. python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE "
                             "and chmod 600 FILE") from None
    if not token or not re.fullmatch(rb"[A-Za-z0-9_.=+/-]{16,512}", token):
        raise RayUnavailable(f"loaders.ray.token_file: {plane.token_file} does not hold a token (16 to 512 "
                             "letters, digits or _ . = + / -)")
    return token


def _env(token_path: str) -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path, "RAY_USAGE_STATS_ENABLED": "0"}


def _port_args(port: int) -> list[str]:
    return [f"--node-manager-port={port + 1}", f"--object-manager-port={port + 2}",
            f"--dashboard-agent-listen-port={port + 3}", f"--dashboard-agent-grpc-port={port + 4}",
            f"--runtime-env-agent-port={port + 5}", f"--metrics-export-port={port + 6}",
            f"--min-worker-port={port + 10}", f"--max-worker-port={port + 9 + WORKER_PORTS}"]


def head_args(plane: RayPlane, python: str = sys.executable) -> list[str]:
    """The head's command line (arguments, never a shell line)."""
    assert plane.head is not None
    return [python, "-m", "ray.scripts.scripts", "start", "--head", "--block",
            f"--node-ip-address={plane.head}", f"--port={plane.port}", f"--temp-dir={plane.dir}/head",
            "--include-dashboard=false", "--disable-usage-stats", "--num-cpus=0",
            "--object-store-memory=100000000", *_port_args(plane.port)]


def node_dir(plane: RayPlane, host: str) -> str:
    """A loader host's node directory: its pid file, token, log and Ray's temporary files (named by
    the host, so hosts that share a filesystem, as the lab's do, never share one)."""
    path = f"{plane.dir}/n-{_label(host)}"
    if len(path) > 56:  # Ray's socket paths below it must stay under 108 characters
        raise ValueError(f"loaders.ray.dir: {path} is too long for Ray's socket paths (at most 56 characters "
                         "with n-HOST)")
    return path


def node_args(plane: RayPlane, python: str, address: str, host: str, az: str | None,
              tags: dict[str, str] | None = None, resources: dict[str, float] | None = None) -> list[str]:
    """A loader host's node: its labels carry the host's name and zone (`ck-host`, `ck-az`) and
    each of its tags that is a Ray label (`where: {labels: ...}`); `resources`: the custom
    resources the inventory gives it (`where: {resources: ...}`)."""
    labels = [f"ck-host={_label(host)}"] + ([f"ck-az={_label(az)}"] if az else [])
    labels += [f"{k}={v}" for k, v in sorted((tags or {}).items()) if _LABEL.fullmatch(k) and _LABEL.fullmatch(v)
               and not k.startswith("ck-")]
    extra = []
    if resources:
        for name, amount in resources.items():
            if not _LABEL.fullmatch(name) or not (amount > 0 and math.isfinite(amount)):
                raise ValueError(f"not a Ray resource: {name!r}: {amount!r}")
        extra = [f"--resources={json.dumps({k: float(v) for k, v in sorted(resources.items())})}"]
    return [python, "-m", "ray.scripts.scripts", "start", "--block", f"--address={plane.gcs}",
            f"--node-ip-address={address}", f"--temp-dir={node_dir(plane, host)}", "--disable-usage-stats",
            "--object-store-memory=100000000", f"--labels={','.join(labels)}", *extra, *_port_args(plane.port)]


def _label(value: str) -> str:
    if not _LABEL.fullmatch(value):
        raise ValueError(f"not a Ray label value: {value!r}")
    return value


def _quoted(arg: str) -> str:
    if "'" in arg or "\n" in arg:
        raise ValueError(f"not a plain argument: {arg!r}")
    return f"'{arg}'"


@dataclass(frozen=True)
class NodeAnswer:
    host: str
    pid: int | None
    started: bool  # False: it was running already (up) or there was none (down)
    processes: int = 0  # down: how many processes its session had


# -- the head, on the control node --------------------------------------------------------------
def _pid_file_process(path: Path) -> int | None:
    """The pid in `path` while that process (same start time) runs."""
    try:
        pid_text, start = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if not pid_text.isdigit() or not start.isdigit():
        return None
    pid = int(pid_text)
    return pid if process_start_time(pid) == int(start) else None


def _session(sid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def head_pid_file(plane: RayPlane) -> Path:
    return Path(plane.dir) / "head.pid"


def head_up(plane: RayPlane, timeout: float = 60.0) -> tuple[int, bool]:
    """Start the head (pid, True), or find it running (pid, False); ready once its GCS answers."""
    require_ray()
    token_of(plane)
    pid_file = head_pid_file(plane)
    running = _pid_file_process(pid_file)
    if running is not None:
        return running, False
    Path(plane.dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    log = open(Path(plane.dir) / "head.log", "ab")  # noqa: SIM115 - the head keeps it
    proc = subprocess.Popen(head_args(plane), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **_env(plane.token_file)}, cwd="/")
    log.close()
    start = process_start_time(proc.pid)  # a child not yet reaped is still in /proc
    if start is None or proc.poll() is not None:
        raise RayUnavailable(f"the Ray head exited at once ({proc.wait()})")
    pid_file.write_text(f"{proc.pid}\n{start}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (Path(plane.dir) / "head.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RayUnavailable(f"the Ray head exited ({proc.returncode}): {' | '.join(tail)[-300:]}")
        with contextlib.suppress(OSError), socket.create_connection((plane.head or "", plane.port), timeout=1):
            if "--block" in (Path(plane.dir) / "head.log").read_text(errors="replace"):
                return proc.pid, True
        time.sleep(0.2)
    raise RayUnavailable(f"the Ray head did not answer on {plane.gcs} within {timeout:.0f} s")


def head_down(plane: RayPlane) -> NodeAnswer:
    """Stop the head by its pid file (its session's processes counted in the answer)."""
    pid_file = head_pid_file(plane)
    pid = _pid_file_process(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return NodeAnswer("control", None, False)
    ended = _session(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and _session(pid):
        time.sleep(0.2)
    for left in _session(pid):  # what its SIGTERM did not end: the session is ours alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return NodeAnswer("control", pid, True, len(ended))


# -- a node, on a loader host over its shell -----------------------------------------------------
# the node's pid while it is the process that wrote the pid file and runs
_NODE_PID = live_pid('"$D/node.pid"')
# the live processes of session $1
_SESSION = ("sess() { for f in /proc/[0-9]*/stat; do awk -v s=\"$1\" '{ sub(/.*\\) /, \"\"); "
            "if ($4 == s && $1 != \"Z\") { split(FILENAME, a, \"/\"); print a[3] } }' \"$f\" 2>/dev/null; done; }")


def node_up_script(plane: RayPlane, python: str, address: str, host: str, az: str | None, token: bytes,
                   tags: dict[str, str] | None = None, resources: dict[str, float] | None = None) -> str:
    args = " ".join(_quoted(a) for a in node_args(plane, python, address, host, az, tags, resources))
    directory = node_dir(plane, host)
    env = " ".join(f"{k}={_quoted(v)}" for k, v in _env(f"{directory}/token").items())
    return subshell([
        "set -e", "umask 077", f"D={_quoted(directory)}", 'mkdir -p -- "$D"', _NODE_PID,
        'if [ -n "$p" ]; then echo "running $p"; exit 0; fi',
        f"printf '%s' {base64.b64encode(token).decode()} | base64 -d > \"$D/token.tmp\"",
        f"printf '%s  %s\\n' {hashlib.sha256(token).hexdigest()} \"$D/token.tmp\" | sha256sum -c --quiet --status",
        'mv -f -- "$D/token.tmp" "$D/token"',
        f'cd / && {env} setsid {args} </dev/null >>"$D/node.log" 2>&1 &',
        "p=$!; s=''; i=0",
        "while [ -z \"$s\" ] && [ $i -lt 50 ]; do "
        "s=$(awk '{ sub(/.*\\) /, \"\"); print $20 }' \"/proc/$p/stat\" 2>/dev/null || true); i=$((i+1)); done",
        "printf '%s\\n%s\\n' \"$p\" \"$s\" > \"$D/node.pid\"", "echo \"started $p\""])


def node_down_script(plane: RayPlane, host: str) -> str:
    return subshell([
        f"D={_quoted(node_dir(plane, host))}", _NODE_PID, _SESSION,
        'if [ -z "$p" ]; then rm -f -- "$D/node.pid"; echo "none"; exit 0; fi',
        'n=$(sess "$p" | wc -l); kill -TERM "$p" 2>/dev/null || true; i=0',
        f'while [ -n "$(sess "$p")" ] && [ $i -lt {int(STOP_WAIT_S * 5)} ]; do sleep 0.2; i=$((i+1)); done',
        'for q in $(sess "$p"); do kill -KILL "$q" 2>/dev/null || true; done',
        'rm -f -- "$D/node.pid" "$D/token"; echo "stopped $p $n"'])


def node_up(remote: Remote, plane: RayPlane, python: str, address: str, host: str, az: str | None,
            token: bytes, tags: dict[str, str] | None = None, resources: dict[str, float] | None = None
            ) -> NodeAnswer:
    res = remote.shell(node_up_script(plane, python, address, host, az, token, tags, resources), check=False,
                       timeout=60)
    words = res.stdout.split()
    if res.exited != 0 or len(words) < 2 or words[0] not in ("started", "running"):
        raise RayUnavailable(f"loader host {host}: its Ray node did not start: "
                             f"{(res.stderr or res.stdout).strip()[-300:]}")
    return NodeAnswer(host, int(words[1]), words[0] == "started")


def node_down(remote: Remote, plane: RayPlane, host: str) -> NodeAnswer:
    res = remote.shell(node_down_script(plane, host), check=False, timeout=STOP_WAIT_S + 30)
    words = res.stdout.split()
    if res.exited != 0 or not words:
        raise RayUnavailable(f"loader host {host}: its Ray node could not be stopped: "
                             f"{(res.stderr or res.stdout).strip()[-300:]}")
    if words[0] == "none":
        return NodeAnswer(host, None, False)
    return NodeAnswer(host, int(words[1]), True, int(words[2]))


# -- the driver: this process, connected to the cluster -------------------------------------------
CONNECT_TIMEOUT_S = 3.0
GCS_WAIT_VAR = "RAY_gcs_server_port_wait_time_s"
GCS_TRIES = 1
def connect(plane: RayPlane) -> Any:
    """The `ray` module, this process connected to the cluster as a driver (once per process)."""
    require_ray()
    token_of(plane)
    os.environ.update(_env(plane.token_file))
    import ray

    if not ray.is_initialized():
        host, _, port = plane.gcs.rpartition(":")
        try:  # nothing listening: said at once (ray.init would retry for over ten minutes)
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise RayUnavailable(f"nothing answers at the Ray cluster's {plane.gcs} ({exc.strerror or exc}); "
                                 "start it with chaoskit loaders up") from None
        # a GCS that accepts but does not answer: Ray's own connect makes GCS_TRIES tries (each
        # bounded by Ray, about 35 s measured with the head's GCS stopped) instead of its default 20
        saved = os.environ.get(GCS_WAIT_VAR)
        os.environ[GCS_WAIT_VAR] = str(GCS_TRIES)
        try:
            ray.init(address=plane.gcs, logging_level=logging.ERROR, log_to_driver=False, namespace="chaoskit")
        except Exception as exc:  # ConnectionError, an authentication failure, a timeout
            raise RayUnavailable(f"the Ray cluster at {plane.gcs} cannot be reached ({type(exc).__name__}: "
                                 f"{str(exc).strip()[:200]}); start it with chaoskit loaders up") from None
        finally:
            if saved is None:
                os.environ.pop(GCS_WAIT_VAR, None)
            else:
                os.environ[GCS_WAIT_VAR] = saved
    return ray


@dataclass(frozen=True)
class RayNode:
    node_id: str
    address: str
    alive: bool
    labels: dict[str, str]
    resources: dict[str, float] = field(default_factory=dict)  # its total (custom ones and CPU, memory, ...)


def cluster_nodes(plane: RayPlane) -> list[RayNode]:
    ray = connect(plane)
    return [RayNode(n["NodeID"], n["NodeManagerAddress"], bool(n["Alive"]), dict(n.get("Labels") or {}),
                    {k: float(v) for k, v in (n.get("Resources") or {}).items()})
            for n in ray.nodes()]


def matching_hosts(nodes: list[RayNode], inv: Inventory, labels: dict[str, str] | None,
                   resources: dict[str, float] | None) -> tuple[list[str], str]:
    """The inventory's loader hosts (in its order) whose live node carries every label in `labels`
    and at least each amount in `resources`; and, for a refusal when none does, what the live
    nodes carry (the loader hosts' labels or resources, chaoskit's own `ck-` labels left out)."""
    assert inv.loaders is not None
    live = {n.address: n for n in nodes if n.alive}

    def fits(n: RayNode) -> bool:
        if labels is not None:
            return all(n.labels.get(k) == v for k, v in labels.items())
        assert resources is not None
        return all(n.resources.get(k, 0.0) >= v for k, v in resources.items())

    hosts = [h for h in inv.loaders.hosts if (n := live.get(inv.hosts[h].address)) is not None and fits(n)]
    seen = []
    for h in inv.loaders.hosts:
        n = live.get(inv.hosts[h].address)
        if n is None:
            seen.append(f"{h}: not a live node")
        elif labels is not None:
            said = {k: v for k, v in n.labels.items() if not k.startswith(("ck-", "ray.io/node-id"))}
            seen.append(f"{h}: {said or 'no labels'}")
        else:
            said_r = {k: v for k, v in n.resources.items() if not k.startswith("node:") and k != "object_store_memory"
                      and k != "memory"}
            seen.append(f"{h}: {said_r or 'no resources'}")
    return hosts, "; ".join(seen)


def node_of(plane: RayPlane, inv: Inventory, host: str) -> RayNode | None:
    """The live node at the loader host's address (None: it is not in the cluster)."""
    address = inv.hosts[host].address
    live = [n for n in cluster_nodes(plane) if n.alive and n.address == address]
    return live[0] if live else None


# -- up and down: the whole plane -----------------------------------------------------------------
@dataclass(frozen=True)
class PlaneReport:
    head_pid: int | None
    head_started: bool
    nodes: tuple[NodeAnswer, ...]
    seconds: float


def _managed(inv: Inventory) -> RayPlane:
    plane = inv.loaders.ray if inv.loaders is not None else None
    if plane is None:
        raise RayUnavailable("the inventory's loaders: section has no ray: (agents go over SSH; nothing to start)")
    if not plane.managed:
        raise RayUnavailable(f"loaders.ray.address: the Ray cluster at {plane.address} is yours: chaoskit "
                             "neither starts nor stops it")
    return plane


def _on_every_loader(inv: Inventory, pool: RemotePool,
                     fn: Callable[[Remote], NodeAnswer]) -> tuple[NodeAnswer, ...]:
    """`fn` on every loader host at once; the first that failed is raised, naming its host."""
    from chaoskit.inventory.fanout import fan_out_pool

    assert inv.loaders is not None
    answers = fan_out_pool(pool, fn, inv.loaders.hosts)
    for host in inv.loaders.hosts:
        answer = answers[host]
        if isinstance(answer, BaseException):
            raise RayUnavailable(f"loader host {host}: {answer}")
    return tuple(answers[h] for h in inv.loaders.hosts)  # type: ignore[misc]


def up(inv: Inventory, pool: RemotePool, timeout: float = 90.0) -> PlaneReport:
    """The head here and a node on every loader host, each checked first (the pinned Ray, this
    chaoskit); ready once every node is alive in the cluster. Running pieces are left running."""
    import chaoskit
    from chaoskit.inventory.fanout import fan_out_pool

    t0 = time.monotonic()
    plane = _managed(inv)
    assert inv.loaders is not None
    require_ray()
    token = token_of(plane)
    python = inv.loaders.python
    statuses = fan_out_pool(pool, lambda remote: host_status(remote, python), inv.loaders.hosts)
    for host in inv.loaders.hosts:
        status = statuses[host]
        why = f"loader host {host}: {status}" if isinstance(status, BaseException) else \
            status.refusal(chaoskit.__version__, RAY_VERSION)
        if why:
            raise RayUnavailable(why)
    head_pid, head_started = head_up(plane)
    nodes = _on_every_loader(inv, pool, lambda remote: node_up(
        remote, plane, python, inv.hosts[remote.name].address, remote.name, inv.hosts[remote.name].tags.get("az"),
        token, dict(inv.hosts[remote.name].tags), inv.loaders.resources.get(remote.name))  # type: ignore[union-attr]
    )
    wanted = {inv.hosts[h].address for h in inv.loaders.hosts}
    deadline = time.monotonic() + timeout
    while True:
        alive = {n.address for n in cluster_nodes(plane) if n.alive}
        if wanted <= alive:
            break
        if time.monotonic() > deadline:
            missing = sorted(h for h in inv.loaders.hosts if inv.hosts[h].address not in alive)
            raise RayUnavailable(f"loader hosts {', '.join(missing)} did not join the Ray cluster at {plane.gcs} "
                                 f"within {timeout:.0f} s (see node.log in {plane.dir}/n-HOST there)")
        time.sleep(0.5)
    return PlaneReport(head_pid, head_started, nodes, time.monotonic() - t0)


def down(inv: Inventory, pool: RemotePool) -> PlaneReport:
    """Every node by its pid file, then the head: never `ray stop`."""
    t0 = time.monotonic()
    plane = _managed(inv)
    assert inv.loaders is not None
    nodes = _on_every_loader(inv, pool, lambda remote: node_down(remote, plane, remote.name))
    head = head_down(plane)
    return PlaneReport(head.pid, head.started, nodes, time.monotonic() - t0)
