"""`chaoskit lab up|down|status`: build, inspect and remove the local lab.

The lab is a base (dcs1: etcd, a standalone PostgreSQL, the jump host) plus stacks chosen with
`--stack` (one recipe each, `chaoskit.lab.recipes`). `up` is idempotent and incremental: stacks
already up and healthy are left as they are, missing ones are added beside them. A lab in a bad
state is first revived (dead daemons started again, each unhealthy stack's repair); only if that
fails, or for a different Patroni flavour, is it rebuilt, with every stack it had, after cleaning
the leftovers of a crashed run.
`down` removes everything `up` made: daemons (by recorded pid, checked dead), anything still
running in the lab's namespaces, leaked SysV shared memory, namespaces, veths, bridge, the lab
user and sudoers entry, fault journals and relay directories of lab hosts, and the state directory
(except cache/). `down --stack` removes only those stacks' hosts; the base and the other stacks run on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaoskit.errors import LabError
from chaoskit.faults.journal import JOURNAL_ROOT as FAULT_JOURNAL_ROOT
from chaoskit.faults.relay import RELAY_ROOT
from chaoskit.guard import routed_elsewhere
from chaoskit.lab import daemons, disks, network
from chaoskit.lab.procs import alive, netns_pids, read_pid_file, sh, terminate
from chaoskit.lab.recipes import Build, default_stacks, lab_spec, postgres_key, recipe, recipes, stack_names, wait_tcp
from chaoskit.lab.spec import (
    BRIDGE,
    CGROUP_ROOT,
    LAB_CGROUP_PARENT,
    LAB_CONTROLLERS,
    SSH_USER,
    STATE_DIR,
    SUBNET_PREFIX,
    LabHost,
    LabSpec,
    Paths,
)

USER_COMMENT = "chaoskit lab"
SECRETS = ("pg_superuser", "pg_replication", "mariadb_chaoskit", "mariadb_repl", "mariadb_mha", "mariadb_check")


@dataclass(frozen=True)
class UpResult:
    seconds: float
    already_up: bool
    cleaned_leftovers: bool
    stacks: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    revived: bool = False  # dead daemons started again / a stack repaired, nothing rebuilt
    revive_failed: str = ""  # why a revive was given up for a rebuild (the last health answer)


def require_root() -> None:
    if os.name != "posix" or not Path("/proc").exists():
        raise LabError("the lab needs Linux")
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, daemons as postgres/mysql)")
    missing = [b for b in ("ip", "sshd", "etcd", "mariadbd", "setpriv", "sudo")
               if not shutil.which(b) and not Path(f"/usr/sbin/{b}").exists()]
    if not daemons.DEBIAN_PATRONI.exists():
        missing.append("patroni")
    if not (daemons.PG_BIN / "postgres").exists():
        missing.append("postgresql-15")
    if missing:
        raise LabError(f"missing lab packages: {', '.join(missing)} (run .ci/install or install them with apt-get)")


def check_stacks(stacks: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    unknown = [s for s in stacks if s not in stack_names()]
    if unknown:
        raise LabError(f"unknown stack {', '.join(unknown)}; choose from {', '.join(stack_names())}")
    needs = {"pg_auto_failover": "/usr/bin/pg_autoctl", "repmgr": "/usr/bin/repmgrd"}
    missing = [f"{s} ({p})" for s, p in needs.items() if s in stacks and not Path(p).exists()]
    if missing:
        raise LabError(f"missing packages for {', '.join(missing)}: run .ci/install")
    return tuple(s for s in stack_names() if s in stacks)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(Paths.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _read_state() -> dict[str, Any] | None:
    try:
        return json.loads(Paths.state.read_text())
    except (OSError, ValueError):
        return None


def _replace_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Written beside and renamed over: a `chaoskit` process reading the lab's state or known_hosts
    while a stack is added or removed (another session on the same lab) sees the old file or the
    new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _write_state(state: dict[str, Any]) -> None:
    _replace_text(Paths.state, json.dumps(state, indent=2))


def _pid_alive(entry: dict[str, Any]) -> bool:
    pid: int | None = read_pid_file(Path(entry["pid_file"])) if entry.get("pid_file") else entry["pid"]
    return alive(pid) if pid else False


def _daemons_alive(state: dict[str, Any], stacks: set[str]) -> bool:
    """Every daemon of these stacks (and the base) runs, judged by its pid file now (a drill may
    have restarted it)."""
    hosts = {h.name for h in lab_spec().of_stacks(stacks)}
    procs = {k: v for k, v in state.get("daemons", {}).items() if k.split("/")[0] in hosts}
    return bool(procs) and all(_pid_alive(e) for e in procs.values())


def _revive(state: dict[str, Any], stacks: set[str], spec: LabSpec, timeout: float) -> str:
    """A lab whose daemons a drill or a crash left dead, or whose cluster lost a member, is brought
    back as it is (launchers are no-ops for what still runs; then each stack's repair) rather than
    rebuilt: seconds instead of a rebuild, and the other stacks keep running. Returns "" when the
    lab is whole again, else why not (kept in `UpResult` so a rebuild says what forced it)."""
    hosts = {h.name for h in spec.of_stacks(stacks)}
    for host in spec.of_stacks(stacks):  # mounts do not survive a reboot; the images do
        disks.remount(host)
    entries = {k: e for k, e in state.get("daemons", {}).items() if k.split("/")[0] in hosts and e.get("script")}
    for name in sorted(stacks):  # stacks that cannot come back daemon by daemon (a Galera cold start)
        module = recipe(name)
        if hasattr(module, "revive"):
            module.revive(spec)

    def start_dead() -> list[str]:
        """Launch every daemon that is not running (a launcher is a no-op for one that runs)."""
        dead = [k for k, e in entries.items() if not _pid_alive(e)]
        for key in dead:
            if Path(entries[key]["script"]).exists():
                subprocess.run([entries[key]["script"]], check=False, timeout=30, capture_output=True)
        return dead

    # Started again until they stay up, for as long as the health wait lasts (not a shorter budget
    # of its own): a postmaster refuses to start while the backends of the one that was killed still
    # hold its shared memory, and with every stack restarting at once on a loaded machine that took
    # longer than the 20 s this loop once had (seen in CI: repmgr's servers never started again)
    start_dead()
    try:
        wait_healthy(min(timeout, 45.0), spec, stacks=tuple(sorted(stacks)), repair_after=3.0, keep_up=start_dead)
    except LabError as exc:
        dead = start_dead()
        return str(exc) + (f"; not running: {', '.join(dead)}" if dead else "")
    return "" if _daemons_alive(state, stacks) else "a daemon died again after the lab was healthy"


def up_stacks() -> tuple[str, ...]:
    state = _read_state() or {}
    return tuple(state.get("stacks", ()))


def has_leftovers() -> bool:
    return bool(network.existing_netns()) or network.link_exists(BRIDGE) or Paths.state.exists() or \
        any((STATE_DIR / "hosts").glob("*")) or any(disks.is_mounted(Paths.pg_disk(h)) for h in lab_spec().hosts)


# -- up -------------------------------------------------------------------------------------
def up(flavour: str = "debian", stacks: tuple[str, ...] | list[str] | None = None, spec: LabSpec | None = None,
       timeout: float = 60.0, keep_on_failure: bool = False) -> UpResult:
    """Build the lab (`stacks`: default the recipes' default stacks; `spec`: default the whole lab)."""
    require_root()
    stacks = default_stacks() if stacks is None else stacks
    spec = spec or lab_spec()
    wanted = check_stacks(stacks)
    t0 = time.monotonic()
    with _locked():
        state = _read_state() or {}
        have = set(state.get("stacks", ()))
        same = bool(state) and state.get("patroni") == flavour and network.link_exists(BRIDGE)
        reusable = same and _daemons_alive(state, have) and all(recipe(s).health(spec)[0] for s in ("base", *have))
        revived, revive_failed = False, ""
        if same and not reusable and have:
            revive_failed = _revive(state, have, spec, timeout)
            reusable = revived = not revive_failed
        if reusable and set(wanted) <= have:
            return UpResult(time.monotonic() - t0, not revived, False, tuple(sorted(have)), revived=revived)
        cleaned = False
        if not reusable:
            cleaned = has_leftovers()
            if cleaned:
                _down_locked(spec)
            clash = routed_elsewhere(f"{SUBNET_PREFIX}.0/24", BRIDGE)
            if clash:
                raise LabError(f"refusing to build the lab on {SUBNET_PREFIX}.0/24: {clash} (those addresses may "
                               "be real machines here)")
            # rebuilt with every stack it had: a repair that failed must not lose a stack
            wanted, have, state = check_stacks(tuple(set(wanted) | have)), set(), {}
        adding = [s for s in wanted if s not in have]
        try:
            started = _build(spec, flavour, timeout, base=not have and not state, stacks=adding, up=have)
        except BaseException as exc:
            if not keep_on_failure and not have:
                _down_locked(spec)
            if isinstance(exc, Exception) and not isinstance(exc, LabError):
                kept = "kept for inspection" if keep_on_failure or have else "everything removed again"
                raise LabError(f"lab up failed ({kept}): {exc}") from exc
            raise
        all_up = sorted(have | set(adding))
        _write_state({"patroni": flavour, "created": (state or {}).get("created", time.time()), "stacks": all_up,
                      "daemons": {**(state or {}).get("daemons", {}), **started}})
        return UpResult(time.monotonic() - t0, False, cleaned, tuple(all_up), tuple(adding), revived=revived,
                        revive_failed=revive_failed)


def _build(spec: LabSpec, flavour: str, timeout: float, *, base: bool, stacks: list[str],
           up: set[str]) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    if flavour == "pypi":
        daemons.ensure_pypi_patroni()
    new_hosts = [h for h in spec.of_stacks(set(stacks)) if base or h.stack in stacks]
    _prepare_dirs(new_hosts)
    _ensure_user()
    b = Build(spec, flavour, deadline, {name: _secret(name) for name in SECRETS})
    network.build(new_hosts, spec)
    for host in new_hosts:
        b.launch(f"{host.name}/sshd", daemons.sshd_setup(host), host.dir / "sshd.pid")
    _write_known_hosts(spec.of_stacks(up | set(stacks)))
    if base:
        recipe("base").build(b)  # etcd first: Patroni needs its DCS
    todo = [m for m in recipes(stacks) if m.NAME != "base"]
    with ThreadPoolExecutor(max_workers=max(1, len(todo) + len(new_hosts))) as pool:
        jobs = [pool.submit(m.build, b) for m in todo]
        ssh = [pool.submit(wait_tcp, h.address, 22, deadline, f"sshd on {h.name}") for h in new_hosts]
        for job in [*jobs, *ssh]:
            job.result()
    return b.started


def _prepare_dirs(hosts: list[Any]) -> None:
    for d in (STATE_DIR, STATE_DIR / "hosts", Paths.ssh, Paths.cache, STATE_DIR / "home"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    Paths.secrets.mkdir(mode=0o700, exist_ok=True)
    for host in hosts:
        host.dir.mkdir(parents=True, exist_ok=True)
        host.dir.chmod(0o755)
        if host.role in disks.POSTGRES_ROLES:
            disks.ensure_disk(host)
    if not Paths.client_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "chaoskit-lab",
                        "-f", str(Paths.client_key)], check=True, capture_output=True)
    # one authorized_keys file per login: the controller's key for ckops and root, the lab
    # postgres user's own key for postgres (repmgr's switchover SSHes between nodes)
    keys = Paths.ssh / "keys"
    keys.mkdir(mode=0o755, exist_ok=True)
    controller = Path(f"{Paths.client_key}.pub").read_text()
    for login in (SSH_USER, "root"):
        (keys / login).write_text(controller)
    (keys / "postgres").write_text(Path(f"{postgres_key()}.pub").read_text())
    for f in keys.iterdir():
        f.chmod(0o644)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)


