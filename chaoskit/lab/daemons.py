"""Configuration and launchers of the lab's daemons (sshd, etcd, Patroni, MariaDB).

Every daemon is started by a small launcher script the lab writes next to its data. The same
script is what a drill runs over SSH to restart a crashed node, so a restart in a drill is the
same start as in `lab up`. Launchers detach the daemon (setsid, own log, stdin from /dev/null),
give it its host name (`unshare --uts`) and write its pid file.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

from chaoskit.lab import disks
from chaoskit.lab.spec import (
    ETCD_PORT,
    MARIADB_PORT,
    PATRONI_PORT,
    PG_PORT,
    PG_SCOPE,
    SUBNET_PREFIX,
    LabHost,
    Paths,
)

PG_BIN = Path("/usr/lib/postgresql/15/bin")
DEBIAN_PATRONI = Path("/usr/bin/patroni")


# `ip netns exec` mounts a fresh /sys for the namespace, without the cgroup filesystems under
# /sys/fs/cgroup a real host has (disk_slow's blkio throttle lives there): mounted again as on the
# machine (same hierarchies, so the same cgroups), in the daemon's own mount namespace only
MIRROR_CGROUPS = ("mount -t tmpfs -o mode=755 ck-cgroup /sys/fs/cgroup && "
                  "awk '$2 ~ \"^/sys/fs/cgroup/\" && ($3 == \"cgroup\" || $3 == \"cgroup2\") { print $2, $3, $4 }' "
                  "/proc/1/mounts | while read -r dir type opts; do mkdir -p \"$dir\" && "
                  "mount -t \"$type\" -o \"$opts\" \"$type\" \"$dir\"; done; ")


def write_launcher(host: LabHost, daemon: str, command: str, pid_file: Path, *, log: Path,
                   user: str | None = None, env: dict[str, str] | None = None, cgroups: bool = False) -> Path:
    """A script that starts `command` detached in the host's namespace and records its pid; a
    no-op while the recorded pid still runs (a second copy would fail on the daemon's own pid
    file or port and leave its dead pid recorded over the live one's)."""
    inner = f"hostname {host.name}; " + (MIRROR_CGROUPS if cgroups else "") + "exec "
    if env:
        inner += "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
    if user:
        inner += f"setpriv --reuid={user} --regid={user} --init-groups "
    inner += command
    script = Paths.launcher(host, daemon)
    started = shlex.quote(str(pid_file) + ".start")
    script.write_text(
        "#!/bin/sh\n"
        f"# chaoskit lab: start {daemon} of {host.name} detached in netns {host.netns}, pid to {pid_file}\n"
        "cd /\n"
        # a pid's start time (clock ticks since boot): with the pid, which process it is
        "start_of() { awk '{ sub(/.*\\) /, \"\"); print $20 }' \"/proc/$1/stat\" 2>/dev/null; }\n"
        f"pid=$(cat {shlex.quote(str(pid_file))} 2>/dev/null)\n"
        # running, not a zombie its reaper has not collected yet (kill -0 succeeds on those), and
        # the process this script started, not another that took its pid since
        'if [ -n "$pid" ] && [ -r "/proc/$pid/status" ] && ! grep -q "^State:[[:space:]]*Z" "/proc/$pid/status" '
        f'&& {{ [ ! -s {started} ] || [ "$(start_of "$pid")" = "$(cat {started})" ]; }}; '
        "then exit 0; fi\n"
        # the daemon joins its host's cgroups (made here if missing) before it starts: what it
        # forks stays there, so the host metrics read this host's CPU and block I/O alone
        "(me=$(sh -c 'echo $PPID')\n"
        + "".join(f" mkdir -p {shlex.quote(str(d))} && echo \"$me\" > {shlex.quote(str(d / 'cgroup.procs'))}\n"
                  for d in host.cgroup_dirs())
        + f" exec setsid ip netns exec {host.netns} unshare --uts sh -c {shlex.quote(inner)}\n"
        f") >>{shlex.quote(str(log))} 2>&1 </dev/null &\n"
        f"echo $! > {shlex.quote(str(pid_file))}\n"
        f"start_of $! > {started}\n"
    )
    script.chmod(0o755)
    return script


# -- sshd ------------------------------------------------------------------------------------
def sshd_setup(host: LabHost) -> Path:
    key = host.dir / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(key)],
                       check=True, capture_output=True)
    config = host.dir / "sshd_config"
    config.write_text("\n".join([
        f"ListenAddress {host.address}:22",
        f"HostKey {key}",
        f"PidFile {host.dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {Paths.ssh}/keys/%u",
        "StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "UseDNS no", "MaxStartups 100:30:200", "MaxSessions 200",
        "AllowTcpForwarding yes", "ClientAliveInterval 5", "LogLevel ERROR",
        "Subsystem sftp internal-sftp",
        # the lab's compatibility wrappers (MHA's node tools, see recipes/mha.py) before the system's
        f"SetEnv PATH={Paths.tools}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "",
    ]))
    return write_launcher(host, "sshd", f"/usr/sbin/sshd -D -f {config}", host.dir / "sshd.pid",
                          log=host.dir / "sshd.log", cgroups=True)


