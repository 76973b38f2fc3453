"""`fault inject` reaches every field of every fault kind: the named options and `--set FIELD=VALUE`
(read as YAML), validated by the kind's own model, errors naming the option as the user typed it.
No host is involved: this is the command line's parsing alone."""

from __future__ import annotations

from typing import Any

import pytest

from chaoskit.cli import _fault_spec
from chaoskit.errors import InputError
from chaoskit.faults.registry import REGISTRY

# a valid value of each field as typed after `--set FIELD=`, and what the spec holds then
SAMPLES: dict[str, tuple[str, Any]] = {
    "cluster": ("pg", "pg"), "ttl": ("60s", 60.0), "duration": ("5s", 5.0), "processes": ("[postgres]", ("postgres",)),
    "signal": ("TERM", "TERM"), "peers": ("[pg2]", ("pg2",)), "direction": ("in", "in"), "action": ("reject", "reject"),
    "loss_pct": ("5", 5.0), "interface": ("eth1", "eth1"), "rate": ("1mbit", "1mbit"), "delay_ms": ("10", 10.0),
    "jitter_ms": ("1", 1.0), "corrupt_pct": ("2", 2.0), "duplicate_pct": ("3", 3.0), "peer_port": ("5432", 5432),
    "proxy_user": ("ckproxy", "ckproxy"), "stream": ("upstream", "upstream"), "reset_after_ms": ("100", 100.0),
    "down": ("true", True), "cpu_workers": ("1", 1), "io_workers": ("2", 2), "vm_workers": ("3", 3),
    "vm_bytes": ("64M", "64M"), "thread": ("io", "io"), "on": ("data", "data"), "free": ("64M", str(64 << 20)),
    "allow_root_filesystem": ("true", True), "read_rate": ("2mbps", "2mbps"), "write_rate": ("1MBPS", "1mbps"),
    "read_iops": ("100", 100), "write_iops": ("50", 50),
}


def fields_of(kind: str) -> list[str]:
    return [f for f in REGISTRY[kind].spec.model_fields if f not in ("kind", "target")]


# what a kind's own rules ask for beyond its required fields (one of several, or a pair)
RELAYED = ["peers", "peer_port", "delay_ms"]
NEEDED = {"netem": ["delay_ms"], "latency": RELAYED, "proxy": RELAYED, "stress": ["cpu_workers"],
          "disk_slow": ["write_rate"]}


def required(kind: str) -> list[str]:
    spec = REGISTRY[kind].spec
    return [f for f in fields_of(kind) if spec.model_fields[f].is_required()] + NEEDED.get(kind, [])


@pytest.mark.parametrize("kind", list(REGISTRY))
def test_every_field_of_every_kind_is_reachable_with_set(kind: str) -> None:
    missing = [f for f in fields_of(kind) if f not in SAMPLES]
    assert not missing, f"give {kind}'s fields {missing} a sample: every field must be reachable from fault inject"
    base = [f"{f}={SAMPLES[f][0]}" for f in required(kind)]
    for name in fields_of(kind):
        sets = [s for s in base if not s.startswith(f"{name}=")] + [f"{name}={SAMPLES[name][0]}"]
        spec = _fault_spec(sets, kind=kind, target="pg1")
        assert getattr(spec, name) == SAMPLES[name][1], (kind, name)


@pytest.mark.parametrize(("kind", "sets", "option", "message"), [
    ("proxy", ["peers=[pg2]", "peer_port=5432", "bogus=1"], "--set bogus", "not an option of this fault kind"),
    ("stress", ["vm_workers=x"], "--set vm_workers", "valid integer"),
    ("stress", ["vm_bytes=$(reboot)"], "--set vm_bytes", "not a valid size"),
    ("stress", ["noequals"], "--set", "expected FIELD=VALUE"),
    ("stress", ["cpu_workers=[1"], "--set cpu_workers", "not a YAML value"),
    ("stress", ["cpu_workers=" + "[" * 3000], "--set cpu_workers", "nested deeper"),  # the hardened reader
    ("netem", ["corrupt_pct=101"], "--set corrupt_pct", "less than or equal to 100"),
    ("kill", ["signal=KILL; reboot"], "--set signal", "unsupported signal"),
])
def test_set_refusals_name_the_option(kind: str, sets: list[str], option: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        _fault_spec(sets, kind=kind, target="pg1")
    assert info.value.field == option and message in info.value.detail, info.value.one_line()


def test_a_field_given_by_its_option_and_by_set_is_refused() -> None:
    with pytest.raises(InputError, match=r"--set cpu_workers: cpu_workers is given twice"):
        _fault_spec(["cpu_workers=2"], kind="stress", target="pg1", cpu_workers=1)
    # the named option's error still names the named option
    with pytest.raises(InputError) as info:
        _fault_spec([], kind="loss", target="pg1")
    assert info.value.field == "--loss-pct"
