"""A TCP relay with link toxics, for links where the kernel has no netem (or the database host is
not reachable over SSH at all, e.g. a managed service): the Toxiproxy idea, kept small.

Toxics, per stream (upstream = client -> server, downstream = server -> client):
- latency: each chunk read from one side is forwarded at `read time + delay (+ jitter)`, in order;
- bandwidth: chunks are paced so a stream never exceeds `rate` bytes/s;
- reset: every connection is reset (RST, both sides) `reset_after_ms` after it was opened;
- down: no listener at all, so redirected connections are refused (the link is cut).

The delay it actually added (forward time - read time) is measured for every chunk and written
as a JSON summary to `--stats` every second, so a report states the latency really injected next
to the one requested. The proxy ends itself after `--ttl` seconds, and when `--parent-pid` is
gone (a proxy on the control node dies with its controller): no toxic outlives its fault.

This file runs on the fault's host with only the standard library (/usr/bin/python3): it is
shipped there as a script by the `latency`/`proxy` fault, and run locally for client links.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
import time


class Stats:
    def __init__(self) -> None:
        self.added_ms: list[float] = []
        self.bytes = 0
        self.connections = 0
        self.resets = 0
        self.started = time.time()

    def record(self, added_s: float, n: int) -> None:
        self.bytes += n
        if len(self.added_ms) < 200_000:
            self.added_ms.append(added_s * 1000)

    def summary(self) -> dict:
        values = sorted(self.added_ms)

        def pct(p: float) -> float | None:
            return round(values[min(len(values) - 1, int(p / 100 * len(values)))], 3) if values else None

        return {"chunks": len(values), "bytes": self.bytes, "connections": self.connections, "resets": self.resets,
                "added_p50_ms": pct(50), "added_p99_ms": pct(99), "added_max_ms": values[-1] if values else None,
                "seconds": round(time.time() - self.started, 3)}


class Toxics:
    """What one stream does to its bytes: delay/jitter in seconds, rate in bytes/s (0 = unlimited)."""

    def __init__(self, delay: float = 0.0, jitter: float = 0.0, rate: float = 0.0) -> None:
        self.delay = delay
        self.jitter = jitter
        self.rate = rate


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, toxics: Toxics, stats: Stats) -> None:
    """Forward in order; each chunk leaves no earlier than its read time + delay, and no faster
    than the stream's rate allows."""
    queue: asyncio.Queue[tuple[float, float, bytes]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    chunk = 65536 if not toxics.rate else max(512, min(65536, int(toxics.rate / 50)))  # ~20 ms of bytes

    async def sender() -> None:
        last_due = 0.0
        link_free = 0.0
        while True:
            read_at, due, data = await queue.get()
            if not data:
                break
            due = max(due, last_due)  # never reorder
            if toxics.rate:
                due = max(due, link_free)
                link_free = due + len(data) / toxics.rate
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            stats.record(loop.time() - read_at, len(data))
            last_due = due
        writer.close()

    task = asyncio.create_task(sender())
    try:
        while True:
            data = await reader.read(chunk)
            now = loop.time()
            extra = random.gauss(0, toxics.jitter) if toxics.jitter else 0.0
            await queue.put((now, now + max(0.0, toxics.delay + extra), data))
            if not data:
                break
    except (ConnectionError, OSError):
        await queue.put((loop.time(), loop.time(), b""))
    await task


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the peer gets a RST (connection reset by peer), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def serve(listen: str, port: int, upstream: str, upstream_port: int, up: Toxics, down: Toxics,
                reset_after: float | None, link_down: bool, stats_path: str | None, ttl: float | None,
                parent_pid: int | None) -> None:
    stats = Stats()
    loop = asyncio.get_running_loop()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        stats.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(upstream, upstream_port)
        except OSError:
            _reset(client_w)
            return
        for w in (client_w, server_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        relay = asyncio.gather(pump(client_r, server_w, up, stats), pump(server_r, client_w, down, stats),
                               return_exceptions=True)
        try:
            if reset_after is None:
                await relay
            else:
                done, _ = await asyncio.wait([relay], timeout=reset_after)
                if not done:
                    stats.resets += 1
                    _reset(client_w)
                    _reset(server_w)
                    relay.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await relay
        except asyncio.CancelledError:  # shutting down: drop the connection quietly
            client_w.close()
            server_w.close()

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    deadline = time.time() + ttl if ttl else None

    async def housekeeping() -> None:
        while not stop.is_set():
            if stats_path:
                tmp = stats_path + ".tmp"
                with open(tmp, "w") as fh:
                    json.dump(stats.summary(), fh)
                os.replace(tmp, stats_path)
            if deadline is not None and time.time() >= deadline:
                stop.set()
            if parent_pid is not None and os.getppid() != parent_pid:
                stop.set()  # the controller that started us is gone
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    if link_down:
        await housekeeping()
        return
    server = await asyncio.start_server(handle, listen, port, reuse_address=True)
    async with server:
        await housekeeping()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added to each direction")
    ap.add_argument("--delay-up-ms", type=float, default=None, help="client -> server, if different")
    ap.add_argument("--delay-down-ms", type=float, default=None, help="server -> client, if different")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--rate-up-bps", type=float, default=0.0, help="client -> server bytes/s (0: unlimited)")
    ap.add_argument("--rate-down-bps", type=float, default=0.0, help="server -> client bytes/s (0: unlimited)")
    ap.add_argument("--reset-after-ms", type=float, default=None, help="reset every connection after this long")
    ap.add_argument("--down", action="store_true", help="no listener: connections are refused")
    ap.add_argument("--stats", default=None)
    ap.add_argument("--ttl", type=float, default=None, help="end after this many seconds")
    ap.add_argument("--parent-pid", type=int, default=None, help="end when this parent process is gone")
    a = ap.parse_args()
    jitter = a.jitter_ms / 1000
    delay_up = (a.delay_up_ms if a.delay_up_ms is not None else a.delay_ms) / 1000
    delay_down = (a.delay_down_ms if a.delay_down_ms is not None else a.delay_ms) / 1000
    # jitter varies the delay of the delayed streams only
    up = Toxics(delay_up, jitter if delay_up else 0.0, a.rate_up_bps)
    down = Toxics(delay_down, jitter if delay_down else 0.0, a.rate_down_bps)
    reset_after = a.reset_after_ms / 1000 if a.reset_after_ms is not None else None
    asyncio.run(serve(a.listen, a.port, a.upstream, a.upstream_port, up, down, reset_after, a.down, a.stats, a.ttl,
                      a.parent_pid))


if __name__ == "__main__":
    main()