def host_public_key(host: LabHost) -> str:
    """`type base64` of the host's key, for known_hosts."""
    kind, blob = (host.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{kind} {blob}"


# -- etcd ------------------------------------------------------------------------------------
def etcd_setup(host: LabHost) -> Path:
    url = f"http://{host.address}"
    args = [
        "/usr/bin/etcd", "--name", host.name, "--data-dir", str(host.dir / "etcd"),
        "--listen-client-urls", f"{url}:{ETCD_PORT}", "--advertise-client-urls", f"{url}:{ETCD_PORT}",
        "--listen-peer-urls", f"{url}:2380", "--initial-advertise-peer-urls", f"{url}:2380",
        "--initial-cluster", f"{host.name}={url}:2380", "--initial-cluster-state", "new",
        "--heartbeat-interval", "100", "--election-timeout", "1000", "--log-level", "warn",
    ]
    return write_launcher(host, "etcd", shlex.join(args), host.dir / "etcd.pid", log=host.dir / "etcd.log")


# -- Patroni + PostgreSQL ---------------------------------------------------------------------
def patroni_binary(flavour: str) -> Path:
    return DEBIAN_PATRONI if flavour == "debian" else Paths.cache / "patroni-venv" / "bin" / "patroni"


def ensure_pypi_patroni() -> Path:
    """A venv built with /usr/bin/python3 under the lab's cache (readable by postgres)."""
    venv = Paths.cache / "patroni-venv"
    binary = venv / "bin" / "patroni"
    if not binary.exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "patroni[etcd3,psycopg3]>=4"],
                       check=True, capture_output=True, timeout=600)
    for p in [Paths.cache, *venv.parents]:
        if p == Path("/"):
            break
        p.chmod(p.stat().st_mode | 0o005)
    return binary


def patroni_timings(flavour: str) -> dict[str, int]:
    """Short timings so failover takes seconds; PyPI Patroni 4 enforces ttl >= 20."""
    if flavour == "debian":
        return {"ttl": 10, "loop_wait": 1, "retry_timeout": 4}
    return {"ttl": 20, "loop_wait": 1, "retry_timeout": 3}


