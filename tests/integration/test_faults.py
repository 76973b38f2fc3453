"""Faults for real on the lab: each kind's effect observed, reverted, verified gone; the host
heals itself when the controller is SIGKILLed; `recover` heals earlier; bad targets touch nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chaoskit.errors import InputError, PreflightError
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import FaultBase, parse_fault
from chaoskit.hostmetrics import sampler_for, window_means
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory
from chaoskit.inventory.remote import SshRemote
from chaoskit.topology.roles import discover_roles

# run on a lab no other session drills at the same time (`.ci/run`, tests/integration/lanes.py):
ALONE = ("stress faults load the machine's CPU, one test reads every lab host's CPU, and `fault recover` "
         "heals every host")

INV = "inventories/lab.yaml"


def FaultSpec(**fields: object) -> FaultBase:  # reads like the model it builds
    return parse_fault(fields)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chaoskit", *args], capture_output=True, text=True, timeout=timeout)


def journal_entries(fm: FaultManager) -> list[dict]:
    return [e for entries in fm.journaled().values() if isinstance(entries, list) for e in entries]


def can_connect(pool: RemotePool, src: str, address: str, port: int, timeout: float = 1.0) -> bool:
    code = f"import socket; socket.create_connection(('{address}', {port}), timeout={timeout}).close()"
    return pool.get(src).shell(f"python3 -c \"{code}\" 2>/dev/null", check=False).exited == 0


@pytest.fixture
def fm(lab: Inventory, pool: RemotePool):
    manager = FaultManager(lab, pool)
    yield manager
    manager.revert_all()
    assert journal_entries(manager) == [], "a test left a journaled fault behind"


def wait_for(predicate, seconds: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def pg_roles(lab: Inventory) -> dict[str, str]:
    return {r.member: r.sql_role for r in discover_roles(lab.clusters["pg"], lab)}


def healthy_pg(lab: Inventory) -> bool:
    roles = discover_roles(lab.clusters["pg"], lab)
    return sorted(r.sql_role for r in roles) == ["primary", "replica", "replica"] and \
        all(r.manager_state in ("running", "streaming") for r in roles)


def test_partition_blocks_peer_but_not_controller_ssh(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    pg2 = lab.hosts["pg2"].address
    assert can_connect(pool, "pg1", pg2, 8008)
    (fault,) = fm.inject(FaultSpec(kind="partition", target="pg2", peers=("pg1",), ttl=60))
    assert fm.is_active(fault)
    assert not can_connect(pool, "pg1", pg2, 8008)  # blocked between the two hosts
    assert can_connect(pool, "pg3", pg2, 8008)  # others unaffected
    fresh = SshRemote(lab.hosts["pg2"], lab)  # a new SSH session from the controller still works
    try:
        assert fresh.run("hostname").stdout.strip() == "pg2"
    finally:
        fresh.close()
    fm.revert(fault)
    assert fault.revert_verified and not fm.is_active(fault)
    assert can_connect(pool, "pg1", pg2, 8008)
    assert "CK" not in pool.get("pg2").shell("iptables -S").stdout


def test_reject_partition_one_way(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    (fault,) = fm.inject(FaultSpec(kind="partition", target="pg3", peers=("pg1",), direction="in",
                                   action="reject", ttl=60))
    t0 = time.monotonic()
    assert not can_connect(pool, "pg1", lab.hosts["pg3"].address, 8008, timeout=3)
    assert time.monotonic() - t0 < 1.5  # a reset, not a timeout
    fm.revert(fault)
    assert fault.revert_verified


def _udp_loss(pool: RemotePool, lab: Inventory, n: int = 400) -> float:
    receiver = textwrap.dedent(f"""
        import socket, time
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{lab.hosts['pg2'].address}', 9555))
        s.settimeout(1.5); got = 0
        try:
            while True: s.recv(64); got += 1
        except socket.timeout: pass
        print(got)""")
    pool.get("pg2").shell(f"nohup python3 -c \"{receiver}\" > /tmp/ck-udp-count 2>&1 &")
    time.sleep(0.3)
    sender = (f"import socket,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
              f"[ (s.sendto(b'x', ('{lab.hosts['pg2'].address}', 9555)), time.sleep(0.001)) for _ in range({n}) ]")
    pool.get("pg1").shell(f"python3 -c \"{sender}\"")
    time.sleep(2.0)
    got = int(pool.get("pg2").shell("cat /tmp/ck-udp-count; rm -f /tmp/ck-udp-count").stdout.strip() or 0)
    return 1 - got / n


def test_random_loss_without_netem(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    assert _udp_loss(pool, lab) < 0.05
    (fault,) = fm.inject(FaultSpec(kind="loss", target="pg2", peers=("pg1",), loss_pct=40, direction="in", ttl=60))
    loss = _udp_loss(pool, lab)
    fm.revert(fault)
    assert 0.25 < loss < 0.55, loss  # 40% requested, 400 datagrams
    assert fault.revert_verified


def _transfer_seconds(pool: RemotePool, lab: Inventory, size: int = 200_000) -> float:
    sink = (f"import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('{lab.hosts['pg1'].address}', 9556)); s.listen(); c,_=s.accept(); "
            f"n=0\nwhile True:\n  b=c.recv(65536)\n  n+=len(b)\n  if not b: break")
    pool.get("pg1").shell(f"nohup python3 -c \"{sink}\" >/dev/null 2>&1 &")
    time.sleep(0.3)
    src = (f"import socket,time; t=time.time(); c=socket.create_connection(('{lab.hosts['pg1'].address}', 9556)); "
           f"c.sendall(b'x'*{size}); c.shutdown(socket.SHUT_WR); c.recv(1); print(time.time()-t)")
    return float(pool.get("pg2").shell(f"python3 -c \"{src}\"", timeout=60).stdout.strip())


def test_bandwidth_limit_slows_a_transfer(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    assert _transfer_seconds(pool, lab) < 0.5
    (fault,) = fm.inject(FaultSpec(kind="bandwidth", target="pg2", rate="1mbit", ttl=60))
    assert "tbf" in pool.get("pg2").shell("tc qdisc show dev eth0").stdout
    slow = _transfer_seconds(pool, lab)  # 200 kB at 1 Mbit/s: ~1.6 s
    fm.revert(fault)
    assert slow > 1.2, slow
    assert "tbf" not in pool.get("pg2").shell("tc qdisc show dev eth0").stdout
    assert _transfer_seconds(pool, lab) < 0.5


def test_pause_freezes_and_resumes(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    from chaoskit.db.registry import driver_for

    (fault,) = fm.inject(FaultSpec(kind="pause", target="role:replica", cluster="pg", processes=("postgres",),
                                   ttl=60))
    member = next(m for m in lab.clusters["pg"].members if m.host == fault.host)
    driver = driver_for(lab.clusters["pg"], lab, connect_timeout=1, op_timeout=1)
    with pytest.raises(Exception) as info:
        driver.connect_member(member)
    assert driver.classify(info.value) == "timeout"  # frozen: it answers nothing
    fm.revert(fault)
    conn = driver.connect_member(member)
    assert driver.is_writable(conn) is False
    conn.close()


def test_stress_runs_and_stops(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    (fault,) = fm.inject(FaultSpec(kind="stress", target="dcs1", cpu_workers=1, ttl=60))
    pids = pool.get("dcs1").shell(f"cat /var/lib/chaoskit/faults/dcs1/{fault.id}.pids").stdout.split()
    assert pids and fm.is_active(fault)
    fm.revert(fault)
    assert fault.revert_verified
    live = pool.get("dcs1").shell(f"ps -e -o pgid=,stat= | awk '$1 == {pids[1]} && $2 !~ /^Z/'").stdout
    assert live.strip() == ""


def _blkio_cgroup(pool: RemotePool, host: str, pid: int) -> str:
    out = pool.get(host).shell(f"cat /proc/{pid}/cgroup").stdout
    return next(line.split(":", 2)[2] for line in out.splitlines() if "blkio" in line.split(":")[1].split(","))


def test_disk_slow_throttles_the_primarys_writes_and_lets_go(lab: Inventory, pool: RemotePool,
                                                             fm: FaultManager) -> None:
    """disk_slow at 1 MB/s on the primary's PostgreSQL (the postmaster and every process of its
    tree) on its own lab disk: every byte of WAL a statement writes goes through the throttle, so
    the statement takes at least its WAL volume over the rate (less the first 1 MiB the throttle
    may let through in its first slices). Reverted: the postmaster is back in its own cgroup and
    the fault's cgroup is gone."""
    from chaoskit.db.registry import driver_for

    cluster = lab.clusters["pg"]
    primary = next(h for h, r in pg_roles(lab).items() if r == "primary")
    member = next(m for m in cluster.members if m.host == primary)
    postmaster = int(Path(lab.processes_on(primary)["postgres"].pid_file).read_text().split()[0])
    home = _blkio_cgroup(pool, primary, postmaster)
    driver = driver_for(cluster, lab, connect_timeout=2, op_timeout=120)
    conn = driver.connect_member(member)
    try:
        conn.execute("DROP TABLE IF EXISTS ck_disk_slow")
        (fault,) = fm.inject(FaultSpec(kind="disk_slow", target="role:primary", cluster="pg", processes=("postgres",),
                                       write_rate="1mbps", ttl=90))
        assert fault.host == primary and fm.is_active(fault)
        # under the host's own cgroup (chaoskit-lab/<host>): the host's I/O figures still count it
        assert home == f"/chaoskit-lab/{primary}"
        assert _blkio_cgroup(pool, primary, postmaster) == f"{home}/chaoskit-{fault.id}"
        lsn0 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        t0 = time.monotonic()
        conn.execute("CREATE TABLE ck_disk_slow AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 12000) g")
        elapsed = time.monotonic() - t0
        wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)::bigint", (lsn0,)).fetchone()[0]
        assert wal > 2 * 2**20, wal  # the statement wrote enough WAL to tell a throttle from none
        assert elapsed >= (wal - 2**20) / 1e6, (elapsed, wal)
        fm.revert(fault)
        assert fault.revert_verified
        assert _blkio_cgroup(pool, primary, postmaster) == home
        gone = pool.get(primary).shell(f"test -e /sys/fs/cgroup/blkio{home}/chaoskit-{fault.id}", check=False).exited
        assert gone != 0
    finally:
        conn.execute("DROP TABLE IF EXISTS ck_disk_slow")
        conn.close()


