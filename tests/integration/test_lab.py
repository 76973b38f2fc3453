"""The lab is real: SSH (sudo user, root, jump host), Patroni + streaming replicas, MariaDB GTID
replication, clock offsets, and a teardown that leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from chaoskit.db.registry import driver_for
from chaoskit.inventory.clock import measure_offset
from chaoskit.inventory.fanout import RemotePool, fan_out_pool
from chaoskit.inventory.loader import load_inventory
from chaoskit.inventory.models import Inventory
from chaoskit.inventory.remote import SshRemote
from chaoskit.lab import manager
from chaoskit.lab.recipes import lab_spec
from chaoskit.lab.spec import CGROUP_ROOT, LAB_CGROUP_PARENT, LAB_CONTROLLERS, Paths
from chaoskit.topology.roles import discover_roles

# run on a lab no other session drills at the same time (`.ci/run`, tests/integration/lanes.py):
ALONE = "it takes the lab down and brings it up again"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chaoskit", *args], capture_output=True, text=True, timeout=120)


def test_ssh_to_every_host_as_sudo_user(lab: Inventory, pool: RemotePool) -> None:
    results = fan_out_pool(pool, lambda r: (r.run("hostname; id -u").stdout.split(),
                                            r.run("id -u", sudo=True).stdout.strip()))
    for name, res in results.items():
        assert not isinstance(res, BaseException), f"{name}: {res}"
        (hostname, uid), root_uid = res
        assert hostname == name  # each host has its own UTS name
        assert uid != "0"  # logged in as the unprivileged lab user...
        assert root_uid == "0"  # ...and escalated through sudo


def test_persistent_shell_is_root_and_fast(lab: Inventory, pool: RemotePool) -> None:
    remote = pool.get("pg1")
    assert remote.shell("id -u").stdout.strip() == "0"
    t0 = time.monotonic()
    for _ in range(20):
        remote.shell("true")
    assert (time.monotonic() - t0) / 20 < 0.05
    res = remote.shell("echo out; echo err >&2; exit_code() { return 3; }; exit_code", check=False)
    assert (res.exited, res.stdout.strip(), res.stderr.strip()) == (3, "out", "err")


def test_jump_host_is_really_used(lab: Inventory, pool: RemotePool) -> None:
    conn = pool.get("my1").run("echo $SSH_CONNECTION").stdout.split()
    jump = lab.hosts["dcs1"].address
    assert conn[0] == jump, f"my1 saw the SSH client at {conn[0]}, expected the jump host {jump}"
    direct = pool.get("pg1").run("echo $SSH_CONNECTION").stdout.split()
    assert direct[0] != jump


def test_root_login_and_ansible_shaped_inventory(lab: Inventory, tmp_path: Path) -> None:
    inv_file = tmp_path / "ansible.yaml"
    inv_file.write_text(f"""
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: {Paths.client_key}
    chaoskit_known_hosts: {Paths.known_hosts}
  children:
    dbs:
      hosts:
        pg2: {{ansible_host: {lab.hosts['pg2'].address}}}
        my2:
          ansible_host: {lab.hosts['my2'].address}
          ansible_user: ckops
          ansible_become: true
          ansible_ssh_common_args: "-o ProxyJump=root@{lab.hosts['dcs1'].address}"
""")
    inv = load_inventory(inv_file)
    with RemotePool(inv) as p:
        assert p.get("pg2").run("id -u").stdout.strip() == "0"
        assert p.get("my2").run("id -u", sudo=True).stdout.strip() == "0"
        assert p.get("my2").run("echo $SSH_CONNECTION").stdout.split()[0] == lab.hosts["dcs1"].address


def test_unknown_host_key_is_rejected(lab: Inventory, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = lab.hosts["pg1"].model_copy(update={"known_hosts": str(empty)})
    remote = SshRemote(host)
    with pytest.raises(Exception, match="known_hosts"):
        remote.run("true")
    remote.close()


def test_each_postgres_member_has_a_filesystem_of_its_own(lab: Inventory) -> None:
    """Patroni's members, on loop images (pg_auto_failover's and repmgr's, on tmpfs: test_ha_managers)."""
    from labdisks import assert_members_on_their_own_bounded_disks

    assert_members_on_their_own_bounded_disks(lab, "pg")


