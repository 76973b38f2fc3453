"""The boundary holds: hostile or broken inputs end in one line and exit 2 within a second, never a
traceback; every string type refuses what it must; production and lab guards refuse; the report
escapes everything it shows."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from chaoskit.errors import ChaoskitError, InputError, PreflightError
from chaoskit.faults.spec import parse_fault
from chaoskit.guard import production_targets, refuse_production
from chaoskit.inventory.loader import load_inventory
from chaoskit.inventory.models import Host, Inventory
from chaoskit.inventory.reach import refuse_unreachable_lab
from chaoskit.playbook.loader import load_playbook
from chaoskit.yamlsrc import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(ROOT / "playbooks").glob("*.yaml"), *(ROOT / "inventories").glob("*.yaml")])
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")

NASTY = ["\x00", "\n", "&a", "*a", "!vault |", "!!python/object:os.system", "9" * 5000, ".inf", ".nan", "-.inf",
         "[[[[[[", "{", "'", '"', "\t", "<<: *a", "? [a]", "\ufeff", "\x1b[31m", "$(touch /tmp/x)", "`id`",
         "; reboot", "\nCHAOSKIT_EOF\n", "999999999h", "1e400", "-1", "0", "null", "~", "true", "[]", "{}"]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines)) if lines else 0
        op = rng.randrange(6)
        if not lines:
            lines = [rng.choice(NASTY)]
        elif op == 0:  # replace a value
            head, sep, _ = lines[i].partition(": ")
            lines[i] = f"{head}{sep or ': '}{rng.choice(NASTY)}"
        elif op == 1:  # insert a nasty line
            lines.insert(i, rng.choice(NASTY))
        elif op == 2:  # delete a line
            del lines[i]
        elif op == 3:  # splice a nasty fragment into a line
            pos = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:pos] + rng.choice(NASTY) + lines[i][pos:]
        elif op == 4:  # duplicate a line (duplicate keys)
            lines.insert(i, lines[i])
        else:  # an alias bomb
            bomb = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"] + [f"a{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 10) + "]"
                                                        for k in range(1, 8)]
            lines = bomb + lines
    return "\n".join(lines) + "\n"


def validate(path: Path, as_inventory: bool) -> None:
    if as_inventory:
        load_inventory(path)
    else:
        load_playbook(path, LAB)


@pytest.mark.parametrize("seed", range(6))
def test_fuzzed_shipped_files_never_traceback_nor_hang(tmp_path: Path, seed: int) -> None:
    """300 mutations of the shipped playbooks and inventories (50 per seed): every one either loads
    or is refused with an InputError naming the file, in under a second."""
    rng = random.Random(seed)
    crashed: list[str] = []
    for n in range(50):
        src = rng.choice(SHIPPED)
        path = tmp_path / f"m{n}.yaml"
        path.write_bytes(mutate(src.read_text(), rng).encode("utf-8", "surrogatepass"))
        try:
            validate(path, as_inventory=src.parent.name == "inventories")
        except InputError as exc:
            assert exc.source == str(path) and "\n" not in exc.one_line(), exc.one_line()
        except ChaoskitError:
            pass
        except Exception as exc:  # a traceback a user would see
            crashed.append(f"{src.name}: {type(exc).__name__}: {exc}")
    assert crashed == []


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\x00", "unacceptable character"),
    ("a: !vault |\n  $ANSIBLE_VAULT;1.1;AES256", "tag !vault is not supported"),
    ("a: " + "9" * 5000, "invalid value"),
    ("a: 99999999999999999999999", "number too large"),
    ("[" * 3000, "nested deeper"),
    ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "\n".join(f"b{k}: &b{k} [" + ",".join(["*a" if k == 1 else f"*b{k - 1}"] * 10)
                                                 + "]" for k in range(1, 7)), "alias"),
])
def test_yaml_reader_refusals_are_one_liners(text: str, message: str) -> None:
    """Each bomb is refused by its own limit (the message names it); how fast is measured by
    benchmarks/yaml_refusals.py, not here: a loaded machine is slow, the product is not wrong."""
    with pytest.raises(InputError) as info:
        parse_yaml(text, "f.yaml")
    assert message in info.value.one_line() and info.value.one_line().startswith("f.yaml")


@pytest.mark.parametrize("value", ["$(touch /x)", "a;b", "a\nb", "`id`", "a b", "../x", "x" * 70, "-rf", ""])
def test_names_refuse_shell_syntax(value: str) -> None:
    with pytest.raises(ValidationError):
        Host(name=value, address="10.0.0.1")


@pytest.mark.parametrize(("field", "value"), [
    ("address", "10.0.0.1; reboot"), ("address", "$(x)"), ("address", "a..b"), ("address", "999.1.1.1"),
    ("user", "root;x"), ("jump", "ops@10.0.0.1:22;x"), ("key_file", "/k\nx"), ("tags", {"env": "a b"}),
])
def test_host_fields_refuse_hostile_values(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Host.model_validate({"name": "h", "address": "10.0.0.1", field: value})


@pytest.mark.parametrize("fields", [
    {"kind": "stress", "target": "h", "cpu_workers": 1, "vm_workers": 1, "vm_bytes": "1G; touch /x"},
    {"kind": "bandwidth", "target": "h", "rate": "1mbit", "interface": "eth0 root"},
    {"kind": "latency", "target": "h", "peers": ["h2"], "peer_port": 5432, "delay_ms": 5, "proxy_user": "x;y"},
    {"kind": "kill", "target": "h", "processes": ["postgres\nCHAOSKIT_EOF"]},
    {"kind": "kill", "target": "h", "signal": "KILL; reboot"},
    {"kind": "partition", "target": "h", "peers": ["$(id)"]},
    {"kind": "partition", "target": "h", "ttl": ".inf"},
    {"kind": "partition", "target": "h", "ttl": float("nan")},
    {"kind": "partition", "target": "h", "ttl": "999999h"},
    {"kind": "partition", "target": "h", "duration": "10s", "ttl": "5s"},
    {"kind": "partition", "target": "client"},
])
def test_fault_specs_refuse_hostile_or_unbounded_values(fields: dict) -> None:
    with pytest.raises(ValidationError):
        parse_fault(fields)


def test_copies_are_validated_again() -> None:
    spec = parse_fault({"kind": "partition", "target": "h", "ttl": "30s"})
    with pytest.raises(ValidationError, match="ttl must be within"):
        spec.replace(ttl=100_000)
    with pytest.raises(ValidationError):
        spec.replace(target="h; reboot")
    assert spec.replace(ttl=60).ttl == 60


def test_production_guard_is_case_insensitive_and_covers_every_host() -> None:
    inv = Inventory.model_validate({"hosts": {
        "a": {"name": "a", "address": "10.0.0.1", "tags": {"ENV": "Production"}},
        "b": {"name": "b", "address": "10.0.0.2", "tags": {"env": "PROD"}},
        "c": {"name": "c", "address": "10.0.0.3", "tags": {"env": "staging"}}}})
    assert production_targets(inv, ["a", "b", "c"]) == ["host a", "host b"]
    with pytest.raises(PreflightError, match="host a, host b"):
        refuse_production(inv, ["c", "a", "b"], allow=False)
    assert refuse_production(inv, ["a"], allow=True) == ["host a"]
    assert refuse_production(inv, ["c"], allow=False) == []


def test_lab_inventory_refused_while_the_lab_is_down(tmp_path: Path) -> None:
    text = (ROOT / "inventories" / "lab.yaml").read_text().replace("bridge: ckbr0", "bridge: ckbr-nope")
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    inv = load_inventory(path)
    with pytest.raises(InputError, match="the lab is not up"):
        refuse_unreachable_lab(inv)
    from chaoskit.inventory.fanout import RemotePool

    with pytest.raises(InputError, match="the lab is not up"):
        RemotePool(inv)  # no SSH connection can even be attempted


def test_secrets_only_as_references_in_the_evidence() -> None:
    dumped = LAB.model_dump(mode="json")
    assert dumped["clusters"]["pg"]["password"] == {"env": None, "file": "/var/lib/chaoskit-lab/secrets/pg_superuser"}
    with pytest.raises(ValidationError, match="password inside the DSN"):
        LAB.clusters["pg"].replace(dsn="host=a password=hunter2")
    with pytest.raises(ValidationError, match="looks like a secret"):
        LAB.clusters["pg"].replace(options={"sslpassword": "x"})


def test_report_escapes_everything_and_forbids_scripts(tmp_path: Path) -> None:
    import json

    from chaoskit.report.writer import render

    (tmp_path / "plots").mkdir()
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    ev = {"schema_version": 2, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
        "name": "x", "description": evil, "load": {"workload": "ledger", "workers": 1}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": evil, "run_id": "r", "started": 0, "ended": 1, "aborted": evil,
        "ha": {}, "server": {}, "roles_before": [], "faults_injected": [], "actions": [],
        "results": {"verdict": False, "faults": [{"kind": "kill", "target_host": "h", "id": "f", "outage": False,
                                                   "notes": [evil], "effect": {}}],
                    "checks": {"rpo": {"valid": False, "error": evil}}, "slo": {}}}
    (tmp_path / "run.json").write_text(json.dumps(ev))
    render(tmp_path)
    html = (tmp_path / "report.html").read_text()
    from html.parser import HTMLParser

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[tuple[str, list[str]]] = []

            self.csp = ""

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.found.append((tag, [k for k, _ in attrs]))
            if tag == "meta" and dict(attrs).get("http-equiv") == "Content-Security-Policy":
                self.csp = dict(attrs).get("content") or ""

    parser = Tags()
    parser.feed(html)
    assert not any(tag == "script" for tag, _ in parser.found)  # the description, notes, errors stay text
    assert not any(a.startswith("on") for _, attrs in parser.found for a in attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert parser.csp.startswith("default-src 'none'") and "script-src" not in parser.csp


def test_cli_bad_input_is_one_line_exit_2_and_validate_names_code(tmp_path: Path) -> None:
    bad = tmp_path / "pb.yaml"
    bad.write_text((ROOT / "playbooks" / "pg-kill-primary.yaml").read_text().replace(
        "processes: [patroni, postgres]", 'processes: ["postgres\\nCHAOSKIT_EOF"]'))
    res = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", str(bad), "-i",
                          str(ROOT / "inventories" / "lab.yaml")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"{bad}:" in res.stderr and "processes[0]" in res.stderr
    good_pb, lab = ROOT / "playbooks" / "pg-kill-primary.yaml", ROOT / "inventories" / "lab.yaml"
    good = subprocess.run([sys.executable, "-m", "chaoskit.cli", "validate", str(good_pb), "-i", str(lab)],
                          capture_output=True, text=True, timeout=60)
    assert good.returncode == 0 and "code by design" in good.stdout, good.stdout + good.stderr


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root for a throwaway network namespace")
def test_lab_refuses_a_subnet_routed_elsewhere() -> None:
    """In a namespace where another interface holds 10.77.0.0/24, `lab up` would refuse."""
    ns = "xt-route-test"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (["link", "add", "vx0", "type", "veth", "peer", "name", "vx1"],
                    ["addr", "add", "10.77.0.5/24", "dev", "vx0"], ["link", "set", "vx0", "up"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True)
        code = "from chaoskit.guard import routed_elsewhere; print(routed_elsewhere('10.77.0.0/24', 'ckbr0'))"
        inside = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, cwd=ROOT)
        assert "10.77.0.0/24" in inside.stdout and "vx0" in inside.stdout, inside.stdout
        free = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                               code.replace("10.77.0.0/24", "10.78.0.0/24")], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        assert free.stdout.strip() == "None"
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_report_pdf_renders_with_its_plot_and_fetches_nothing(tmp_path: Path) -> None:
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pypdfium2 as pdfium

    from chaoskit.report.writer import render

    (tmp_path / "plots").mkdir()
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.plot([0, 1], [0, 1], color="red", linewidth=8)
    fig.savefig(tmp_path / "plots" / "timeline.png")
    plt.close(fig)
    ev = {"schema_version": 2, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
        "name": "pdf-drill", "description": '<img src="http://10.1.2.3/x.png">', "load": {"workload": "ledger",
                                                                                         "workers": 1},
        "baseline": 1}}, "inventory": {"path": "i", "sha256": "0" * 64},
        "cluster": {"name": "c", "engine": "postgres", "ha": "none"}, "tool": {"version": "0"}, "operator": "o",
        "run_id": "r", "started": 0, "ended": 1, "aborted": None, "ha": {}, "server": {"fsync": "on"},
        "roles_before": [], "faults_injected": [], "actions": [],
        "results": {"verdict": True, "faults": [], "checks": {}, "slo": {}}}
    (tmp_path / "run.json").write_text(json.dumps(ev))
    render(tmp_path)
    pdf = pdfium.PdfDocument(str(tmp_path / "report.pdf"))
    assert len(pdf) >= 1
    text = "".join(pdf[i].get_textpage().get_text_range() for i in range(len(pdf)))
    assert "pdf-drill" in text and "PASS" in text
    # the plot is on a page: some page has the plot's saturated red
    reds = 0
    for i in range(len(pdf)):
        img = pdf[i].render(scale=1).to_pil().convert("RGB")
        reds += sum(1 for r, g, b in img.getdata() if r > 200 and g < 80 and b < 80)
    assert reds > 100
