"""Disaster recovery (`lab up --stack dr`): a PostgreSQL cluster whose WAL is archived and backed
up with pgBackRest to a repository host of its own, and a scratch host to restore it on.

- dr1: a one-member Patroni cluster (scope `chaoskit-dr`, its own etcd on dr1) archiving every WAL
  segment with `pgbackrest archive-push` (archive_timeout 10 s), and pgBackRest's TLS server, so
  the repository host reaches its data for a backup;
- bk1: the repository (`repo1-path` on a filesystem of its own, so a full disk stays there) and
  pgBackRest's TLS server, which dr1's archive-push and rs1's restore talk to; backups run here,
  as on a dedicated repository host;
- rs1: the restore target, a host that belongs to no cluster: PostgreSQL's binaries, a data
  directory a restore fills and a launcher that starts what was restored there (listening on
  rs1's address, archiving off, UTC log stamps in milliseconds).

pgBackRest's hosts talk TLS with client certificates (pgBackRest's `server` command) signed by a
CA the build makes. Lab hosts share one filesystem, so each host has its own configuration, log,
lock and spool directories under its host directory (pgBackRest's defaults would be shared).
The clients name the repository's path too: the repository host's TLS server takes the path the
client sends (without it, pgBackRest's default), not its own configuration's.
Its own cluster rather than the default Patroni cluster's: the CI drills both at once. Its own
DCS too: the default stacks' drills take dcs1's etcd down, and a Patroni without its DCS demotes
its primary (a backup then found no primary: "are all available clusters in recovery?")."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from chaoskit.lab import daemons
from chaoskit.lab.recipes import Build, postgres_cluster, psql, run_in, service, wait_tcp
from chaoskit.lab.recipes.patroni import rest
from chaoskit.lab.spec import ETCD_PORT, PATRONI_PORT, PG_PORT, LabHost, LabSpec, Paths

NAME = "dr"
SCOPE = "chaoskit-dr"
STANZA = "dr"
TLS_PORT = 8432  # pgBackRest's TLS server (its default port)
ARCHIVE_TIMEOUT_S = 10
SOURCE = LabHost("dr1", 91, "pgdr", NAME)
REPO = LabHost("bk1", 95, "pgbackrest-repo", NAME)
RESTORE = LabHost("rs1", 96, "pg-restore", NAME)
HOSTS = (SOURCE, REPO, RESTORE)
CLIENT_CN = "pgbackrest-client"


def tls_dir() -> Path:
    return Paths.root / "pgbackrest-tls"


def config(host: LabHost) -> Path:
    return host.dir / "pgbackrest.conf"


def repo_path() -> Path:
    return Paths.pg_disk(REPO) / "repo"


def restore_log() -> Path:
    return RESTORE.dir / "postgres.log"


def _chown(*paths: Path) -> None:
    for p in paths:
        shutil.chown(p, "postgres", "postgres")


def make_tls() -> None:
    """A CA, a server certificate per pgBackRest host (its address as a DNS subject alternative
    name too: pgBackRest matches the host it dials against CN and DNS names only)
    and the client certificate every host presents; kept across stack rebuilds, like the SSH keys."""
    d = tls_dir()
    d.mkdir(parents=True, exist_ok=True)
    _chown(d)
    d.chmod(0o750)

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=60)

    if not (d / "ca.crt").exists():
        run("openssl", "req", "-new", "-x509", "-nodes", "-days", "3650", "-subj", "/CN=chaoskit-lab-pgbackrest-ca",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    for name, address in [(h.name, h.address) for h in (SOURCE, REPO)] + [(CLIENT_CN, None)]:
        if (d / f"{name}.crt").exists():
            continue
        run("openssl", "req", "-new", "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
            "-out", str(d / f"{name}.csr"))
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName=DNS:{name},DNS:{address},IP:{address}\n" if address
                       else "extendedKeyUsage=clientAuth\n")
        run("openssl", "x509", "-req", "-days", "3650", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
            "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-extfile", str(ext), "-out", str(d / f"{name}.crt"))
    for f in d.iterdir():
        _chown(f)
        f.chmod(0o600)


def _host_dirs(host: LabHost) -> dict[str, Path]:
    dirs = {k: host.dir / f"pgbackrest-{k}" for k in ("log", "lock", "spool")}
    for p in (host.dir, *dirs.values()):
        p.mkdir(parents=True, exist_ok=True)
        _chown(p)
    return dirs


def _common(host: LabHost) -> list[str]:
    dirs = _host_dirs(host)
    return [f"log-path={dirs['log']}", f"lock-path={dirs['lock']}", f"spool-path={dirs['spool']}",
            "log-level-file=detail"]


def _server(host: LabHost) -> list[str]:
    d = tls_dir()
    return [f"tls-server-address={host.address}", f"tls-server-port={TLS_PORT}", f"tls-server-ca-file={d / 'ca.crt'}",
            f"tls-server-cert-file={d / f'{host.name}.crt'}", f"tls-server-key-file={d / f'{host.name}.key'}",
            f"tls-server-auth={CLIENT_CN}={STANZA}"]


def _client(prefix: str) -> list[str]:
    d = tls_dir()
    return [f"{prefix}-host-type=tls", f"{prefix}-host-port={TLS_PORT}", f"{prefix}-host-ca-file={d / 'ca.crt'}",
            f"{prefix}-host-cert-file={d / f'{CLIENT_CN}.crt'}", f"{prefix}-host-key-file={d / f'{CLIENT_CN}.key'}"]


def write_configs() -> None:
    source_data = Paths.pg_data(SOURCE)
    files = {
        REPO: ["[global]", f"repo1-path={repo_path()}", "repo1-retention-full=2", "start-fast=y", "compress-type=lz4",
               *_common(REPO), *_server(REPO), "", f"[{STANZA}]", f"pg1-host={SOURCE.address}", *_client("pg1"),
               f"pg1-path={source_data}", f"pg1-socket-path={SOURCE.dir / 'run'}", f"pg1-port={PG_PORT}"],
        SOURCE: ["[global]", f"repo1-host={REPO.address}", *_client("repo1"), f"repo1-path={repo_path()}",
                 "compress-type=lz4", *_common(SOURCE), *_server(SOURCE), "", f"[{STANZA}]", f"pg1-path={source_data}",
                 f"pg1-socket-path={SOURCE.dir / 'run'}", f"pg1-port={PG_PORT}"],
        RESTORE: ["[global]", f"repo1-host={REPO.address}", *_client("repo1"), f"repo1-path={repo_path()}",
                  *_common(RESTORE), "",
                  f"[{STANZA}]", f"pg1-path={Paths.pg_data(RESTORE)}"],
    }
    for host, lines in files.items():
        config(host).write_text("\n".join(lines) + "\n")
        _chown(config(host))
        config(host).chmod(0o640)


def archive_command() -> str:
    return f"pgbackrest --config={config(SOURCE)} --stanza={STANZA} archive-push %p"


def restore_launcher() -> Path:
    """What starts a restored data directory on rs1: PostgreSQL itself, on rs1's address and its
    own socket directory, archiving off (a restored copy must never push WAL into the source's
    archive), its log to stderr with millisecond UTC stamps (the restore's phases are read there).
    The authentication files are the restored copies: the postgresql.conf Patroni wrote names the
    source's own (`hba_file`, `ident_file` under dr1's data directory), which a restore host
    elsewhere does not have; on this one filesystem the restore read dr1's live files until a
    drill lost dr1's data directory."""
    run_dir = RESTORE.dir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    _chown(run_dir)
    argv = [str(daemons.PG_BIN / "postgres"), "-D", str(Paths.pg_data(RESTORE)),
            "-c", f"listen_addresses={RESTORE.address}", "-c", f"port={PG_PORT}",
            "-c", f"unix_socket_directories={run_dir}", "-c", "archive_mode=off", "-c", "logging_collector=off",
            "-c", "log_line_prefix=%m [%p] ", "-c", "log_timezone=UTC", "-c", "shared_buffers=32MB",
            "-c", "hot_standby=on", "-c", f"hba_file={Paths.pg_data(RESTORE) / 'pg_hba.conf'}",
            "-c", f"ident_file={Paths.pg_data(RESTORE) / 'pg_ident.conf'}"]
    return daemons.write_launcher(RESTORE, "postgres", shlex.join(argv), RESTORE.dir / "postgres.launch.pid",
                                  log=restore_log(), user="postgres")