def patroni_setup(host: LabHost, dcs: LabHost, flavour: str, superuser_pw: str, repl_pw: str, *,
                  scope: str = PG_SCOPE, parameters: dict[str, str | int] | None = None) -> Path:
    """A Patroni member of cluster `scope`; `parameters` are PostgreSQL settings beyond the lab's
    own (a stack's WAL archiving)."""
    host.dir.mkdir(parents=True, exist_ok=True)
    run_dir = host.dir / "run"
    run_dir.mkdir(exist_ok=True)
    shutil.chown(host.dir, "postgres", "postgres")
    shutil.chown(run_dir, "postgres", "postgres")
    subnet = f"{SUBNET_PREFIX}.0/24"
    config = {
        "scope": scope,
        "name": host.name,
        "log": {"level": "INFO", "dir": str(host.dir), "file_num": 2, "file_size": 10_000_000},
        "restapi": {"listen": f"{host.address}:{PATRONI_PORT}",
                    "connect_address": f"{host.address}:{PATRONI_PORT}"},
        "etcd3": {"hosts": [f"{dcs.address}:{ETCD_PORT}"]},
        "bootstrap": {
            "dcs": {
                **patroni_timings(flavour),
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": False,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                        "max_wal_senders": 10, "max_replication_slots": 10, "max_connections": 200,
                        "wal_sender_timeout": "5s", "wal_receiver_timeout": "5s",
                        **disks.BOUNDED_WAL,  # each member's data lives on its own 2 GB filesystem
                        **(parameters or {}),
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
        },
        "postgresql": {
            "listen": f"{host.address},127.0.0.1:{PG_PORT}",
            "connect_address": f"{host.address}:{PG_PORT}",
            "data_dir": str(Paths.pg_data(host)),
            "bin_dir": str(PG_BIN),
            "pgpass": str(host.dir / "pgpass"),
            "use_unix_socket": True,
            "authentication": {
                "superuser": {"username": "postgres", "password": superuser_pw},
                "replication": {"username": "replicator", "password": repl_pw},
                "rewind": {"username": "postgres", "password": superuser_pw},
            },
            "parameters": {
                "unix_socket_directories": str(run_dir),
                "dynamic_shared_memory_type": "mmap",
                "shared_buffers": "64MB",
                "logging_collector": "off",
                "password_encryption": "scram-sha-256",
            },
            "basebackup": [{"checkpoint": "fast"}, "no-sync"],
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 trust",
                # Patroni reads a diverged replica's own timeline over a local replication
                # connection before it rewinds it; without this line it loops on "no pg_hba.conf entry"
                "host replication replicator 127.0.0.1/32 trust",
                f"host replication replicator {subnet} scram-sha-256",
                f"host all all {subnet} scram-sha-256",
            ],
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }
    cfg = host.dir / "patroni.yml"
    cfg.write_text(json.dumps(config, indent=2))  # JSON is YAML; Patroni reads it as such
    cfg.chmod(0o600)
    shutil.chown(cfg, "postgres", "postgres")
    return write_launcher(host, "patroni", f"{patroni_binary(flavour)} {cfg}", Paths.patroni_pid(host),
                          log=host.dir / "patroni.out", user="postgres",
                          env={"HOME": str(host.dir), "PATH": "/usr/bin:/bin"})


# -- MariaDB --------------------------------------------------------------------------------
def mariadb_setup(host: LabHost, server_id: int, template: Path | None = None) -> Path:
    """my.cnf and a data directory; `template` is a bootstrapped datadir to copy instead of
    running mariadb-install-db again. Each host has its own tmpdir: lab hosts share one /tmp, and
    bootstraps of different stacks run at once there collide on their temporary tables
    ("Unknown table 'mysql.tmp_user_sys'": 1 of 4 concurrent bootstraps failed on the lab, 0 of
    18 with a tmpdir each)."""
    data = host.dir / "mysql"
    tmp = host.dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for d in (host.dir, tmp):
        shutil.chown(d, "mysql", "mysql")
    cnf = Paths.mariadb_cnf(host)
    cnf.write_text("\n".join([
        "[mysqld]",
        f"datadir={data}",
        f"socket={Paths.mariadb_socket(host)}",
        f"pid-file={Paths.mariadb_pid(host)}",
        f"log-error={host.dir / 'error.log'}",
        f"tmpdir={tmp}",
        f"bind-address={host.address}",
        f"port={MARIADB_PORT}",
        f"server-id={server_id}",
        "log-bin=mysql-bin", "log-slave-updates=1", "binlog-format=ROW", "gtid-strict-mode=1",
        "sync-binlog=1", "innodb-flush-log-at-trx-commit=1",
        "innodb-buffer-pool-size=64M", "innodb-log-file-size=32M", "skip-name-resolve",
        "max-connections=300", "performance-schema=OFF",
        *(["read-only=1"] if server_id > 1 else []),  # replicas stay read-only across restarts
        "",
    ]))
    if not (data / "mysql").exists():
        if template is not None:
            subprocess.run(["cp", "-a", str(template), str(data)], check=True, capture_output=True)
        else:
            res = subprocess.run(["mariadb-install-db", f"--defaults-file={cnf}", "--user=mysql",
                                  "--auth-root-authentication-method=socket", "--skip-test-db"],
                                 capture_output=True, text=True, timeout=120)
            if res.returncode != 0:
                lines = (res.stdout + res.stderr).strip().splitlines()
                errors = [ln for ln in lines if "error" in ln.lower()][:6] or lines[:6]
                raise RuntimeError(f"mariadb-install-db on {host.name} failed: {' | '.join(errors)}")
    return write_launcher(host, "mariadb", f"/usr/sbin/mariadbd --defaults-file={cnf} --user=mysql",
                          host.dir / "mariadb.launch.pid", log=host.dir / "mariadbd.out")


# -- a standalone PostgreSQL (no replication): the "single node" side of a comparison -----------
def single_postgres_setup(host: LabHost, superuser_pw: str) -> Path:
    data = Paths.single_pg_data(host)
    run_dir = host.dir / "pgsingle-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "postgres", "postgres")
    if not (data / "PG_VERSION").exists():
        data.mkdir(mode=0o700, exist_ok=True)
        shutil.chown(data, "postgres", "postgres")
        pwfile = host.dir / "pgsingle.pw"
        pwfile.write_text(superuser_pw + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        pwfile.chmod(0o600)
        subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", str(PG_BIN / "initdb"),
                        "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile), "--auth-local=trust",
                        "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"],
                       check=True, capture_output=True, timeout=120)
        pwfile.unlink()
        with open(data / "postgresql.conf", "a") as fh:
            fh.write("\n".join([
                f"listen_addresses = '{host.address},127.0.0.1'", f"port = {PG_PORT}",
                f"unix_socket_directories = '{run_dir}'", "dynamic_shared_memory_type = mmap",
                "shared_buffers = 64MB", "max_connections = 200", "wal_level = replica", ""]))
        with open(data / "pg_hba.conf", "a") as fh:
            fh.write(f"host all all {SUBNET_PREFIX}.0/24 scram-sha-256\n")
    return write_launcher(host, "postgres", f"{PG_BIN / 'postgres'} -D {data}", host.dir / "pgsingle.launch.pid",
                          log=host.dir / "pgsingle.log", user="postgres")


