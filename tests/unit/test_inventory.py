"""Inventory loading: both shapes, precedence, and every error path (file, line, field)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory
from chaoskit.lab.inventory_file import REPO_LAB_INVENTORY, render


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


OWN = """
defaults:
  user: ops
  become: true
  key_file: keys/id_ed25519
hosts:
  db1: {address: 10.1.0.1}
  db2:
    address: 10.1.0.2
    port: 2222
    user: admin
    jump: bastion
    tags: {env: production}
  bastion: {address: 10.1.0.254, become: false}
clusters:
  pg:
    engine: postgres
    ha: {kind: patroni, api: {port: 8008}}
    members: [db1, {host: db2, db_port: 5433}]
    user: postgres
    password: {env: PGPASSWORD}
    dsn: host=10.1.0.1,10.1.0.2 target_session_attrs=read-write
"""


def test_own_shape(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, OWN))
    db1, db2 = inv.hosts["db1"], inv.hosts["db2"]
    assert (db1.user, db1.become, db1.port) == ("ops", True, 22)
    assert db1.key_file == str(tmp_path / "keys" / "id_ed25519")  # relative to the inventory file
    assert (db2.user, db2.port, db2.jump, db2.is_production) == ("admin", 2222, "bastion", True)
    assert inv.hosts["bastion"].become is False
    pg = inv.clusters["pg"]
    assert [m.host for m in pg.members] == ["db1", "db2"]
    assert pg.members[1].db_port == 5433
    assert pg.ha.kind == "patroni" and pg.ha.api.port == 8008  # type: ignore[attr-defined]
    assert pg.password is not None and pg.password.describe() == "env:PGPASSWORD"


ANSIBLE = """
all:
  vars:
    ansible_user: deploy
    ansible_ssh_private_key_file: /keys/deploy
    some_app_var: ignored
  hosts:
    jump1: {ansible_host: 192.0.2.10}
    etcd-a:
      ansible_host: 192.0.2.20
      chaoskit_tags: {component: dcs}
      chaoskit_processes: {etcd: {pid_file: /run/etcd/etcd.pid, comm: etcd}}
      chaoskit_logs: {etcd: /var/log/etcd.log}
  children:
    postgres:
      vars:
        ansible_become: true
        ansible_become_method: sudo
        ansible_ssh_common_args: "-o ProxyJump=deploy@192.0.2.10:22 -o StrictHostKeyChecking=no"
        chaoskit_cluster:
          engine: postgres
          ha: {kind: patroni}
          user: postgres
          password: {file: /etc/chaoskit/pg.pw}
      children:
        pg_east:
          hosts:
            pg-a: {ansible_host: 192.0.2.11, ansible_port: 2201}
        pg_west:
          hosts:
            pg-b: {ansible_host: 192.0.2.12, ansible_user: override}
