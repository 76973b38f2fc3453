"""The loaders' Ray control plane (`chaoskit.workload.ray_plane`, `ray_loader`): its inventory
section, the commands it starts (arguments, never shell code from the inventory), the token that
never travels on a command line, the version checks, and one real single-node Ray cluster on
loopback: started under a pid file with token authentication, an actor's shell, read and clock,
a driver with the wrong token refused, and stopped leaving no process of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from chaoskit.inventory.models import RayPlane
from chaoskit.workload import ray_plane
from chaoskit.workload.ssh_loader import HostStatus

TOKEN = b"0123456789abcdef0123456789abcdef"


def plane(tmp_path: Path, **kw: object) -> RayPlane:
    token = tmp_path / "token"
    token.write_bytes(TOKEN + b"\n")
    return RayPlane(**{"head": "10.77.0.1", "port": 16380, "token_file": str(token), "dir": "/run/ck-ray", **kw})


def test_the_section_takes_one_form_a_short_dir_and_checked_addresses(tmp_path: Path) -> None:
    p = plane(tmp_path)
    assert (p.gcs, p.managed) == ("10.77.0.1:16380", True)
    theirs = RayPlane(address="10.0.0.5:6379", token_file="/t")
    assert (theirs.gcs, theirs.managed) == ("10.0.0.5:6379", False)
    for bad in ({"token_file": "/t"},  # neither form
                {"head": "10.0.0.1", "address": "10.0.0.1:6379", "token_file": "/t"},  # both
                {"head": "h; rm -rf /", "token_file": "/t"}, {"head": "::1", "token_file": "/t"},
                {"address": "10.0.0.1", "token_file": "/t"}, {"address": "x:y", "token_file": "/t"},
                {"head": "10.0.0.1", "token_file": "t"}, {"head": "10.0.0.1", "token_file": "/a b"},
                {"head": "10.0.0.1", "token_file": "/t", "dir": "/" + "d" * 40},
                {"head": "10.0.0.1", "token_file": "/t", "port": 80}):
        with pytest.raises(ValidationError):
            RayPlane(**bad)  # type: ignore[arg-type]


def test_the_head_and_node_commands_fix_every_port_and_turn_off_what_is_not_needed(tmp_path: Path) -> None:
    p = plane(tmp_path)
    head = ray_plane.head_args(p, "/usr/bin/python3")
    assert head[:5] == ["/usr/bin/python3", "-m", "ray.scripts.scripts", "start", "--head"]
    for flag in ("--block", "--node-ip-address=10.77.0.1", "--port=16380", "--temp-dir=/run/ck-ray/head",
                 "--include-dashboard=false", "--disable-usage-stats", "--num-cpus=0",
                 "--node-manager-port=16381", "--object-manager-port=16382", "--min-worker-port=16390",
                 "--max-worker-port=16489"):
        assert flag in head
    node = ray_plane.node_args(p, "/opt/py", "10.77.0.82", "ld-b", "b")
    for flag in ("--block", "--address=10.77.0.1:16380", "--node-ip-address=10.77.0.82",
                 "--temp-dir=/run/ck-ray/n-ld-b", "--labels=ck-host=ld-b,ck-az=b", "--disable-usage-stats"):
        assert flag in node
    assert "--head" not in node
    with pytest.raises(ValueError):
        ray_plane.node_args(p, "/opt/py", "10.77.0.82", "ld-b", "b c")  # a zone that is not a label
    with pytest.raises(ValueError):  # too long for Ray's socket paths below it
        ray_plane.node_dir(plane(tmp_path, dir="/" + "d" * 39), "h" * 20)


def test_a_node_gets_the_token_through_its_shells_input_never_on_a_command_line(tmp_path: Path) -> None:
    import base64
    import hashlib

    script = ray_plane.node_up_script(plane(tmp_path), "/opt/py", "10.77.0.82", "ld-b", "b", TOKEN)
    assert TOKEN.decode() not in script  # base64 only, and checked by its SHA-256 on the host
    assert base64.b64encode(TOKEN).decode() in script and hashlib.sha256(TOKEN).hexdigest() in script
    assert "RAY_AUTH_MODE='token'" in script and "RAY_AUTH_TOKEN_PATH='/run/ck-ray/n-ld-b/token'" in script
    assert "setsid '/opt/py' '-m' 'ray.scripts.scripts' 'start'" in script
    with pytest.raises(ValueError):  # a value that could end its quotes is refused, never sent
        ray_plane.node_up_script(plane(tmp_path), "/opt/p'y", "10.77.0.82", "ld-b", "b", TOKEN)
    down = ray_plane.node_down_script(plane(tmp_path), "ld-b")
    assert "D='/run/ck-ray/n-ld-b'" in down and "ray stop" not in down and "pkill" not in down


def test_a_missing_or_empty_token_file_is_said_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ray_plane.RayUnavailable, match="token_file: /nonexistent/t cannot be read"):
        ray_plane.token_of(RayPlane(head="10.0.0.1", token_file="/nonexistent/t"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ray_plane.RayUnavailable, match="does not hold a token"):
        ray_plane.token_of(RayPlane(head="10.0.0.1", token_file=str(tmp_path / "empty")))
    assert ray_plane.token_of(plane(tmp_path)) == TOKEN


def test_a_node_with_another_ray_is_refused_naming_the_host_and_both_versions() -> None:
    from chaoskit.inventory.clock import ClockOffset

    ok = ClockOffset(0.0001, 0.0005, 0.001, 7)
    assert HostStatus("ld-a", "/py", "1.0", "3.11", ok, ray="2.60.0").refusal("1.0", "2.60.0") is None
    assert HostStatus("ld-a", "/py", "1.0", "3.11", ok, ray="2.59.1").refusal("1.0", "2.60.0") == (
        "loader host ld-a runs ray 2.59.1, the controller 2.60.0: chaoskit[loaders] pins the same Ray on every node")
    assert "runs ray none" in (HostStatus("ld-a", "/py", "1.0", "3.11", ok).refusal("1.0", "2.60.0") or "")
    assert HostStatus("ld-a", "/py", "1.0", "3.11", ok).refusal("1.0") is None  # over SSH: no Ray needed


_DRIVER = textwrap.dedent("""
    import json, sys
    from chaoskit.inventory.models import RayPlane
    from chaoskit.workload import ray_plane
    from chaoskit.workload.ray_loader import HostActor
    plane = RayPlane.model_validate_json(sys.argv[1])
    try:
        ray = ray_plane.connect(plane)
    except ray_plane.RayUnavailable as exc:
        print(json.dumps({"refused": str(exc)}))
        raise SystemExit(0)
    actor = ray.remote(HostActor).options(num_cpus=0).remote()
    code, out, err = ray.get(actor.shell.remote("printf '%s' \\"$RAY_AUTH_MODE\\"; exit 3", 10))
    size, data = ray.get(actor.read.remote(sys.argv[2], 2, 3))
    missing = ray.get(actor.read.remote(sys.argv[2] + ".none", 0, 3))
    print(json.dumps({"code": code, "out": out, "size": size, "data": data.decode(),
                      "missing": [missing[0], missing[1].decode()],
                      "now": ray.get(actor.now.remote()),
                      "nodes": [n.address for n in ray_plane.cluster_nodes(plane) if n.alive]}))