# -- PgBouncer in front of the standalone PostgreSQL: a second route to the same database ------
PGBOUNCER_PORT = 6432


def pgbouncer_setup(host: LabHost, superuser_pw: str) -> Path:
    """PgBouncer on `host` (session pooling: chaoskit's clients use server-side prepared statements,
    which transaction pooling in PgBouncer 1.18 does not carry) to the standalone PostgreSQL on the
    same host. Clients authenticate with SCRAM against the userlist, and PgBouncer with the same
    secret to the server. libpq's `options` startup parameter (chaoskit sets statement_timeout
    with it) is not one PgBouncer 1.18 passes on: it is ignored, so through this route a statement
    is bounded by the client's own deadline only. Each login is logged (`login attempt`): which
    route a load took can be counted from PgBouncer's own record."""
    run_dir = host.dir / "pgbouncer"
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "postgres", "postgres")
    users = run_dir / "userlist.txt"
    users.write_text(f'"postgres" "{superuser_pw}"\n')
    shutil.chown(users, "postgres", "postgres")
    users.chmod(0o600)
    ini = run_dir / "pgbouncer.ini"
    ini.write_text("\n".join([
        "[databases]", f"postgres = host=127.0.0.1 port={PG_PORT} dbname=postgres", "",
        "[pgbouncer]", f"listen_addr = {host.address}", f"listen_port = {PGBOUNCER_PORT}",
        f"unix_socket_dir = {run_dir}", "auth_type = scram-sha-256", f"auth_file = {users}",
        "pool_mode = session", "max_client_conn = 1000", "default_pool_size = 200",
        "ignore_startup_parameters = extra_float_digits,options", f"logfile = {run_dir / 'pgbouncer.log'}",
        "log_connections = 1", "log_disconnections = 0", "",
    ]))
    ini.chmod(0o644)
    return write_launcher(host, "pgbouncer", f"/usr/sbin/pgbouncer {ini}", host.dir / "pgbouncer.launch.pid",
                          log=host.dir / "pgbouncer.out", user="postgres")