def _pgbackrest(host: LabHost, *args: str, timeout: float = 300) -> str:
    res = run_in(host, ["pgbackrest", f"--config={config(host)}", f"--stanza={STANZA}", *args], user="postgres",
                 timeout=timeout)
    return res.stdout


def build(b: Build) -> None:
    make_tls()
    for h in HOSTS:
        _host_dirs(h)
    repo_path().mkdir(parents=True, exist_ok=True)
    _chown(repo_path())
    Paths.pg_data(RESTORE).mkdir(parents=True, exist_ok=True)
    _chown(Paths.pg_data(RESTORE))
    Paths.pg_data(RESTORE).chmod(0o700)
    write_configs()
    restore_launcher()
    for h in (REPO, SOURCE):
        b.launch(f"{h.name}/pgbackrest", daemons.write_launcher(
            h, "pgbackrest", f"pgbackrest --config={config(h)} server", h.dir / "pgbackrest.pid",
            log=h.dir / "pgbackrest-server.out", user="postgres"), h.dir / "pgbackrest.pid")
    # the cluster's own DCS, on its one member's host: the base's etcd (dcs1) is the default
    # stacks' fault target (a drill there takes it down), and a Patroni that loses its DCS demotes
    b.launch(f"{SOURCE.name}/etcd", daemons.etcd_setup(SOURCE), SOURCE.dir / "etcd.pid")
    # (its data lives in dr1's host directory, which `lab down --stack dr` removes: a stack added
    # again finds no key of its old cluster, whose member would wait for a leader for ever)
    wait_tcp(SOURCE.address, ETCD_PORT, b.deadline, f"etcd on {SOURCE.name}")
    b.launch(f"{SOURCE.name}/patroni", daemons.patroni_setup(
        SOURCE, SOURCE, b.flavour, b.secrets["pg_superuser"], b.secrets["pg_replication"], scope=SCOPE,
        # commit timestamps kept: a test recounts which rows a restore must hold by their commit time
        parameters={"archive_mode": "on", "archive_command": archive_command(),
                    "archive_timeout": f"{ARCHIVE_TIMEOUT_S}s", "track_commit_timestamp": "on"}),
        Paths.patroni_pid(SOURCE))
    for h in (REPO, SOURCE):
        wait_tcp(h.address, TLS_PORT, b.deadline, f"pgBackRest's TLS server on {h.name}")
    b.wait(lambda: _leader(b.spec), f"the DR Patroni cluster (logs under {SOURCE.dir})")
    # the stanza (idempotent), then pgBackRest's own check: a WAL switch archived end to end
    _pgbackrest(REPO, "stanza-create", timeout=b.left())
    _pgbackrest(REPO, "check", timeout=b.left())
    # a first full backup, as a real repository has one: a restore target always has a backup
    # before it, whether or not a drill's own backup ended before its target
    if not any(repo_path().glob("backup/*/*F")):
        _pgbackrest(REPO, "backup", "--type=full", timeout=b.left())
    b.wait(lambda: health(b.spec), "the DR stack")