def test_one_leader_two_streaming_replicas(lab: Inventory) -> None:
    roles = discover_roles(lab.clusters["pg"], lab)
    assert sorted(r.sql_role for r in roles) == ["primary", "replica", "replica"]
    assert sorted(r.manager_role or "" for r in roles) == ["leader", "replica", "replica"]
    for r in roles:  # SQL and Patroni agree on who leads
        assert (r.sql_role == "primary") == (r.manager_role == "leader")
    driver = driver_for(lab.clusters["pg"], lab)
    with driver.connect_writer() as conn:
        rows = conn.execute("SELECT application_name, state FROM pg_stat_replication").fetchall()
    assert sorted(state for _, state in rows) == ["streaming", "streaming"]


def test_row_on_leader_reaches_both_replicas(lab: Inventory) -> None:
    cluster = lab.clusters["pg"]
    driver = driver_for(cluster, lab)
    token = uuid.uuid4().hex
    with driver.connect_writer() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS chaoskit_lab_probe (token text primary key)")
        conn.execute("INSERT INTO chaoskit_lab_probe VALUES (%s)", (token,))
        leader = conn.execute("SELECT host(inet_server_addr())").fetchone()[0]
    replicas = [m for m in cluster.members if lab.member_address(m) != leader]
    assert len(replicas) == 2
    deadline = time.monotonic() + 10
    for member in replicas:
        while True:
            with driver.connect_member(member) as conn:
                assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
                try:
                    found = conn.execute("SELECT count(*) FROM chaoskit_lab_probe WHERE token = %s",
                                         (token,)).fetchone()[0]
                except psycopg.errors.UndefinedTable:
                    found = 0
            if found == 1:
                break
            assert time.monotonic() < deadline, f"row not on {member.host}"
            time.sleep(0.05)


def test_mariadb_replica_applies_a_write(lab: Inventory) -> None:
    cluster = lab.clusters["mariadb"]
    driver = driver_for(cluster, lab)
    token = uuid.uuid4().hex
    conn = driver.connect_writer()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS chaoskit_lab_probe (token varchar(64) primary key)")
            cur.execute("INSERT INTO chaoskit_lab_probe VALUES (%s)", (token,))
    finally:
        conn.close()
    replica = cluster.members[1]
    deadline = time.monotonic() + 10
    while True:
        rconn = driver.connect_member(replica)
        try:
            assert not driver.is_writable(rconn)
            with rconn.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.tables WHERE table_name='chaoskit_lab_probe'")
                exists = cur.fetchone()[0]
                found = 0
                if exists:
                    cur.execute("SELECT count(*) FROM chaoskit_lab_probe WHERE token=%s", (token,))
                    found = cur.fetchone()[0]
        finally:
            rconn.close()
        if found == 1:
            break
        assert time.monotonic() < deadline, "write did not reach the MariaDB replica"
        time.sleep(0.05)


def test_clock_offsets_measured_with_small_uncertainty(lab: Inventory, pool: RemotePool) -> None:
    results = fan_out_pool(pool, measure_offset)
    for name, off in results.items():
        assert not isinstance(off, BaseException), f"{name}: {off}"
        # Known issue: through a jump host the forwarded leg sometimes stalls ~40 ms per reply
        # (Nagle/delayed ACK on the jump host's forwarded socket), so the bound there is looser.
        bound = 0.050 if lab.hosts[name].jump else 0.010
        assert off.uncertainty_s < bound, f"{name}: ±{off.uncertainty_s * 1000:.2f} ms"
        # the lab shares the control node's clock: the true offset is 0, so it must lie in the bracket
        assert abs(off.offset_s) <= off.uncertainty_s + 0.002, f"{name}: {off}"


