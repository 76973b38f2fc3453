"""Fault command construction (also for netem, which this kernel cannot run) and validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from chaoskit.faults.journal import inject_script, parse_list, revert_script
from chaoskit.faults.kinds import HostFacts, chain_name, netem_args, qdisc_handle, scripts_for
from chaoskit.faults.models import FaultSpec
from chaoskit.inventory.models import ProcessRef

FID = "a1b2c3d4e5f6"
PG = HostFacts(host="pg1", processes={
    "postgres": ProcessRef(pid_file="/d/pgdata/postmaster.pid"),
    "patroni": ProcessRef(pid_file="/d/patroni.pid", start="/d/start-patroni"),
}, peer_addresses=("10.0.0.2", "10.0.0.3"))


def test_netem_delay_jitter_loss_command() -> None:
    spec = FaultSpec(kind="netem", target="pg1", delay_ms=5, jitter_ms=1, loss_pct=0.5, ttl=30)
    assert netem_args(spec) == "netem delay 5ms 1ms distribution normal loss 0.5%"
    scripts = scripts_for(FID, spec, HostFacts(host="pg1", processes={}))
    handle = qdisc_handle(FID)
    assert f"tc qdisc replace dev eth0 root handle {handle}: netem delay 5ms" in scripts.inject
    assert "refusing to replace it" in scripts.inject  # never clobbers a configured root qdisc
    assert f"grep -q ' {handle}: ' && tc qdisc del dev eth0 root handle {handle}:" in scripts.revert


def test_netem_toward_peers_uses_htb_and_filters() -> None:
    spec = FaultSpec(kind="netem", target="pg1", delay_ms=10, ttl=30, peers=("pg2", "pg3"))
    scripts = scripts_for(FID, spec, PG)
    h = qdisc_handle(FID)
    assert f"root handle {h}: htb default 1" in scripts.inject
    assert f"parent {h}:2 handle" in scripts.inject and "netem delay 10ms" in scripts.inject
    assert scripts.inject.count("u32 match ip dst") == 2 and "10.0.0.3/32" in scripts.inject


def test_partition_chains_exempt_controller_ssh() -> None:
    spec = FaultSpec(kind="partition", target="pg1", peers=("pg2",), ttl=30)
    s = scripts_for(FID, spec, PG)
    cin, cout = chain_name(FID, "I"), chain_name(FID, "O")
    assert cin == "CKA1B2C3D4I" and len(cin) <= 28
    lines = s.inject.splitlines()
    assert lines.index(f"iptables -w -A {cin} -s \"$ctl\" -p tcp --dport 22 -j RETURN") < \
        lines.index(f"iptables -w -A {cin} -s 10.0.0.2 -j DROP")
    assert f"iptables -w -I INPUT 1 -j {cin}" in lines and f"iptables -w -I OUTPUT 1 -j {cout}" in lines
    assert f"iptables -w -X {cin}" in s.revert and f"iptables -w -S {cin}" in s.active


def test_one_way_loss_uses_statistic_match_in_own_chain() -> None:
    spec = FaultSpec(kind="loss", target="pg1", loss_pct=30, direction="in", ttl=30)
    s = scripts_for(FID, spec, HostFacts(host="pg1", processes={}))
    assert "-m statistic --mode random --probability 0.3000 -j DROP" in s.inject
    out_rules = [ln for ln in s.inject.splitlines() if f"-A {chain_name(FID, 'O')} " in ln]
    assert len(out_rules) == 1 and "--sport 22" in out_rules[0]  # outbound: only the SSH exemption


def test_kill_node_crash_and_restart_on_revert() -> None:
    s = scripts_for(FID, FaultSpec(kind="kill", target="pg1", processes=("patroni", "postgres"), ttl=30), PG)
    assert "/d/patroni.pid" in s.inject and "/d/pgdata/postmaster.pid" in s.inject
    assert "kill -KILL" in s.inject
    assert "/d/start-patroni" in s.revert and "/d/start-patroni" not in s.inject
    assert "postmaster.pid" not in s.revert  # postgres has no start command: Patroni starts it


def test_pause_freezes_descendants_and_stop_needs_a_start() -> None:
    s = scripts_for(FID, FaultSpec(kind="pause", target="pg1", processes=("postgres",), ttl=30), PG)
    assert s.inject.index("kill -STOP") < s.inject.index("ps -e -o pid=,ppid=")  # named first, then children
    assert "kill -CONT" in s.revert
    with pytest.raises(ValueError, match="stop needs a start command for postgres"):
        scripts_for(FID, FaultSpec(kind="stop", target="pg1", processes=("postgres",), ttl=30), PG)
    with pytest.raises(ValueError, match="no process mysqld"):
        scripts_for(FID, FaultSpec(kind="kill", target="pg1", processes=("mysqld",), ttl=30), PG)


def test_journal_script_arms_deadman_before_applying() -> None:
    spec = FaultSpec(kind="pause", target="pg1", processes=("postgres",), ttl=7)
    text = inject_script(FID, scripts_for(FID, spec, PG), {"id": FID}, spec.ttl)
    assert text.startswith("(") and text.rstrip().endswith(")")  # never ends the persistent shell
    assert text.index("setsid sh -c 'sleep 7;") < text.index('sh "$J/$ID.inject"')
    assert text.index('"$J/$ID.revert"') < text.index('sh "$J/$ID.inject"')
    assert 'kill -TERM "-$pg"' in text  # dash: no "--" before a process group
    assert "exit 4" in revert_script(FID)


def test_parse_list() -> None:
    rows = parse_list(f'{FID}\t1000\t990\t1\t{{"kind": "pause", "host": "pg1"}}\nbroken line\n')
    assert rows == [{"kind": "pause", "host": "pg1", "id": FID, "active": True, "remaining_s": 10}]


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "partition", "target": "h", "ttl": "0s"}, "ttl must be within"),
    ({"kind": "partition", "target": "h", "ttl": "2d"}, "not a duration"),
    ({"kind": "partition", "target": "h", "ttl": 100000}, "ttl must be within"),
    ({"kind": "loss", "target": "h"}, "loss needs loss_pct"),
    ({"kind": "bandwidth", "target": "h"}, "bandwidth needs rate"),
    ({"kind": "netem", "target": "h"}, "netem needs"),
    ({"kind": "stress", "target": "h"}, "stress needs"),
    ({"kind": "kill", "target": "role:primary"}, "a role target needs cluster"),
    ({"kind": "kill", "target": "h", "signal": "USR9"}, "unsupported signal"),
    ({"kind": "kill", "target": "h", "bogus": 1}, "Extra inputs are not permitted"),
])
def test_spec_validation(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FaultSpec.model_validate(fields)


def test_latency_proxy_redirect_in_own_nat_chain() -> None:
    from chaoskit.faults.kinds import proxy_port

    spec = FaultSpec(kind="latency", target="pg2", peers=("pg1",), peer_port=5432, delay_ms=5, ttl=30)
    facts = HostFacts(host="pg2", processes={}, peer_addresses=("10.0.0.1",))
    s = scripts_for(FID, spec, facts)
    chain, lport = chain_name(FID, "N"), proxy_port(FID)
    assert f"iptables -w -t nat -N {chain}" in s.inject
    assert (f"-A {chain} -p tcp -d 10.0.0.1 --dport 5432 -m owner ! --uid-owner nobody -j REDIRECT "
            f"--to-ports {lport}") in s.inject  # the proxy's own upstream connection is not redirected
    assert "setpriv --reuid=nobody" in s.inject and "--delay-up-ms 5 --delay-down-ms 5 " in s.inject
    assert "--ttl 90 " in s.inject  # the relay ends itself a minute after the fault's TTL
    assert "CHAOSKIT_PROXY" in s.inject and "class Stream" in s.inject  # the proxy ships inside the script
    assert s.inject.index("ss -Hltn") < s.inject.index(f"-I OUTPUT 1 -j {chain}")  # redirect only once listening
    assert "ss -K dst 10.0.0.1 dport = 5432" in s.inject and "ss -K dst 10.0.0.1 dport = 5432" in s.revert
    assert f"iptables -w -t nat -X {chain}" in s.revert and f"-t nat -S {chain}" in s.active
    with pytest.raises(ValidationError, match="latency needs peers, peer_port and delay_ms"):
        FaultSpec(kind="latency", target="pg2", delay_ms=5)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"rate": "1mbit", "stream": "downstream"},
     ["--delay-up-ms", "0", "--delay-down-ms", "0", "--rate-up-bps", "0", "--rate-down-bps", "125000"]),
    ({"delay_ms": 3, "jitter_ms": 1, "stream": "upstream"},
     ["--delay-up-ms", "3", "--delay-down-ms", "0", "--jitter-ms", "1"]),
    ({"reset_after_ms": 500}, ["--delay-up-ms", "0", "--delay-down-ms", "0", "--reset-after-ms", "500"]),
    ({"down": True}, ["--delay-up-ms", "0", "--delay-down-ms", "0", "--down"]),
])
def test_proxy_toxics_become_relay_arguments(fields: dict, expected: list[str]) -> None:
    from chaoskit.faults.models import proxy_toxic_args

    spec = FaultSpec(kind="proxy", target="pg2", peers=("pg1",), peer_port=5432, **fields)
    assert proxy_toxic_args(spec) == expected
    s = scripts_for(FID, spec, HostFacts(host="pg2", processes={}, peer_addresses=("10.0.0.1",)))
    assert " ".join(expected) in s.inject
    if fields.get("down"):
        assert "ss -Hltn" not in s.inject  # a down link listens nowhere: redirected connects are refused


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "proxy needs a toxic"),
    ({"rate": "fast"}, "not a rate"),
    ({"reset_after_ms": -1}, "greater than or equal to 0"),
])
def test_proxy_fault_validation(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FaultSpec(kind="proxy", target="pg2", peers=("pg1",), peer_port=5432, **fields)


def test_client_target_takes_link_toxics_only() -> None:
    from chaoskit.errors import InputError
    from chaoskit.faults.targets import validate_target
    from chaoskit.inventory import load_inventory

    lab = load_inventory(Path(__file__).resolve().parents[2] / "inventories" / "lab.yaml")
    validate_target(FaultSpec(kind="proxy", target="client", down=True), lab)  # no peers needed: the load's link
    validate_target(FaultSpec(kind="latency", target="client", delay_ms=5), lab)
    with pytest.raises(InputError, match="takes latency or proxy faults"):
        validate_target(FaultSpec(kind="kill", target="client"), lab)