def _leader(spec: LabSpec) -> tuple[bool, str]:
    _, data = rest(f"http://{SOURCE.address}:{PATRONI_PORT}/cluster")
    members = (data or {}).get("members") if isinstance(data, dict) else None
    if not members:
        return False, "dr: Patroni's REST API not answering"
    m = members[0]
    ok = m.get("role") == "leader" and m.get("state") == "running"
    return ok, "ok" if ok else f"dr: {m.get('name')}={m.get('role')}/{m.get('state')}"


def health(spec: LabSpec) -> tuple[bool, str]:
    ok, why = _leader(spec)
    if not ok:
        return ok, why
    for h in (REPO, SOURCE):
        try:
            with socket.create_connection((h.address, TLS_PORT), timeout=1):
                pass
        except OSError as exc:
            return False, f"dr: pgBackRest's TLS server on {h.name}: {exc}"
    try:
        failed = psql(str(SOURCE.dir / "run"), PG_PORT, "SELECT coalesce(last_failed_time > "
                      "coalesce(last_archived_time, '-infinity'), false) FROM pg_stat_archiver")
    except Exception as exc:
        return False, f"dr: postgres: {exc}"
    if failed.strip() == "t":
        return False, "dr: archiving fails (pg_stat_archiver: the last attempt failed)"
    return True, "ok"


def clusters(spec: LabSpec) -> dict[str, Any]:
    pg = postgres_cluster([SOURCE], lambda h: PG_PORT,
                          {"kind": "patroni", "api": {"port": PATRONI_PORT},
                           "dcs": {"endpoints": [f"{SOURCE.address}:{ETCD_PORT}"], "scope": SCOPE}},
                          "patroni", Paths.patroni_pid,
                          lambda h: {"patroni": h.dir / "patroni.log", "postgres": h.dir / "patroni.out"})
    pg["backup"] = {
        "tool": "pgbackrest", "stanza": STANZA,
        "repository": {"host": REPO.name, "config": str(config(REPO)), "path": str(repo_path())},
        "restore_to": {"host": RESTORE.name, "config": str(config(RESTORE)), "data_dir": str(Paths.pg_data(RESTORE)),
                       "port": PG_PORT, "log": str(restore_log()), "os_user": "postgres"},
    }
    return {"pg-dr": pg}


def host_services(spec: LabSpec) -> dict[str, Any]:
    """The repository's TLS server (a fault target: stop it and archiving fails), and the restore
    host's PostgreSQL (started by a restore, found by its data directory's pid file)."""
    data = Paths.pg_data(RESTORE)
    return {
        REPO.name: {"tags": {"component": "backup-repository"},
                    "processes": {"pgbackrest": service(REPO.dir / "pgbackrest.pid", "pgbackrest",
                                                        Paths.launcher(REPO, "pgbackrest"))}},
        RESTORE.name: {"tags": {"component": "restore-target"},
                       "processes": {"postgres": service(data / "postmaster.pid", "postgres",
                                                         Paths.launcher(RESTORE, "postgres"))},
                       "logs": {"postgres": str(restore_log())}},
    }


def postgres_data(spec: LabSpec) -> list[Path]:
    return [Paths.pg_data(SOURCE), Paths.pg_data(RESTORE)]