def test_inventory_check_cli(lab: Inventory) -> None:
    res = cli("inventory", "check", "-i", "inventories/lab.yaml", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert all(h["reachable"] for h in report["hosts"])
    caps = report["hosts"][0]["capabilities"]
    assert caps["iptables"] and {"tc", "iptables-restore", "base64", "sha256sum", "python3.7"} <= set(caps["have"])
    probe = "ip link set lo up && tc qdisc add dev lo root netem delay 1ms"
    local = subprocess.run(["unshare", "-n", "sh", "-c", probe], capture_output=True, text=True)
    assert caps["netem"] == (local.returncode == 0)  # same kernel: the host's answer matches ours
    if not caps["netem"]:
        assert caps["netem_reason"]
    pg_roles = sorted(m["sql_role"] for m in report["clusters"]["pg"]["members"])
    assert pg_roles == ["primary", "replica", "replica"]
    assert sorted(m["sql_role"] for m in report["clusters"]["mariadb"]["members"]) == ["primary", "replica"]


def test_inventory_check_reports_unreachable_host(lab: Inventory, tmp_path: Path) -> None:
    inv_file = tmp_path / "inv.yaml"
    inv_file.write_text(f"""
defaults: {{user: root, key_file: {Paths.client_key}, known_hosts: {Paths.known_hosts}, connect_timeout: 1}}
hosts:
  pg1: {{address: {lab.hosts['pg1'].address}}}
  ghost: {{address: {lab.hosts['pg1'].address}, port: 2}}
""")
    res = cli("inventory", "check", "-i", str(inv_file), "--json")
    assert res.returncode == 1
    hosts = {h["name"]: h for h in json.loads(res.stdout)["hosts"]}
    assert hosts["pg1"]["reachable"] and not hosts["ghost"]["reachable"]
    assert "Traceback" not in res.stderr


def test_lab_status_json(lab: Inventory) -> None:
    res = cli("lab", "status", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    up = set(data["stacks"])
    assert {"patroni", "mariadb"} <= up
    assert {h["name"] for h in data["hosts"]} == {h.name for h in lab_spec().of_stacks(up)}
    assert all(h["ssh"] for h in data["hosts"])
    pg = data["clusters"]["pg"]
    assert pg["ha"] == "patroni"
    assert sorted(m["role"] for m in pg["members"]) == ["primary", "replica", "replica"]
    assert sorted(m["manager_role"] for m in pg["members"]) == ["leader", "replica", "replica"]
    assert all(set(m) >= {"name", "role", "manager_role", "state", "lag_bytes"} for m in pg["members"])
    assert sorted(m["role"] for m in data["clusters"]["mariadb"]["members"]) == ["primary", "replica"]


def test_one_stack_goes_down_alone_and_comes_back(lab: Inventory) -> None:
    """`down --stack` removes that stack's hosts and nothing else (the test session drops each
    added stack after its module this way); `up` adds it back beside the others."""
    spec = lab_spec()
    gone = [h for h in spec.hosts if h.stack == "mariadb"]
    kept = [h for h in spec.hosts if h.stack in ("base", "patroni")]
    res = cli("lab", "down", "--stack", "mariadb")
    assert res.returncode == 0, res.stderr
    assert "mariadb" not in manager.up_stacks() and "patroni" in manager.up_stacks()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not {h.netns for h in gone} & set(netns) and {h.netns for h in kept} <= set(netns)
    assert not any(h.dir.exists() or Path(f"/sys/class/net/{h.veth}").exists() for h in gone)
    # their cgroups gone (pid 1 reaps the last of their processes in its own time: a bounded wait)
    deadline = time.monotonic() + 16
    while any(d.exists() for h in gone for d in h.cgroup_dirs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(d.exists() for h in gone for d in h.cgroup_dirs())
    assert all(d.exists() for h in kept for d in h.cgroup_dirs())
    running = [c for c in (p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists())
               if any(f"/hosts/{h.name}/".encode() in c for h in gone)]
    assert running == []
    assert manager.health(stacks=("patroni",))[0]  # the other stack and the base never noticed
    assert set(json.loads(Paths.state.read_text())["daemons"]) >= {f"{h.name}/sshd" for h in kept}
    assert not any(k.split("/")[0] in {h.name for h in gone} for k in json.loads(Paths.state.read_text())["daemons"])
    added = manager.up(stacks=("mariadb",))
    assert added.added == ("mariadb",) and not added.cleaned_leftovers
    manager.wait_healthy(90)
    roles = discover_roles(lab.clusters["mariadb"], lab)
    assert sorted(r.sql_role for r in roles) == ["primary", "replica"]


def test_up_is_idempotent(lab: Inventory) -> None:
    pids = json.loads(Paths.state.read_text())["daemons"]
    res = manager.up()
    assert res.already_up
    assert json.loads(Paths.state.read_text())["daemons"] == pids


def _lab_leftovers() -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith("ck-")]
    if Path("/sys/class/net/ckbr0").exists():
        found.append("bridge ckbr0")
    found += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith("/var/lib/chaoskit-lab")]  # the members' own disks
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [f"loop device {ln.split(':')[0]}" for ln in loops.splitlines() if "/var/lib/chaoskit-lab" in ln]
    found += [f"cgroup {d}" for c in LAB_CONTROLLERS if (d := CGROUP_ROOT / c / LAB_CGROUP_PARENT).exists()]
    listen = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    found += [f"listener {ln.split()[3]}" for ln in listen.splitlines() if "10.77.0." in ln]
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "State:\tZ" not in status and "/var/lib/chaoskit-lab" in cmdline:
            found.append(f"process {proc.name}: {cmdline[:80]}")
    return found


def test_up_revives_killed_daemons_in_place(lab: Inventory) -> None:
    """A crash of every daemon (not of the lab): `up` starts them again where they were, no rebuild."""
    state = json.loads(Paths.state.read_text())
    created = state["created"]
    for entry in state["daemons"].values():  # each daemon as it runs now (drills restart some)
        pid = Path(entry["pid_file"]).read_text().split("\n", 1)[0].strip()
        subprocess.run(["kill", "-9", pid], check=False)
    res = manager.up()
    assert res.revived and not res.already_up and not res.cleaned_leftovers and res.added == (), res.revive_failed
    assert json.loads(Paths.state.read_text())["created"] == created  # the same lab, not a new one
    manager.wait_healthy(90)
    roles = discover_roles(lab.clusters["pg"], lab)
    assert sorted(r.sql_role for r in roles) == ["primary", "replica", "replica"]


def test_down_leaves_nothing_and_up_recovers_from_a_crash(lab: Inventory) -> None:
    # A crashed lab: its state record gone, namespaces and daemons left behind: up cleans and rebuilds.
    Paths.state.unlink()
    res = manager.up()
    assert res.cleaned_leftovers and not res.already_up
    assert manager.status()["clusters"]["pg"]["members"]
    unlocked_by_lab = manager.POSTGRES_UNLOCKED.exists()
    seconds = manager.down()
    assert seconds < 30
    deadline = time.monotonic() + 10
    while _lab_leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _lab_leftovers() == []
    assert "ckops" not in Path("/etc/passwd").read_text()
    assert not Paths.sudoers.exists()
    if unlocked_by_lab:  # the account lock lab up lifted for the nodes' SSH is back
        shadow = subprocess.run(["getent", "shadow", "postgres"], capture_output=True, text=True).stdout
        assert shadow.split(":")[1] == "!"
    manager.up()  # leave the session's lab up for the tests that follow
