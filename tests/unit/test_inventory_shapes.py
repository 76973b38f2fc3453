"""The inventory loader, exactly: every structural error's full message, line and field; where a
value came from (defaults, parent group, child group, host) decides both the value and the line an
error names; ssh options read from ansible_ssh_common_args; clusters from group vars."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.inventory import load_inventory


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return load_inventory(p)


@pytest.mark.parametrize(("text", "line", "field", "detail"), [
    ("5\n", 1, None, "an inventory is a mapping (hosts/clusters, or Ansible's all:)"),
    ("hosts:\n  a: {address: x}\nextra: 1\n", 3, "extra",
     "unknown field (expected defaults, hosts, clusters, lab, loaders or all)"),
    ("defaults: [a]\nhosts:\n  a: {address: x}\n", 1, "defaults", "expected a mapping of host fields"),
    ("hosts: {}\n", 1, "hosts", "expected a non-empty mapping of host name -> host"),
    ("hosts: [a]\n", 1, "hosts", "expected a non-empty mapping of host name -> host"),
    ("hosts:\n  a: 5\n", 2, "hosts.a", "expected a mapping of host fields"),
    ("hosts:\n  a: {address: x}\nclusters: [c]\n", 3, "clusters", "expected a mapping of cluster name -> cluster"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c: 5\n", 4, "clusters.c", "expected a mapping of cluster fields"),
    ("hosts:\n  a: {address: x, jump: a}\n", 2, "hosts.a.jump", "a host cannot be its own jump host"),
    ("hosts:\n  a: {address: x, jump: b}\n", 2, "hosts.a.jump", "jump host 'b' is not in the inventory"),
    ("hosts:\n  a: {address: x}\nclusters:\n  c:\n    engine: postgres\n    user: u\n    members: [a, b]\n",
     7, "clusters.c.members[1]", "member host 'b' is not in the inventory"),
    ("all:\n  children:\n    g: 5\n", 3, "all.children.g", "expected a group mapping (hosts, children, vars)"),
    ("all:\n  vars: [a]\n", 2, "all.vars", "expected a mapping"),
    ("all:\n  hosts: [a]\n", 2, "all.hosts", "expected a mapping of host name -> vars"),
    ("all:\n  hosts:\n    a: 5\n", 3, "all.hosts.a", "expected a mapping of host vars"),
    ("all:\n  children: [a]\n", 2, "all.children", "expected a mapping of group name -> group"),
    ("all:\n  childs: {}\n", 2, "all.childs", "unknown group key (expected hosts, children or vars)"),
    ("all:\n  hosts: {a: {}}\nweb: {}\n", 3, "web", "Ansible shape: put every group under all.children"),
    ("all:\n  children:\n    g:\n      vars: {chaoskit_cluster: 5}\n      hosts: {a: {}}\n", 4,
     "all.children.g.vars.chaoskit_cluster", "chaoskit_cluster must be a mapping of cluster fields"),
    ("all:\n  hosts:\n    a: {ansible_ssh_common_args: \"-o 'ProxyJump=x\"}\n", 3,
     "all.hosts.a.ansible_ssh_common_args", "cannot parse ssh args: No closing quotation"),
])
def test_structural_errors_exactly(tmp_path: Path, text: str, line: int, field: str | None, detail: str) -> None:
    with pytest.raises(InputError) as info:
        load(tmp_path, text)
    assert (info.value.line, info.value.field, info.value.detail) == (line, field, detail)


def test_an_error_in_a_default_names_the_defaults_line(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load(tmp_path, """
        defaults:
          user: ops
          port: ssh
        hosts:
          a: {address: x}
          b: {address: y, port: 2222}
        """)
    assert (info.value.line, info.value.field) == (3, "hosts.a.port")


def test_own_shape_defaults_and_paths(tmp_path: Path) -> None:
    inv = load(tmp_path, """
        defaults: {user: ops, key_file: k/id, known_hosts: /etc/kh, port: 2200}
        hosts:
          a: {address: 10.0.0.1}
          b: {address: 10.0.0.2, user: root, key_file: /abs/id, port: 22}
          c:
        """.replace("c:\n", "c: {address: 10.0.0.3}\n"))
    a, b = inv.hosts["a"], inv.hosts["b"]
    assert (a.name, a.user, a.port, a.key_file, a.known_hosts) == ("a", "ops", 2200, str(tmp_path / "k/id"), "/etc/kh")
    assert (b.user, b.port, b.key_file) == ("root", 22, "/abs/id")  # a host's own value beats the default
    assert inv.clusters == {} and inv.sha256 and inv.source == str(tmp_path / "inv.yaml")


def test_ansible_precedence_values_and_lines(tmp_path: Path) -> None:
    """all < parent group < child group < host, for values and for the line an error names."""
    text = """
        all:
          vars: {ansible_user: u_all, ansible_port: 1001, ansible_become: false, chaoskit_known_hosts: /kh}
          children:
            parent:
              vars: {ansible_user: u_parent, ansible_port: 1002}
              children:
                child:
                  vars: {ansible_port: 1003}
                  hosts:
                    h1: {}
                    h2: {ansible_port: 1004, ansible_host: 10.9.9.9}
              hosts:
                h3:
        """
    inv = load(tmp_path, text)
    h1, h2, h3 = inv.hosts["h1"], inv.hosts["h2"], inv.hosts["h3"]
    assert (h1.address, h1.user, h1.port, h1.known_hosts, h1.become) == ("h1", "u_parent", 1003, "/kh", False)
    assert (h2.address, h2.port) == ("10.9.9.9", 1004)
    assert (h3.user, h3.port) == ("u_parent", 1002)
    for bad_at, line in (("1003", 8), ("1004", 11), ("1002", 5)):
        broken = text.replace(f"ansible_port: {bad_at}", "ansible_port: nope", 1)
        with pytest.raises(InputError) as info:
            load(tmp_path, broken)
        assert info.value.line == line, (bad_at, info.value.one_line())
    # all's port is overridden for every host: never used, never validated
    assert load(tmp_path, text.replace("ansible_port: 1001", "ansible_port: nope")).hosts["h1"].port == 1003


@pytest.mark.parametrize(("args", "expected"), [
    ("-o ProxyJump=bastion -oUserKnownHostsFile=/k/hosts -o 'StrictHostKeyChecking no'",
     {"jump": "bastion", "known_hosts": "/k/hosts", "strict_host_keys": False}),
    ("-J ops@b:2222", {"jump": "ops@b:2222"}),
    ("-o proxyjump=j1 -o StrictHostKeyChecking=yes", {"jump": "j1", "strict_host_keys": True}),
    ("-o StrictHostKeyChecking=accept-new", {"strict_host_keys": False}),
    ("-o StrictHostKeyChecking=OFF -o", {"strict_host_keys": False}),  # a dangling -o is ignored
    ("-o ServerAliveInterval=5 -v -J", {}),  # other options and a dangling -J: nothing
])
def test_ssh_common_args(tmp_path: Path, args: str, expected: dict) -> None:
    inv = load(tmp_path, f"""
        all:
          hosts:
            j1: {{}}
            bastion: {{}}
            h: {{ansible_ssh_common_args: "{args}"}}
        """)
    h = inv.hosts["h"]
    got = {"jump": h.jump, "known_hosts": h.known_hosts, "strict_host_keys": h.strict_host_keys}
    defaults = {"jump": None, "known_hosts": None, "strict_host_keys": True}
    assert got == {**defaults, **expected}


def test_ansible_clusters_from_group_vars(tmp_path: Path) -> None:
    inv = load(tmp_path, """
        all:
          children:
            db:
              vars:
                chaoskit_cluster: {name: main, engine: postgres, user: u}
              children:
                east: {hosts: {e1: {}, e2: {}}}
                west: {hosts: {w1: {}, e1: {}}}
            solo:
              vars:
                chaoskit_cluster: {engine: mysql, user: root, members: [s2]}
              hosts: {s1: {}, s2: {}}
        """)
    # members: the group's hosts through its children, each once, in order of appearance
    assert [m.host for m in inv.clusters["main"].members] == ["e1", "e2", "w1"]
    assert "db" not in inv.clusters
    assert [m.host for m in inv.clusters["solo"].members] == ["s2"]  # explicit members are kept
    assert inv.clusters["solo"].name == "solo"


@pytest.mark.parametrize(("args", "expected"), [
    ("-J j1 -o StrictHostKeyChecking=no", {"jump": "j1", "strict_host_keys": False}),  # -J is not the last word
    ("-o 'UserKnownHostsFile=/k/a=b'", {"known_hosts": "/k/a=b"}),  # the value may hold '='
    ("-o 'UserKnownHostsFile /k/my hosts'", {"known_hosts": "/k/my hosts"}),  # 'key value', the value with a space
])
def test_ssh_common_args_values(tmp_path: Path, args: str, expected: dict) -> None:
    test_ssh_common_args(tmp_path, args, expected)


def test_ansible_line_of_a_host_and_of_its_ssh_args(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load(tmp_path, """
            all:
              hosts:
                ok: {}
                h:
                  ansible_ssh_common_args: "-J nowhere"
            """)
    assert (info.value.line, info.value.field) == (5, "hosts.h.jump")
    with pytest.raises(InputError) as info:
        load(tmp_path, """
            all:
              children:
                g:
                  hosts:
                    ok: {}
                    "bad name!": {}
            """)
    assert info.value.line == 6 and info.value.field.startswith('hosts.bad name!')


def test_a_cluster_in_all_vars_is_named_all(tmp_path: Path) -> None:
    inv = load(tmp_path, """
        all:
          vars:
            chaoskit_cluster: {engine: postgres, user: u}
          hosts: {a: {}, b: {}}
        """)
    assert list(inv.clusters) == ["all"] and [m.host for m in inv.clusters["all"].members] == ["a", "b"]


def test_jump_given_as_an_address_is_not_looked_up(tmp_path: Path) -> None:
    inv = load(tmp_path, """
        hosts:
          a: {address: 10.0.0.1, jump: "10.0.0.9:2222"}
          b: {address: 10.0.0.2, jump: "ops@bastion"}
        """)
    assert (inv.hosts["a"].jump, inv.hosts["b"].jump) == ("10.0.0.9:2222", "ops@bastion")
    with pytest.raises(InputError) as info:
        load(tmp_path, "hosts:\n  a: {address: x, jump: a}\n")
    assert info.value.source == str(tmp_path / "inv.yaml")