def test_stop_and_start_mariadb_replica(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    (fault,) = fm.inject(FaultSpec(kind="stop", target="my2", cluster="mariadb", processes=("mariadb",), ttl=60))
    pid_file = lab.clusters["mariadb"].members[1].processes["mariadb"].pid_file
    assert fm.is_active(fault)
    assert pool.get("my2").shell(f"kill -0 $(head -1 {pid_file})", check=False).exited != 0
    fm.revert(fault)
    assert fault.revert_verified
    from chaoskit.db.registry import driver_for

    driver = driver_for(lab.clusters["mariadb"], lab)
    member = lab.clusters["mariadb"].members[1]
    assert wait_for(lambda: _replicating(driver, member), 20)


def _replicating(driver, member) -> bool:  # type: ignore[no-untyped-def]
    try:
        conn = driver.connect_member(member)
    except Exception:
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            row = cur.fetchone()
            cols = [d[0] for d in cur.description]
        status = dict(zip(cols, row, strict=True)) if row else {}
        return status.get("Slave_IO_Running") == "Yes" and status.get("Slave_SQL_Running") == "Yes"
    finally:
        conn.close()


def test_kill_leader_is_replaced_by_patroni_and_rejoins(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    before = pg_roles(lab)
    old = next(h for h, r in before.items() if r == "primary")
    (fault,) = fm.inject(FaultSpec(kind="kill", target="role:primary", cluster="pg",
                                   processes=("patroni", "postgres"), ttl=120))
    assert fault.host == old and fm.is_active(fault)
    assert wait_for(lambda: any(r == "primary" and h != old for h, r in pg_roles(lab).items()), 40, 0.5), \
        "Patroni did not promote a replica"
    fm.revert(fault)  # restarts Patroni on the crashed node
    assert fault.revert_verified
    assert wait_for(lambda: healthy_pg(lab), 60, 0.5), pg_roles(lab)
    assert pg_roles(lab)[old] == "replica"


def test_netem_refused_where_the_kernel_lacks_it(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    from chaoskit.inventory.capabilities import probe_capabilities

    caps = probe_capabilities(pool.get("pg1"))
    if caps.netem:
        (fault,) = fm.inject(FaultSpec(kind="netem", target="pg1", delay_ms=20, ttl=30))
        assert "netem" in pool.get("pg1").shell("tc qdisc show dev eth0").stdout
        fm.revert(fault)
        assert fault.revert_verified
        return
    with pytest.raises(PreflightError, match=r"pg1: this kernel has no sch_netem"):
        fm.inject(FaultSpec(kind="netem", target="pg1", delay_ms=20, ttl=30))
    assert journal_entries(fm) == []
    pytest.skip(f"netem itself cannot run here: {caps.netem_reason}")


def test_host_heals_itself_when_the_controller_is_killed(lab: Inventory, pool: RemotePool, tmp_path) -> None:
    script = tmp_path / "controller.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, time
        from chaoskit.inventory.loader import load_inventory
        from chaoskit.faults.manager import FaultManager
        from chaoskit.faults.spec import parse_fault
        FaultSpec = lambda **f: parse_fault(f)
        fm = FaultManager(load_inventory("{INV}"))
        a = fm.inject(FaultSpec(kind="partition", target="pg3", peers=("pg1",), ttl=5))[0]
        b = fm.inject(FaultSpec(kind="pause", target="my2", cluster="mariadb", processes=("mariadb",), ttl=5))[0]
        print(json.dumps([a.id, a.t_effect, b.id]), flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    part_id, t_effect, pause_id = json.loads(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    manager = FaultManager(lab, pool)
    listed = {e["id"] for e in journal_entries(manager)}
    assert {part_id, pause_id} <= listed
    assert not can_connect(pool, "pg1", lab.hosts["pg3"].address, 8008)
    # the dead-man reverts at the deadline (5 s after injection), with a second of slack
    assert wait_for(lambda: journal_entries(manager) == [], max(0.5, t_effect + 5 + 1.5 - time.time()), 0.1)
    assert time.time() <= t_effect + 5 + 2.0
    assert can_connect(pool, "pg1", lab.hosts["pg3"].address, 8008)
    pid_file = lab.clusters["mariadb"].members[1].processes["mariadb"].pid_file
    state = pool.get("my2").shell(f"grep State /proc/$(head -1 {pid_file})/status").stdout
    assert "stopped" not in state.lower()


def test_recover_heals_before_the_deadline(lab: Inventory, pool: RemotePool) -> None:
    res = cli("fault", "inject", "-i", INV, "--kind", "partition", "--target", "pg2", "--peers", "pg3", "--ttl", "120s")
    assert res.returncode == 0, res.stderr
    fault_id = res.stdout.split()[0]
    listed = json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"]
    assert [f["id"] for f in listed] == [fault_id] and listed[0]["active"] and listed[0]["remaining_s"] > 100
    assert not can_connect(pool, "pg3", lab.hosts["pg2"].address, 8008)
    res = cli("recover", "-i", INV)
    assert res.returncode == 0, res.stderr
    assert f"{fault_id} reverted" in res.stdout
    assert json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"] == []
    assert can_connect(pool, "pg3", lab.hosts["pg2"].address, 8008)
    assert f"{fault_id}.deadman" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_fault_revert_by_id(lab: Inventory, pool: RemotePool) -> None:
    res = cli("fault", "inject", "-i", INV, "--kind", "stress", "--target", "dcs1", "--cpu", "1", "--ttl", "60s")
    assert res.returncode == 0, res.stderr
    fault_id = res.stdout.split()[0]
    res = cli("fault", "revert", "-i", INV, fault_id)
    assert res.returncode == 0 and "dcs1: reverted" in res.stdout, res.stdout + res.stderr
    again = cli("fault", "revert", "-i", INV, fault_id)  # the host's record says who reverted it and when
    assert again.returncode == 0 and "dcs1: already reverted (recover)" in again.stdout, again.stdout + again.stderr
    assert cli("fault", "revert", "-i", INV, "0" * 12).returncode == 2  # never journaled anywhere


@pytest.mark.parametrize(("args", "message"), [
    (["--kind", "kill", "--target", "nosuchhost"], "--target: unknown host 'nosuchhost'"),
    (["--kind", "pause", "--target", "role:sync_standby", "--cluster", "pg"], "has role sync_standby now"),
    (["--kind", "kill", "--target", "role:leader", "--cluster", "pg"], "--target: not a target"),
    (["--kind", "kill", "--target", "role:primary"], "--target: a role target needs a cluster"),
    (["--kind", "partition", "--target", "pg1", "--ttl", "0s"], "--ttl"),
    (["--kind", "warp", "--target", "pg1"], "--kind"),
    (["--kind", "loss", "--target", "pg1"], "--loss-pct: Field required"),
    (["--kind", "kill", "--target", "pg1;reboot"], "--target: not a target"),
    (["--kind", "stress", "--target", "pg1", "--cpu", "1", "--ttl", "5s", "--duration", "10s"], "must be at least"),
    (["--kind", "partition", "--target", "pg1", "--interface", "eth0"], "--interface: not an option of this fault"),
    (["--kind", "kill", "--target", "pg1", "--processes", "mysqld"], "no process mysqld"),
    # a rate is checked in the form the host gets: no space inside, ASCII digits
    (["--kind", "bandwidth", "--target", "pg1", "--rate", "10 mbit"], "--rate: not a rate"),
    (["--kind", "bandwidth", "--target", "pg1", "--rate", "\uff11mbit"], "--rate: not a rate"),
    # every field is reachable with --set, and refused there as typed
    (["--kind", "proxy", "--target", "pg1", "--peers", "pg2", "--set", "peer_port=5432", "--set", "bogus=1"],
     "--set bogus: not an option of this fault kind"),
    (["--kind", "stress", "--target", "pg1", "--set", "vm_bytes=$(reboot)"], "--set vm_bytes: not a valid size"),
    # a host's own services: named by what it declares, a tag target by its count and by a tag someone carries
    (["--kind", "kill", "--target", "mham", "--processes", "postgres"], "mham: no process postgres"),
    (["--kind", "stop", "--target", "tag:component=dcs"], "--target: not a tag target"),
    (["--kind", "stop", "--target", "tag:component=nosuch@all"], "no host of the inventory carries tag"),
])
def test_bad_input_touches_nothing(lab: Inventory, pool: RemotePool, args: list[str], message: str) -> None:
    res = cli("fault", "inject", "-i", INV, *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"] == []


def _lab_inventory_with(tmp_path, change) -> str:
    import yaml

    doc = yaml.safe_load(Path(INV).read_text(encoding="utf-8"))
    change(doc)
    path = tmp_path / "lab-changed.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def test_production_in_the_defaults_survives_a_host_tag(lab: Inventory, pool: RemotePool, tmp_path) -> None:
    """`defaults: {tags: {env: Production}}` and pg1 with a tag of its own: pg1 stays production
    (tags merge key by key, production is sticky), the fault is refused, nothing is journaled."""
    def production(doc: dict) -> None:
        doc["defaults"]["tags"] = {"env": "Production"}
        doc["hosts"]["pg1"]["tags"] = {"env": "staging", "team": "db"}

    inv = _lab_inventory_with(tmp_path, production)
    res = cli("fault", "inject", "-i", inv, "--kind", "pause", "--target", "pg1", "--cluster", "pg",
              "--duration", "5s")
    assert res.returncode == 1 and "refusing production-tagged targets (host pg1)" in res.stderr, res.stderr
    assert json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"] == []


@pytest.mark.parametrize(("path", "value", "message"), [
    (("clusters", "pg", "members", 0, "processes", "patroni", "pid_file"), "--help", "not a valid path"),
    (("clusters", "pg", "members", 0, "service"), "--help", "not a valid service"),
    (("hosts", "pg1", "address"), "fe80::1%eth0 -j ACCEPT", "scope id"),
    (("clusters", "pg", "password"), "hunter2", "inline secrets are not allowed"),
])
def test_a_hostile_inventory_value_is_refused_before_any_host(lab: Inventory, pool: RemotePool, tmp_path,
                                                             path: tuple, value: str, message: str) -> None:
    def put(doc: dict) -> None:
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    inv = _lab_inventory_with(tmp_path, put)
    res = cli("fault", "inject", "-i", inv, "--kind", "stop", "--target", "pg1", "--cluster", "pg", "--duration", "5s")
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "hunter2" not in res.stderr
    assert json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"] == []


def test_dry_run_prints_commands_and_touches_nothing(lab: Inventory) -> None:
    res = cli("fault", "inject", "-i", INV, "--kind", "partition", "--target", "pg1", "--peers", "pg2", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "# host pg1" in res.stdout and "CHAIN_IN=CK" in res.stdout and lab.hosts["pg2"].address in res.stdout
    assert json.loads(cli("fault", "list", "-i", INV, "--json").stdout)["faults"] == []


def test_unknown_role_member_raises_input_error(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    with pytest.raises(InputError):
        fm.inject(FaultSpec(kind="pause", target="role:sync_standby", cluster="pg", ttl=10))


def _streaming_replicas(lab: Inventory, primary: str) -> set[str]:
    from chaoskit.db.base import Driver
    from chaoskit.db.registry import driver_for

    cluster = lab.clusters["pg"]
    driver = driver_for(cluster, lab)
    conn = driver.connect_member(next(m for m in cluster.members if m.host == primary))
    try:
        return {r[0] for r in driver.query(conn, "SELECT application_name FROM pg_stat_replication "
                                                 "WHERE state = 'streaming'")}
    finally:
        Driver.close_quietly(conn)


def test_proxy_link_down_then_reset_on_a_replica_link(lab: Inventory, pool: RemotePool, fm: FaultManager) -> None:
    roles = pg_roles(lab)
    primary = next(h for h, r in roles.items() if r == "primary")
    replica = sorted(h for h, r in roles.items() if r == "replica")[0]
    address = lab.hosts[primary].address
    assert replica in _streaming_replicas(lab, primary)
    (down,) = fm.inject(FaultSpec(kind="proxy", target=replica, peers=(primary,), peer_port=5432, down=True, ttl=60))
    assert not can_connect(pool, replica, address, 5432)  # redirected to a port nobody listens on: refused
    assert can_connect(pool, replica, address, 8008)  # only the chosen link is cut
    assert wait_for(lambda: replica not in _streaming_replicas(lab, primary), 15)  # the walreceiver lost it
    fm.revert(down)
    assert can_connect(pool, replica, address, 5432)
    assert wait_for(lambda: replica in _streaming_replicas(lab, primary), 30)

    (reset,) = fm.inject(FaultSpec(kind="proxy", target=replica, peers=(primary,), peer_port=5432,
                                   reset_after_ms=400, ttl=60))
    probe = textwrap.dedent(f"""
        import socket, time
        s = socket.create_connection(('{address}', 5432), timeout=3)
        time.sleep(1.0)
        try:
            s.sendall(b'x' * 8); print('got', s.recv(16))
        except ConnectionResetError:
            print('reset')
    """)
    res = pool.get(replica).shell(f"python3 -c \"{probe}\"", check=False)
    assert res.stdout.strip() == "reset", res.stdout + res.stderr
    time.sleep(1.2)  # the relay writes its figures every second
    assert sum(s["resets"] for s in fm.proxy_stats(reset)) >= 1
    fm.revert(reset)
    assert wait_for(lambda: replica in _streaming_replicas(lab, primary), 30)


def test_a_stress_fault_shows_in_its_hosts_cpu_and_not_elsewhere(lab: Inventory, pool: RemotePool,
                                                                  fm: FaultManager) -> None:
    """The lab puts each host's processes in a cgroup of its own and the sampler reads it over SSH:
    one stress-ng CPU worker on pg3 (a busy loop: a whole core when it can get one, at least half a
    core on this 2-core machine whatever else runs) is at least 25 % of pg3's CPU (a share of both
    cores), and no other lab host's reading rises with it. The control node reads the machine's
    /proc, which holds every lab host: it sees the worker too, so it is not one of the others."""
    lab_hosts = ["dcs1", "pg1", "pg2", "pg3"]
    assert {lab.hosts[h].metrics.cgroup for h in lab_hosts} == {f"chaoskit-lab/{h}" for h in lab_hosts}
    sampler = sampler_for(lab, pool, lab_hosts)
    sampler.start()
    try:
        time.sleep(4)
        t_on = time.time()
        (fault,) = fm.inject(FaultSpec(kind="stress", target="pg3", cpu_workers=1, ttl=60))
        time.sleep(6)
        t_off = time.time()
        fm.revert(fault)
        time.sleep(1.5)
    finally:
        series = sampler.stop()
    assert all(series[h].error is None for h in lab_hosts), {h: series[h].error for h in lab_hosts}
    before = window_means(series, t_on - 4, t_on)
    # the seconds wholly inside the stress: the first second after the start has the worker's spawn
    during = window_means(series, t_on + 2, t_off)
    assert during["pg3"] is not None and during["pg3"] >= 25.0, (before, during)
    for host in ("dcs1", "pg1", "pg2"):
        assert during[host] is not None and during[host] < during["pg3"] - 15.0, (host, before, during)
    assert series["control"].source == "proc" and series["control"].samples
    # the kernel's own figures are not pg3's: null, with why
    assert set(series["pg3"].null_figures()) == {"cpu_iowait_pct", "cpu_steal_pct", "load1", "mem_used_pct"}
