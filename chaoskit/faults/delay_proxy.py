"""A TCP relay that adds latency, for links where the kernel has no netem (or the database host
is not reachable over SSH at all, e.g. a managed service): the Toxiproxy idea, kept small.

Each chunk read from one side is forwarded to the other at `read time + delay (+ jitter)`, in
order, per direction. The delay it actually added (forward time - read time) is measured for
every chunk and written as a JSON summary to `--stats` every second, so a report can state the
latency that was really injected next to the one requested.

This file runs on the fault's host with only the standard library (/usr/bin/python3): it is
shipped there as a script by the `latency` fault.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import time


class Stats:
    def __init__(self) -> None:
        self.added_ms: list[float] = []
        self.bytes = 0
        self.connections = 0
        self.started = time.time()

    def record(self, added_s: float, n: int) -> None:
        self.bytes += n
        if len(self.added_ms) < 200_000:
            self.added_ms.append(added_s * 1000)

    def summary(self) -> dict:
        values = sorted(self.added_ms)

        def pct(p: float) -> float | None:
            return round(values[min(len(values) - 1, int(p / 100 * len(values)))], 3) if values else None

        return {"chunks": len(values), "bytes": self.bytes, "connections": self.connections,
                "added_p50_ms": pct(50), "added_p99_ms": pct(99), "added_max_ms": values[-1] if values else None,
                "seconds": round(time.time() - self.started, 3)}


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, jitter: float,
               stats: Stats) -> None:
    """Forward in order; each chunk leaves no earlier than its read time + delay."""
    queue: asyncio.Queue[tuple[float, float, bytes]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def sender() -> None:
        last_due = 0.0
        while True:
            read_at, due, data = await queue.get()
            if not data:
                break
            due = max(due, last_due)  # never reorder
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
            data = await reader.read(65536)
            now = loop.time()
            extra = random.gauss(0, jitter) if jitter else 0.0
            await queue.put((now, now + max(0.0, delay + extra), data))
            if not data:
                break
    except (ConnectionError, OSError):
        await queue.put((loop.time(), loop.time(), b""))
    await task


async def serve(listen: str, port: int, upstream: str, upstream_port: int, delay_ms: float, jitter_ms: float,
                delay_up_ms: float | None, stats_path: str | None) -> None:
    stats = Stats()
    down = delay_ms / 1000
    up = (delay_up_ms if delay_up_ms is not None else delay_ms) / 1000
    jitter = jitter_ms / 1000

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        stats.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(upstream, upstream_port)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(pump(client_r, server_w, up, jitter, stats),
                                 pump(server_r, client_w, down, jitter, stats), return_exceptions=True)
        except asyncio.CancelledError:  # shutting down: drop the connection quietly
            client_w.close()
            server_w.close()

    server = await asyncio.start_server(handle, listen, port, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)

    async def write_stats() -> None:
        while not stop.is_set():
            if stats_path:
                tmp = stats_path + ".tmp"
                with open(tmp, "w") as fh:
                    json.dump(stats.summary(), fh)
                os.replace(tmp, stats_path)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async with server:
        writer = asyncio.create_task(write_stats())
        await stop.wait()
        await writer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added to each direction")
    ap.add_argument("--delay-up-ms", type=float, default=None, help="client -> server, if different")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--stats", default=None)
    a = ap.parse_args()
    asyncio.run(serve(a.listen, a.port, a.upstream, a.upstream_port, a.delay_ms, a.jitter_ms, a.delay_up_ms,
                      a.stats))


if __name__ == "__main__":
    main()
