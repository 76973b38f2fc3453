"""The latency proxy's own ceiling: request/response rate through it (0 ms added) against the
same echo server directly, on loopback, with N concurrent connections. Prints ops/s and the
ratio; the proxy must stay far above the rates the sweeps drive (a few thousand commits/s).

python3 benchmarks/proxy_ceiling.py [--connections 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time

import chaoskit.faults.delay_proxy as proxy_module


def echo_server() -> int:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def drive(port: int, connections: int, seconds: float) -> float:
    counts = [0] * connections
    stop = time.time() + seconds

    def client(i: int) -> None:
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * 100
        while time.time() < stop:
            c.sendall(msg)
            got = 0
            while got < len(msg):
                got += len(c.recv(4096))
            counts[i] += 1
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    a = ap.parse_args()
    upstream = echo_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, proxy_module.__file__, "--port", str(port), "--upstream", "127.0.0.1",
                             "--upstream-port", str(upstream), "--delay-ms", "0"])
    time.sleep(0.5)
    try:
        direct = drive(upstream, a.connections, a.seconds)
        proxied = drive(port, a.connections, a.seconds)
    finally:
        proc.terminate()
        proc.wait()
    print(f"{a.connections} connections, 100-byte request/response, {a.seconds:g}s each")
    print(f"direct  {direct:10.0f} round trips/s")
    print(f"proxied {proxied:10.0f} round trips/s (0 ms added)  ratio {proxied / direct:.2f}")


if __name__ == "__main__":
    main()
