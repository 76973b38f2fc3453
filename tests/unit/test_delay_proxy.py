"""The latency proxy on loopback: requested delay added per direction, ordering kept, stats true."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import chaoskit.faults.delay_proxy as proxy_module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _echo_server() -> tuple[int, threading.Event]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    done = threading.Event()

    def run() -> None:
        srv.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn, contextlib.suppress(ConnectionResetError):  # the reset toxic cuts links with RST
                while data := conn.recv(65536):
                    conn.sendall(data)
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1], done


def _rtt_ms(port: int, n: int = 30) -> tuple[list[float], bytes]:
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts, echoed = [], b""
    for i in range(n):
        msg = f"{i:04d}".encode()
        t = time.perf_counter()
        c.sendall(msg)
        got = b""
        while len(got) < len(msg):
            got += c.recv(64)
        rtts.append((time.perf_counter() - t) * 1000)
        echoed += got
    c.close()
    return sorted(rtts), echoed


def _start_proxy(echo_port: int, *toxics: str, stats: Path | None = None) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    cmd = [sys.executable, proxy_module.__file__, "--port", str(port), "--upstream", "127.0.0.1",
           "--upstream-port", str(echo_port), *toxics]
    if stats is not None:
        cmd += ["--stats", str(stats)]
    proc = subprocess.Popen(cmd)
    if "--down" in toxics:
        time.sleep(0.5)
        return proc, port
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, port


def test_proxy_adds_requested_delay_both_ways(tmp_path: Path) -> None:
    echo_port, done = _echo_server()
    stats = tmp_path / "stats.json"
    proc, port = _start_proxy(echo_port, "--delay-ms", "10", stats=stats)
    try:
        rtts, echoed = _rtt_ms(port)
        assert echoed == b"".join(f"{i:04d}".encode() for i in range(30))  # in order, intact
        p50 = rtts[len(rtts) // 2]
        assert 19.5 <= p50 <= 30, rtts  # 10 ms each way
        time.sleep(1.3)
        summary = json.loads(stats.read_text())
        assert summary["chunks"] >= 60 and 9.9 <= summary["added_p50_ms"] <= 13
    finally:
        proc.terminate()
        proc.wait(5)
        done.set()
    assert proc.returncode == 0  # SIGTERM is a clean stop


def test_delay_per_stream(tmp_path: Path) -> None:
    echo_port, done = _echo_server()
    proc, port = _start_proxy(echo_port, "--delay-up-ms", "15", "--delay-down-ms", "0")
    try:
        rtts, _ = _rtt_ms(port, 20)
        assert 14.5 <= rtts[len(rtts) // 2] <= 22, rtts  # one way delayed only
    finally:
        proc.terminate()
        proc.wait(5)
        done.set()


def test_bandwidth_paces_a_stream() -> None:
    echo_port, done = _echo_server()
    proc, port = _start_proxy(echo_port, "--rate-down-bps", "200000")  # 200 kB/s server -> client
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        payload = b"x" * 300_000
        t = time.perf_counter()
        threading.Thread(target=c.sendall, args=(payload,), daemon=True).start()
        got = 0
        while got < len(payload):
            got += len(c.recv(65536))
        elapsed = time.perf_counter() - t
        c.close()
        assert 1.45 <= elapsed <= 2.5, elapsed  # 300 kB at 200 kB/s: 1.5 s however the reads are sized
    finally:
        proc.terminate()
        proc.wait(5)
        done.set()


def test_reset_after_cuts_every_connection_with_rst(tmp_path: Path) -> None:
    echo_port, done = _echo_server()
    stats = tmp_path / "stats.json"
    proc, port = _start_proxy(echo_port, "--reset-after-ms", "300", stats=stats)
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(b"ping")
        assert c.recv(16) == b"ping"  # the link works until the reset
        t = time.perf_counter()
        with pytest.raises(ConnectionResetError):
            while True:
                c.sendall(b"more")
                if not c.recv(16):
                    break
                time.sleep(0.02)
        assert time.perf_counter() - t < 1.0
        time.sleep(1.2)
        assert json.loads(stats.read_text())["resets"] == 1
    finally:
        proc.terminate()
        proc.wait(5)
        done.set()


def test_down_refuses_connections_and_ttl_ends_the_relay() -> None:
    echo_port, done = _echo_server()
    proc, port = _start_proxy(echo_port, "--down", "--ttl", "1.5")
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        assert proc.wait(5) == 0  # gone by itself after its TTL
    finally:
        if proc.poll() is None:
            proc.kill()
        done.set()


def test_relay_ends_with_its_parent(tmp_path: Path) -> None:
    echo_port, done = _echo_server()
    port = _free_port()
    pid_file = tmp_path / "relay.pid"
    # a parent shell starts the relay in the background, records its pid and dies at once
    script = (f"{sys.executable} {proxy_module.__file__} --port {port} --upstream 127.0.0.1 "
              f"--upstream-port {echo_port} --delay-ms 1 --parent-pid $$ & echo $! > {pid_file}; sleep 0.5")
    subprocess.run(["sh", "-c", script], check=True)
    relay = int(pid_file.read_text())
    try:
        deadline = time.time() + 5
        while time.time() < deadline and Path(f"/proc/{relay}").exists():
            time.sleep(0.1)
        assert not Path(f"/proc/{relay}").exists() or "Z" in Path(f"/proc/{relay}/stat").read_text().split()[2]
    finally:
        done.set()


def test_toxics_change_at_runtime_on_sighup(tmp_path: Path) -> None:
    import os
    import signal

    echo_port, done = _echo_server()
    stats, control = tmp_path / "stats.json", tmp_path / "control.json"
    proc, port = _start_proxy(echo_port, "--control", str(control), stats=stats)

    def apply(*toxics: str) -> None:
        before = json.loads(stats.read_text())["generation"] if stats.exists() else 0
        control.write_text(json.dumps(list(toxics)))
        os.kill(proc.pid, signal.SIGHUP)
        deadline = time.time() + 3
        while time.time() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(stats.read_text())["generation"] == before + 1:
                    return
            time.sleep(0.02)
        raise AssertionError("the relay did not acknowledge the new toxics")

    try:
        time.sleep(1.1)  # first stats written
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def rtt() -> float:
            t = time.perf_counter()
            c.sendall(b"ping")
            assert c.recv(16) == b"ping"
            return (time.perf_counter() - t) * 1000

        # the fastest of a few round trips: one sample on a loaded machine can take any time, but a
        # delay the relay adds is a floor no sample goes under (15 ms each way: 30 ms a round trip)
        assert min(rtt() for _ in range(5)) < 15
        apply("--delay-ms", "15")  # the live connection is slowed from now on
        assert 29 <= min(rtt() for _ in range(5)) < 60  # added once each way, not twice
        apply("--down")  # the live connection is cut and new ones are refused
        with pytest.raises((ConnectionResetError, BrokenPipeError, AssertionError)):
            rtt()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        apply()  # healed: a new connection works without delay
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert min(rtt() for _ in range(5)) < 15
    finally:
        proc.terminate()
        proc.wait(5)
        done.set()