"""


def test_ansible_shape(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, ANSIBLE))
    a, b, j = inv.hosts["pg-a"], inv.hosts["pg-b"], inv.hosts["jump1"]
    assert (a.address, a.port, a.user, a.key_file) == ("192.0.2.11", 2201, "deploy", "/keys/deploy")
    assert (a.become, a.become_method, a.jump, a.strict_host_keys) == (True, "sudo", "deploy@192.0.2.10:22", False)
    assert b.user == "override"  # host vars beat group vars
    assert j.become is False and j.jump is None
    pg = inv.clusters["postgres"]
    assert [m.host for m in pg.members] == ["pg-a", "pg-b"]
    assert (pg.engine, pg.ha.kind) == ("postgres", "patroni")
    etcd = inv.hosts["etcd-a"]  # a service of no member: a fault target by host or tag
    assert etcd.processes["etcd"].pid_file == "/run/etcd/etcd.pid" and etcd.logs == {"etcd": "/var/log/etcd.log"}
    assert inv.hosts_tagged("component", "dcs") == ["etcd-a"]


def test_ansible_dash_j_and_unknown_vars(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, """
    all:
      hosts:
        h1: {ansible_host: 192.0.2.1, ansible_ssh_common_args: "-J ops@192.0.2.9", whatever: 1}
    """))
    assert inv.hosts["h1"].jump == "ops@192.0.2.9"


@pytest.mark.parametrize(("text", "line", "field", "message"), [
    ("hosts:\n  a: {address: 10.0.0.1\n", 3, None, "invalid YAML"),
    ("hosts:\n  a: x\n b: y\n", 3, None, "invalid YAML"),
    ("hosts:\n  a: {address: 10.0.0.1}\nextras: 1\n", 3, "extras", "unknown field"),
    ("hosts:\n  a:\n    address: 10.0.0.1\n    prot: 22\n", 4, "hosts.a.prot", "unknown field"),
    ("hosts:\n  a:\n    address: 10.0.0.1\n    port: ssh\n", 4, "hosts.a.port", "valid integer"),
    ("hosts:\n  a:\n    address: 10.0.0.1\n    port: 70000\n", 4, "hosts.a.port", "less than or equal"),
    ("hosts:\n  a:\n    port: 22\n", 2, "hosts.a.address", "field required"),
    ("hosts:\n  a: {address: x}\n  a: {address: y}\n", 3, "hosts.a", "duplicate key"),
    ("hosts:\n  a: {address: x, jump: nowhere}\n", 2, "hosts.a.jump", "not in the inventory"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a, b]\n",
     7, "clusters.c.members[1]", "not in the inventory"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a]\n"
     "    password: hunter2\n", 8, "clusters.c.password", "inline secrets are not allowed"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a]\n"
     "    password: {env: A, file: /b}\n", 8, "clusters.c.password", "exactly one of env or file"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: oracle\n    user: u\n    members: [a]\n",
     5, "clusters.c.engine", "Input should be"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: mysql\n    members: [a]\n",
     4, "clusters.c.user", "field required"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    kind: postgres-patroni\n    user: u\n    members: [a]\n",
     4, "clusters.c", "write engine: postgres + ha: {kind: patroni}"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: mysql\n    ha: {kind: patroni}\n    user: u\n"
     "    members: [a]\n", 4, "clusters.c", "ha: patroni manages postgres, not mysql"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    ha: {kind: patroni, api: {port: 0}}\n"
     "    user: u\n    members: [a]\n", 6, "clusters.c.ha", "api.port: Input should be greater than"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a]\n"
     "    dsn: host=a password=hunter2\n", 4, "clusters.c", "password inside the DSN"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a]\n"
     "    options: {sslpassword: x}\n", 8, "clusters.c.options", "looks like a secret"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a, ld-b]\n", 4, "loaders.hosts[1]", "not in the inventory"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a, a]\n", 4, "loaders.hosts", "host a listed twice"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: []\n", 4, "loaders.hosts", "at least 1"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  python: bin/python3\n", 5, "loaders.python",
     "absolute path"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  spool: '/var/x y'\n", 5, "loaders.spool",
     "not a valid path"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  head: 10.0.0.1\n", 5, "loaders.head", "unknown field"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  ray: {head: 10.0.0.1, token_file: /t, port: 1}\n", 5,
     "loaders.ray.port", "greater than or equal to 1024"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  ray:\n    token_file: /t\n", 5, "loaders.ray",
     "either head:"),
    ("hosts:\n  a: {address: x}\nloaders:\n  hosts: [a]\n  ray: {head: 'a;b', token_file: /t}\n", 5,
     "loaders.ray.head", "does not appear to be an IPv4 or IPv6 address"),
    ("", 1, None, "empty document"),
    ("- a\n- b\n", 1, None, "mapping"),
    ("all:\n  hosts:\n    a: {ansible_port: nope}\n", 3, "hosts.a.port", "valid integer"),
    ("all:\n  childs:\n    g: {}\n", 2, "all.childs", "unknown group key"),
    ("all:\n  children:\n    g:\n      hosts: [a, b]\n", 4, "all.children.g.hosts", "expected a mapping"),
    ("all:\n  hosts: {a: {}}\nweb:\n  hosts: {}\n", 3, "web", "under all.children"),
    ("all:\n  children:\n    g:\n      vars:\n        chaoskit_cluster: {engine: postgres, user: u, nope: 1}\n"
     "      hosts: {a: {}}\n", 5, "clusters.g.nope", "unknown field"),
])
def test_errors_name_file_line_field(tmp_path: Path, text: str, line: int, field: str | None, message: str) -> None:
    path = write(tmp_path, text) if text else tmp_path / "inv.yaml"
    if not text:
        path.write_text("")
    with pytest.raises(InputError) as info:
        load_inventory(path)
    err = info.value
    assert err.source == str(path)
    assert err.line == line, err.one_line()
    assert err.field == field, err.one_line()
    assert message in err.detail, err.one_line()
    assert "\n" not in err.one_line()
    assert err.one_line().startswith(f"{path}:{line}: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_inventory(tmp_path / "nope.yaml")


def test_secret_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.secrets import SecretRef

    monkeypatch.setenv("CK_TEST_PW", "s3cret")
    assert SecretRef(env="CK_TEST_PW").resolve() == "s3cret"
    f = tmp_path / "pw"
    f.write_text("filepw\n")
    assert SecretRef(file=str(f)).resolve() == "filepw"
    monkeypatch.delenv("CK_TEST_PW")
    with pytest.raises(LookupError, match="CK_TEST_PW"):
        SecretRef(env="CK_TEST_PW").resolve()


def test_models_are_frozen(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, OWN))
    with pytest.raises(Exception, match="frozen"):
        inv.hosts["db1"].port = 1  # type: ignore[misc]


def test_committed_lab_inventory_matches_the_lab_spec() -> None:
    assert REPO_LAB_INVENTORY.read_text() == render(), "regenerate inventories/lab.yaml from chaoskit.lab"
    inv = load_inventory(REPO_LAB_INVENTORY)
    assert set(inv.clusters) == {"pg", "pg-read", "pg-single", "pg-single-pgbouncer", "mariadb", "mariadb-managed",
                                 "pgaf", "repmgr", "mha", "mha-haproxy", "mha-read", "galera", "galera-haproxy",
                                 "galera-node3", "pg-dr"}
    assert {c: inv.clusters[c].ha.kind for c in inv.clusters} == {
        "pg": "patroni", "pg-read": "patroni", "pg-single": "none", "pg-single-pgbouncer": "none", "mariadb": "none",
        "mariadb-managed": "none", "pgaf": "pg_auto_failover", "repmgr": "repmgr",
        "mha": "mha", "mha-haproxy": "mha", "mha-read": "mha", "galera": "galera", "galera-haproxy": "galera",
        "galera-node3": "galera", "pg-dr": "patroni"}
    assert [c for c in inv.clusters if inv.clusters[c].read_route] == ["pg-read", "mha-read"]
    assert [c for c in inv.clusters if inv.clusters[c].managed] == ["mariadb-managed"]
    assert inv.clusters["mariadb-managed"].members == ()
    assert inv.hosts["my1"].jump == "dcs1" and inv.hosts["pg1"].become
    # every member of an HA stack has a data directory (rejoin and crash recovery need it) and pid files
    for name in ("pg", "pgaf", "repmgr"):
        for m in inv.clusters[name].members:
            assert m.data_dir and all(p.pid_file for p in m.processes.values()), (name, m.host)


def test_ansible_vars_precedence_all_parent_child_host(tmp_path: Path) -> None:
    """Ansible's order: all < parent group < child group < host; the nearest definition wins."""
    inv = load_inventory(write(tmp_path, """
        all:
          vars: {ansible_user: from-all, ansible_port: 2201}
          children:
            pg:
              vars: {ansible_user: from-parent, ansible_port: 2202}
              hosts:
                a: {ansible_host: 10.0.0.1}
              children:
                pgprod:
                  vars: {ansible_user: from-child}
                  hosts:
                    b: {ansible_host: 10.0.0.2}
                    c: {ansible_host: 10.0.0.3, ansible_user: from-host}
            other:
              hosts:
                d: {ansible_host: 10.0.0.4}
        """))
    got = {n: (h.user, h.port) for n, h in inv.hosts.items()}
    assert got == {"a": ("from-parent", 2202), "b": ("from-child", 2202), "c": ("from-host", 2202),
                   "d": ("from-all", 2201)}


def test_loader_hosts_are_read_with_their_zone_tags(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts:\n  db1: {address: 10.0.0.1, tags: {az: a}}\n"
                           "  ld-b: {address: 10.0.0.9, tags: {az: b}}\n"
                           "loaders:\n  hosts: [ld-b]\n  python: /opt/ck/bin/python3\n")
    inv = load_inventory(path)
    assert inv.loaders is not None and inv.loaders.hosts == ("ld-b",)
    assert (inv.loaders.python, inv.loaders.spool) == ("/opt/ck/bin/python3", "/var/lib/chaoskit/loader")
    assert inv.hosts_tagged("az", "b") == ["ld-b"]
    assert inv.evidence()["loaders"] == {"hosts": ["ld-b"], "python": "/opt/ck/bin/python3",
                                         "spool": "/var/lib/chaoskit/loader"}
    assert "loaders" not in load_inventory(write(tmp_path, "hosts:\n  a: {address: x}\n")).evidence()
