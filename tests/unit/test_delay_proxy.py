"""The latency proxy on loopback: requested delay added per direction, ordering kept, stats true."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

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
            with conn:
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


def test_proxy_adds_requested_delay_both_ways(tmp_path: Path) -> None:
    echo_port, done = _echo_server()
    port = _free_port()
    stats = tmp_path / "stats.json"
    proc = subprocess.Popen([sys.executable, proxy_module.__file__, "--port", str(port), "--upstream", "127.0.0.1",
                             "--upstream-port", str(echo_port), "--delay-ms", "10", "--stats", str(stats)])
    try:
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
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