def _secret(name: str) -> str:
    path = Paths.secret(name)
    if not path.exists():
        path.write_text(secrets.token_urlsafe(18) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def _ensure_user() -> None:
    try:
        entry = pwd.getpwnam(SSH_USER)
        if entry.pw_gecos != USER_COMMENT:
            raise LabError(f"user {SSH_USER} exists and is not the lab's; refusing to touch it")
    except KeyError:
        sh(["useradd", "--system", "--no-create-home", "--home-dir", str(STATE_DIR / "home"),
            "--shell", "/bin/sh", "--comment", USER_COMMENT, SSH_USER])
    sh(["usermod", "-p", "*", SSH_USER])  # '*' = no password, but not a locked account for sshd
    _unlock_postgres()
    Paths.sudoers.write_text(f"# {USER_COMMENT}: removed by `chaoskit lab down`\n"
                             f"{SSH_USER} ALL=(ALL) NOPASSWD: ALL\n")
    Paths.sudoers.chmod(0o440)


POSTGRES_UNLOCKED = STATE_DIR / "postgres-account-unlocked"


def _shadow_password(user: str) -> str | None:
    res = subprocess.run(["getent", "shadow", user], capture_output=True, text=True, check=False)
    return res.stdout.split(":")[1] if res.returncode == 0 and res.stdout.count(":") >= 2 else None


def _unlock_postgres() -> None:
    """repmgr's switchover and rejoin SSH between the nodes as postgres; sshd without PAM refuses
    any login to a locked account ('!', Debian's default for postgres), keys included. '*' means
    the same for passwords (none) without the lock; `lab down` puts '!' back."""
    if _shadow_password("postgres") == "!":
        sh(["usermod", "-p", "*", "postgres"])
        POSTGRES_UNLOCKED.write_text("postgres had '!' before `chaoskit lab up`\n")


def _write_known_hosts(hosts: list[Any]) -> None:
    lines = [f"{h.address} {daemons.host_public_key(h)}" for h in hosts]
    _replace_text(Paths.known_hosts, "\n".join(lines) + "\n")


# -- health ---------------------------------------------------------------------------------
def health(spec: LabSpec | None = None, stacks: tuple[str, ...] | None = None,
           with_base: bool = True) -> tuple[bool, str]:
    """The lab as built: every stack that is up healthy (the base too, unless `with_base` is
    false: a session that shares the lab and drills only stacks that do not use the base)."""
    spec = spec or lab_spec()
    for name in (*(("base",) if with_base else ()), *(stacks if stacks is not None else up_stacks())):
        ok, why = recipe(name).health(spec)
        if not ok:
            return False, why
    return True, "ok"


def wait_healthy(timeout: float = 90.0, spec: LabSpec | None = None, stacks: tuple[str, ...] | None = None,
                 repair_after: float = 15.0, keep_up: Callable[[], object] | None = None,
                 with_base: bool = True) -> None:
    """Wait for the lab as built; a stack still unhealthy after `repair_after` s gets its repair
    (e.g. a diverged Patroni replica is reinitialised); `keep_up`, if given, runs about once a
    second while waiting (a revive starts dead daemons again with it)."""
    spec = spec or lab_spec()
    start = time.monotonic()
    deadline = start + timeout
    repaired: set[str] = set()
    stacks = stacks if stacks is not None else up_stacks()
    ok, why = health(spec, stacks, with_base)
    kept_up = time.monotonic()
    while not ok and time.monotonic() < deadline:
        time.sleep(0.3)
        if keep_up is not None and time.monotonic() - kept_up >= 1.0:
            keep_up()
            kept_up = time.monotonic()
        ok, why = health(spec, stacks, with_base)
        if not ok and time.monotonic() - start > repair_after:
            for name in stacks:
                module = recipe(name)
                if name not in repaired and hasattr(module, "repair") and not module.health(spec)[0] \
                        and module.repair(spec):
                    repaired.add(name)
    if not ok:
        raise LabError(f"lab not healthy after {timeout:g}s: {why}")


# -- down -----------------------------------------------------------------------------------
def down(spec: LabSpec | None = None) -> float:
    require_root()
    spec = spec or lab_spec()
    t0 = time.monotonic()
    with _locked():
        _down_locked(spec)
    return time.monotonic() - t0


def down_stacks(stacks: tuple[str, ...] | list[str], spec: LabSpec | None = None) -> tuple[str, ...]:
    """Remove these stacks' hosts (daemons, namespaces, disks, host directories, fault journals) and
    leave the base and every other stack running, so a lab keeps only what is in use: an idle stack
    costs CPU (pg_auto_failover's keepers poll every second) and every health wait checks it.
    Returns the stacks still up."""
    require_root()
    spec = spec or lab_spec()
    with _locked():
        state = _read_state() or {}
        have = set(state.get("stacks", ()))
        gone = [s for s in check_stacks(stacks) if s in have]
        if not gone:
            return tuple(sorted(have))
        hosts = [h for h in spec.hosts if h.stack in gone]
        names = {h.name for h in hosts}
        _stop_hosts(hosts, state, [d for name in gone for d in recipe(name).postgres_data(spec)])
        network.destroy_hosts(hosts)
        for host in hosts:
            shutil.rmtree(host.dir, ignore_errors=True)
            disks.image(host).unlink(missing_ok=True)
        left = sorted(have - set(gone))
        _write_state({**state, "stacks": left,
                      "daemons": {k: v for k, v in state.get("daemons", {}).items() if k.split("/")[0] not in names}})
        _write_known_hosts(spec.of_stacks(set(left)))
        return tuple(left)


def _stop_hosts(hosts: list[Any], state: dict[str, Any], data_dirs: list[Path],
                every_netns: bool = False) -> None:
    """Every process of these hosts ended (recorded daemons and postmasters gracefully first, so
    Patroni and pg_autoctl stop PostgreSQL and MariaDB flushes; then anything left in their
    namespaces), their leaked shared memory removed, disks unmounted, fault journals and relay
    directories gone. `every_netns`: also whatever runs in a lab-named namespace of no host here
    (left by an older lab)."""
    names = {h.name for h in hosts}
    netns = set(network.existing_netns()) if every_netns else {h.netns for h in hosts} & set(network.existing_netns())
    recorded = [p["pid"] for k, p in state.get("daemons", {}).items()
                if k.split("/")[0] in names and alive(p["pid"], p.get("start"))]
    postmasters = [pid for d in data_dirs if (pid := read_pid_file(d / "postmaster.pid"))
                   and alive(pid) and _in_lab_netns(pid, hosts)]
    terminate(sorted(set(recorded + postmasters)), grace=4.0)
    left = terminate(sorted({pid for ns in netns for pid in netns_pids(ns)}), grace=1.0)
    # anything still in a host's cgroup was started by the lab for that host (a launcher that found
    # no namespace): ended too, then the cgroups removed
    left += terminate(sorted({pid for h in hosts for pid in _cgroup_pids(h)} - set(left)), grace=1.0)
    if left:
        raise LabError(f"processes would not die: {left}")
    _remove_cgroups(hosts, parent=every_netns)
    _remove_shared_memory(data_dirs)
    stuck = disks.release_disks(hosts)
    if stuck:
        raise LabError(f"lab disks would not unmount: {', '.join(stuck)}")
    for host in hosts:  # fault journals of lab hosts (their dead-men died with the namespaces)
        journal_dir = Path(FAULT_JOURNAL_ROOT) / host.name
        for entry in journal_dir.glob("*.json"):  # and the relay directories of their faults
            shutil.rmtree(Path(RELAY_ROOT) / entry.stem, ignore_errors=True)
        shutil.rmtree(journal_dir, ignore_errors=True)


def _down_locked(spec: LabSpec) -> None:
    state = _read_state() or {}
    data_dirs = [d for name in ("base", *stack_names()) for d in recipe(name).postgres_data(spec)]
    _stop_hosts(list(spec.hosts), state, data_dirs, every_netns=True)
    network.destroy(spec)
    _remove_user()
    for child in STATE_DIR.glob("*"):
        if child.name in (Paths.cache.name, Paths.lock.name):
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _cgroup_pids(host: LabHost) -> set[int]:
    pids: set[int] = set()
    for d in host.cgroup_dirs():
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    return pids


def _remove_cgroups(hosts: list[LabHost], parent: bool, wait_s: float = 15.0) -> None:
    """The hosts' cgroups, and their common parent when the whole lab goes. A cgroup is removed
    with rmdir, which the kernel refuses while a process that ended there is not yet reaped (the
    daemons' orphans are reaped by pid 1, in its own time): tried again until `wait_s`, then left
    with a warning (an empty cgroup costs nothing, and the next `lab up` uses it again)."""
    dirs = [d for host in hosts for d in host.cgroup_dirs()]
    if parent:
        dirs += [CGROUP_ROOT / c / LAB_CGROUP_PARENT for c in LAB_CONTROLLERS]
    deadline = time.monotonic() + wait_s
    while dirs:
        busy = []
        for d in dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                busy.append((d, exc.strerror))
        dirs = [d for d, _ in busy]
        if busy and time.monotonic() >= deadline:
            print(f"lab: cgroups left in place ({'; '.join(f'{d}: {why}' for d, why in busy)})", file=sys.stderr)
            return
        if busy:
            time.sleep(0.2)


def _in_lab_netns(pid: int, hosts: list[Any]) -> bool:
    res = sh(["ip", "netns", "identify", str(pid)], check=False)
    return res.stdout.strip() in {h.netns for h in hosts}


def _remove_shared_memory(data_dirs: list[Path]) -> None:
    """PostgreSQL killed with SIGKILL leaves its SysV segment (key on line 7 of postmaster.pid)."""
    for data in data_dirs:
        try:
            lines = (data / "postmaster.pid").read_text().splitlines()
        except OSError:
            continue
        if len(lines) >= 7 and lines[6].split():
            sh(["ipcrm", "-M", lines[6].split()[0]], check=False)


def _remove_user() -> None:
    Paths.sudoers.unlink(missing_ok=True)
    if POSTGRES_UNLOCKED.exists() and _shadow_password("postgres") == "*":
        sh(["usermod", "-p", "!", "postgres"], check=False)
    POSTGRES_UNLOCKED.unlink(missing_ok=True)
    try:
        if pwd.getpwnam(SSH_USER).pw_gecos == USER_COMMENT:
            sh(["userdel", SSH_USER], check=False)
    except KeyError:
        pass


# -- status ---------------------------------------------------------------------------------
def status(spec: LabSpec | None = None) -> dict[str, Any]:
    """Hosts (SSH reachable) and every cluster's members with their roles as the HA manager and
    the servers see them, for the stacks that are up."""
    spec = spec or lab_spec()
    stacks = up_stacks()
    hosts = spec.of_stacks(set(stacks)) if network.existing_netns() else []
    ssh_ok = _ssh_reachable() if hosts else {}
    out: dict[str, Any] = {"stacks": list(stacks),
                           "hosts": [{"name": h.name, "address": h.address, "stack": h.stack,
                                      "ssh": ssh_ok.get(h.name, False)} for h in hosts],
                           "clusters": {}}
    if not hosts:
        return out
    from chaoskit.lab.inventory_file import lab_inventory
    from chaoskit.topology.roles import discover_roles

    inv = lab_inventory()
    members_up = {h.name for h in hosts}
    for cname, cluster in inv.clusters.items():
        if not all(m.host in members_up for m in cluster.members):
            continue
        try:
            roles = discover_roles(cluster, inv)
            out["clusters"][cname] = {"ha": cluster.ha.kind, "members": [
                {"name": r.member, "role": r.sql_role, "manager_role": r.manager_role, "state": r.manager_state,
                 "lag_bytes": r.lag_bytes} for r in roles]}
        except Exception as exc:
            out["clusters"][cname] = {"ha": cluster.ha.kind, "error": str(exc), "members": []}
    return out


def _ssh_reachable() -> dict[str, bool]:
    if not Paths.known_hosts.exists():
        return {}
    from chaoskit.inventory.fanout import fan_out
    from chaoskit.lab.inventory_file import lab_inventory

    inv = lab_inventory()
    up_hosts = [h.name for h in lab_spec().of_stacks(set(up_stacks()))]
    results = fan_out(inv, lambda remote: remote.run("true", timeout=5), up_hosts)
    return {name: not isinstance(res, BaseException) for name, res in results.items()}