""")


@pytest.mark.skipif(ray_plane.installed_ray() != ray_plane.RAY_VERSION, reason="chaoskit[loaders] not installed")
def test_a_real_single_node_cluster_with_token_authentication(tmp_path: Path) -> None:
    """A head on loopback (127.0.0.2: Ray swaps 127.0.0.1 for the machine's address; its own port
    range and directory): an actor's shell, read and clock
    answer a driver that has the token; one with another token is refused; `head_down` leaves no
    process of its session and no pid file."""
    import time

    directory = f"/tmp/ck-ray-ut-{os.getpid()}"
    p = RayPlane(head="127.0.0.2", port=20000 + os.getpid() % 300 * 120, token_file=str(tmp_path / "token"),
                 dir=directory)
    (tmp_path / "token").write_bytes(TOKEN)
    (tmp_path / "file").write_bytes(b"abcdefgh")
    pid, started = ray_plane.head_up(p)
    try:
        assert started and ray_plane.head_up(p) == (pid, False)  # a second up finds it running
        res = subprocess.run([sys.executable, "-c", _DRIVER, p.model_dump_json(), str(tmp_path / "file")],
                             capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stderr[-2000:]
        got = json.loads(res.stdout.strip().splitlines()[-1])
        assert (got["code"], got["out"]) == (3, "token")
        assert (got["size"], got["data"], got["missing"]) == (8, "cde", [-1, ""])
        assert abs(got["now"] - time.time()) < 60 and got["nodes"] == ["127.0.0.2"]
        (tmp_path / "wrong").write_bytes(b"f" * 32)
        wrong = p.model_copy(update={"token_file": str(tmp_path / "wrong")})
        res = subprocess.run([sys.executable, "-c", _DRIVER, wrong.model_dump_json(), str(tmp_path / "file")],
                             capture_output=True, text=True, timeout=180)
        assert "cannot be reached" in json.loads(res.stdout.strip().splitlines()[-1])["refused"], res.stderr[-2000:]
    finally:
        down = ray_plane.head_down(p)
    assert down.pid == pid and down.started and down.processes >= 2
    assert ray_plane._session(pid) == [] and not ray_plane.head_pid_file(p).exists()
    assert ray_plane.head_down(p).started is False  # nothing left to stop
    subprocess.run(["rm", "-rf", "--", directory], check=False)


def test_a_script_that_exits_leaves_the_hosts_persistent_shell_running() -> None:
    """The host's shell runs each command in itself (`Remote.shell`): a node's stop that finds no
    node exits early, and must end only its own subshell, not that shell (nor leave `set -e`)."""
    p = RayPlane(head="10.0.0.1", token_file="/t", dir="/tmp/ck-ut-nd")
    for script in (ray_plane.node_down_script(p, "ld-a"),
                   ray_plane.node_up_script(p, "/nonexistent/python", "10.0.0.2", "ld-a", "a", TOKEN)):
        res = subprocess.run(["sh", "-c", f"{{ {script}\n}} </dev/null; false; echo still-here"],
                             capture_output=True, text=True, timeout=30)
        assert res.stdout.splitlines()[-1] == "still-here", res.stdout + res.stderr
    subprocess.run(["rm", "-rf", "--", "/tmp/ck-ut-nd"], check=False)


@pytest.mark.skipif(ray_plane.installed_ray() != ray_plane.RAY_VERSION, reason="chaoskit[loaders] not installed")
def test_a_cluster_nobody_runs_is_said_at_once_not_retried_for_minutes(tmp_path: Path) -> None:
    # ray.init against a port nothing listens on retries 20 times for over half a minute each;
    # `loaders status` once hung ten minutes on a lab whose head had been stopped
    import socket

    with socket.socket() as s:  # a port of loopback that was free a moment ago
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    (tmp_path / "token").write_bytes(TOKEN)
    p = RayPlane(address=f"127.0.0.2:{port}", token_file=str(tmp_path / "token"))
    with pytest.raises(ray_plane.RayUnavailable, match=f"nothing answers at the Ray cluster's 127.0.0.2:{port}"):
        ray_plane.connect(p)
