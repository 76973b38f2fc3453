"""The `control` peer word of partition and loss (issue 46): what is refused before anything is
sent, and which addresses the controller names for it (the host adds the one its SSH came from)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaoskit.errors import InputError
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import parse_fault
from chaoskit.faults.targets import validate_target
from chaoskit.inventory import load_inventory
from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.models import Inventory


def inventory(tmp_path: Path, extra_hosts: str = "", ray: str = "", members: tuple[str, ...] = ("db1",)) -> Inventory:
    p = tmp_path / "inv.yaml"
    token = tmp_path / "token"
    token.write_text("t" * 32)
    ray_block = f"\n  ray: {{{ray}, token_file: {token}}}" if ray else ""
    p.write_text(textwrap.dedent("""
        hosts:
          db1: {address: 10.9.0.11}
          ld-b: {address: 10.9.0.82, tags: {az: b}}
        """).lstrip("\n") + extra_hosts + textwrap.dedent(f"""
        clusters:
          c:
            engine: postgres
            user: postgres
            members: [{", ".join(f"{{host: {m}}}" for m in members)}]
        loaders:
          hosts: [ld-b]
          python: /usr/bin/python3
          spool: /var/tmp/ck""") + ray_block + "\n")
    return load_inventory(p)


def test_control_is_a_peer_of_partition_and_loss_only() -> None:
    assert parse_fault({"kind": "partition", "target": "ld-b", "peers": ["control"]}).peers == ("control",)
    assert parse_fault({"kind": "loss", "target": "ld-b", "peers": ["control", "db1"], "loss_pct": 20}).peers
    for kind, extra in (("netem", {"delay_ms": 5}), ("latency", {"delay_ms": 5, "peer_port": 5432})):
        with pytest.raises(ValueError, match=f"peer control .* is for partition and loss, not {kind}"):
            parse_fault({"kind": kind, "target": "ld-b", "peers": ["control"], **extra})


def test_control_is_refused_where_it_is_ambiguous_or_unknown_on_the_host(tmp_path: Path) -> None:
    spec = parse_fault({"kind": "partition", "target": "ld-b", "peers": ["control"]})
    validate_target(spec, inventory(tmp_path))  # a host reached directly: fine
    with pytest.raises(InputError, match="ambiguous: the inventory has a host named control"):
        validate_target(spec, inventory(tmp_path, "  control: {address: 10.9.0.5}\n"))
    jumped = inventory(tmp_path, "  ld-c: {address: 10.9.0.83, jump: db1}\n")
    with pytest.raises(InputError, match="ld-c, which is reached through a jump host") as e:
        validate_target(parse_fault({"kind": "partition", "target": "ld-c", "peers": ["control"]}), jumped)
    assert e.value.field == "peers"
    # a live target that could land on a host behind a jump host is refused too
    inv = inventory(tmp_path, "  db2: {address: 10.9.0.12, jump: db1}\n", members=("db1", "db2"))
    with pytest.raises(InputError, match="db2, which is reached through a jump host"):
        validate_target(parse_fault({"kind": "partition", "target": "role:primary", "cluster": "c",
                                     "peers": ["control"]}), inv)


def test_the_controller_names_the_ray_head_it_runs_and_the_host_adds_its_ssh_source(tmp_path: Path) -> None:
    spec = parse_fault({"kind": "partition", "target": "ld-b", "peers": ["control", "db1"]})
    for ray, named in (("", ("10.9.0.11",)), ("head: 10.9.0.1, port: 16380, dir: /run/r", ("10.9.0.1", "10.9.0.11")),
                       ("address: '10.9.0.7:6379'", ("10.9.0.11",))):
        inv = inventory(tmp_path, ray=ray)
        with RemotePool(inv) as pool:
            facts = FaultManager(inv, pool).facts(spec, "ld-b")
        assert facts.peer_addresses == named and facts.peer_control is True
    plain = parse_fault({"kind": "partition", "target": "ld-b", "peers": ["db1"]})
    with RemotePool(inv) as pool:
        assert FaultManager(inv, pool).facts(plain, "ld-b").peer_control is False
