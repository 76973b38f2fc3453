"""A TCP relay with link toxics, for links where the kernel has no netem (or the database host is
not reachable over SSH at all, e.g. a managed service): the Toxiproxy idea, kept small.

Toxics, per stream (upstream = client -> server, downstream = server -> client):
- latency: each chunk read from one side is forwarded at `read time + delay (+ jitter)`, in order;
- bandwidth: a stream carries at most `rate` bytes/s: each ~20 ms piece is delivered once the
  link has had the time to carry it;
- reset: every connection is reset (RST, both sides) `reset_after_ms` after it was opened;
- down: no listener at all, so redirected connections are refused (the link is cut).

The delay it actually added (forward time - read time) is measured for every chunk and written
as a JSON summary to `--stats` every second, so a report states the latency really injected next
to the one requested. The proxy ends itself after `--ttl` seconds, and when `--parent-pid` is
gone (a proxy on the control node dies with its controller): no toxic outlives its fault.

This file runs on the fault's host with only the standard library (python3 >= 3.7): it is
shipped there as a script by the `latency`/`proxy` fault, and run locally for client links.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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
        self.set(delay, jitter, rate)

    def set(self, delay: float, jitter: float, rate: float) -> None:
        self.delay = delay
        self.jitter = jitter
        self.rate = rate


HIGH_WATER = 4 * 1024 * 1024  # bytes held back in one stream before its source stops being read
LOW_WATER = 1024 * 1024


class Stream:
    """One direction of one connection. Each chunk is due at its read time + delay (+ jitter),
    never before the previous chunk (order kept) and never faster than the rate; one timer
    for the head of the queue, and no timer at all when nothing is delayed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, toxics: Toxics, stats: Stats) -> None:
        self.loop = loop
        self.toxics = toxics
        self.stats = stats
        self.source: asyncio.Transport | None = None
        self.out: asyncio.Transport | None = None
        self.pending: collections.deque[tuple[float, float, bytes]] = collections.deque()
        self.pending_bytes = 0
        self.last_due = 0.0
        self.link_free = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.eof = False
        self.paused = False

    def feed(self, data: bytes) -> None:
        now = self.loop.time()
        t = self.toxics
        due = now + t.delay + (random.gauss(0, t.jitter) if t.jitter else 0.0)
        due = max(due, self.last_due)  # never reorder
        if not t.rate and due <= now and not self.pending and self.out is not None:
            self.out.write(data)
            self.stats.record(0.0, len(data))
            self.last_due = due
            return
        if t.rate:  # a piece is delivered once the link has carried all of it (~20 ms pieces)
            size = max(512, int(t.rate / 50))
            pieces = [data[i:i + size] for i in range(0, len(data), size)]
        else:
            pieces = [data]
        for piece in pieces:
            if t.rate:
                due = max(due, self.link_free) + len(piece) / t.rate
                self.link_free = due
            self.pending.append((due, now, piece))
        self.last_due = due
        self.pending_bytes += len(data)
        if self.pending_bytes > HIGH_WATER and self.source is not None and not self.paused:
            self.paused = True
            self.source.pause_reading()
        self._arm()

    def finish(self) -> None:
        """The source is done: close the far side once everything held back has left."""
        self.eof = True
        self._arm()

    def connected(self, out: asyncio.Transport) -> None:
        self.out = out
        self._arm()

    def _arm(self) -> None:
        if self.timer is not None or self.out is None:
            return
        if self.pending:
            self.timer = self.loop.call_at(self.pending[0][0], self._flush)
        elif self.eof:
            self.out.close()

    def _flush(self) -> None:
        self.timer = None
        now = self.loop.time()
        out = self.out
        assert out is not None
        while self.pending and self.pending[0][0] <= now:
            _, read_at, data = self.pending.popleft()
            self.pending_bytes -= len(data)
            out.write(data)
            self.stats.record(now - read_at, len(data))
        if self.paused and self.pending_bytes < LOW_WATER and self.source is not None:
            self.paused = False
            self.source.resume_reading()
        self._arm()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.pending.clear()


def _reset(transport: asyncio.Transport | None) -> None:
    """Close with SO_LINGER 0: the peer gets a RST (connection reset by peer), not a FIN."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _Side(asyncio.Protocol):
    """One socket of a relayed connection: what it reads feeds `inbound`, and it is the
    destination of `outbound`."""

    def __init__(self, inbound: Stream, outbound: Stream) -> None:
        self.inbound = inbound
        self.outbound = outbound
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inbound.source = transport
        self.outbound.connected(transport)

    def data_received(self, data: bytes) -> None:
        self.inbound.feed(data)

    def eof_received(self) -> bool:
        self.inbound.finish()
        return True  # keep our sending half open until the other stream is done

    def connection_lost(self, exc: Exception | None) -> None:
        self.inbound.finish()
        self.outbound.cancel()

    def pause_writing(self) -> None:  # our socket is full: stop reading the side that feeds it
        if self.outbound.source is not None:
            self.outbound.source.pause_reading()

    def resume_writing(self) -> None:
        if self.outbound.source is not None and not self.outbound.paused:
            self.outbound.source.resume_reading()


class _Client(_Side):
    """The accepted side: opens the upstream connection, and resets both after `reset_after`."""

    def __init__(self, relay: Relay) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(Stream(loop, relay.up, relay.stats), Stream(loop, relay.down, relay.stats))
        self.relay = relay
        self.server: _Side | None = None
        self.connecting: asyncio.Future | None = None
        self.reset_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.relay.stats.connections += 1
        self.relay.clients.add(self)
        self.transport.pause_reading()  # until the upstream is there (data waits in the kernel)
        self.connecting = asyncio.ensure_future(self._connect())
        self.schedule_reset(self.relay.reset_after)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.relay.clients.discard(self)
        self.schedule_reset(None)

    def schedule_reset(self, after: float | None) -> None:
        """Reset this connection `after` seconds from now (None: never)."""
        if self.reset_timer is not None:
            self.reset_timer.cancel()
            self.reset_timer = None
        if after is not None:
            self.reset_timer = asyncio.get_running_loop().call_later(after, self.reset_both)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(lambda: _Side(self.outbound, self.inbound),
                                                     self.relay.upstream, self.relay.upstream_port)
        except OSError:
            _reset(self.transport)
            return
        self.server = server
        if self.transport is None or self.transport.is_closing():
            _reset(server.transport)
            return
        self.transport.resume_reading()

    def reset_both(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.relay.stats.resets += 1
            self.inbound.cancel()
            self.outbound.cancel()
            _reset(self.transport)
            _reset(self.server.transport if self.server is not None else None)


class Relay:
    """The listener, its toxics and its live connections. Toxics can change while it runs
    (`--control`: a JSON list of toxic arguments, read on SIGHUP): a client-link fault in a drill
    is applied to relays the load has been using from the start, at the fault's instant."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.listen = a.listen
        self.port = a.port
        self.upstream = a.upstream
        self.upstream_port = a.upstream_port
        self.stats_path = a.stats
        self.control = a.control
        self.stats = Stats()
        self.up = Toxics()
        self.down = Toxics()
        self.reset_after: float | None = None
        self.link_down = False
        self.clients: set[_Client] = set()
        self.server: asyncio.AbstractServer | None = None
        self.generation = 0
        self.applied_at: float | None = None
        self.set_toxics(a)

    def set_toxics(self, a: argparse.Namespace) -> None:
        jitter = a.jitter_ms / 1000
        delay_up = (a.delay_up_ms if a.delay_up_ms is not None else a.delay_ms) / 1000
        delay_down = (a.delay_down_ms if a.delay_down_ms is not None else a.delay_ms) / 1000
        # in place: every stream holds its direction's Toxics; jitter varies delayed streams only
        self.up.set(delay_up, jitter if delay_up else 0.0, a.rate_up_bps)
        self.down.set(delay_down, jitter if delay_down else 0.0, a.rate_down_bps)
        self.reset_after = a.reset_after_ms / 1000 if a.reset_after_ms is not None else None
        self.link_down = a.down

    async def apply(self) -> None:
        """New toxics from the control file, effective for every live connection now."""
        with open(self.control) as fh:
            args = toxic_parser().parse_args(json.load(fh))
        self.set_toxics(args)
        for client in list(self.clients):
            client.schedule_reset(self.reset_after)
        if self.link_down:
            await self.stop_listening()
            for client in list(self.clients):
                client.reset_both()
        else:
            await self.start_listening()
        self.generation += 1
        self.applied_at = time.time()
        self.write_stats()

    async def start_listening(self) -> None:
        if self.server is None and not self.link_down:
            self.server = await asyncio.get_running_loop().create_server(
                lambda: _Client(self), self.listen, self.port, reuse_address=True)

    async def stop_listening(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    def write_stats(self) -> None:
        if self.stats_path:
            tmp = self.stats_path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({**self.stats.summary(), "generation": self.generation, "applied_at": self.applied_at}, fh)
            os.replace(tmp, self.stats_path)


async def serve(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    relay = Relay(a)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: set[asyncio.Future] = set()

    def reload() -> None:
        task = asyncio.ensure_future(relay.apply())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    if relay.control:
        loop.add_signal_handler(signal.SIGHUP, reload)
    deadline = time.time() + a.ttl if a.ttl else None
    await relay.start_listening()
    try:
        while not stop.is_set():
            relay.write_stats()
            if deadline is not None and time.time() >= deadline:
                stop.set()
            if a.parent_pid is not None and os.getppid() != a.parent_pid:
                stop.set()  # the controller that started us is gone
            with contextlib.suppress(asyncio.TimeoutError):  # a distinct class before Python 3.11
                await asyncio.wait_for(stop.wait(), 0.1 if a.parent_pid is not None else 1.0)
    finally:
        await relay.stop_listening()


def toxic_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added to each direction")
    ap.add_argument("--delay-up-ms", type=float, default=None, help="client -> server, if different")
    ap.add_argument("--delay-down-ms", type=float, default=None, help="server -> client, if different")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--rate-up-bps", type=float, default=0.0, help="client -> server bytes/s (0: unlimited)")
    ap.add_argument("--rate-down-bps", type=float, default=0.0, help="server -> client bytes/s (0: unlimited)")
    ap.add_argument("--reset-after-ms", type=float, default=None, help="reset every connection after this long")
    ap.add_argument("--down", action="store_true", help="no listener: connections are refused")
    return ap


def _die_with_parent(parent_pid: int) -> None:
    """On the control node: SIGKILL when the controller dies (Linux), besides the 0.1 s poll."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[toxic_parser()])
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--stats", default=None)
    ap.add_argument("--control", default=None, help="JSON list of toxic arguments, applied on SIGHUP")
    ap.add_argument("--ttl", type=float, default=None, help="end after this many seconds")
    ap.add_argument("--parent-pid", type=int, default=None, help="end when this parent process is gone")
    args = ap.parse_args()
    if args.parent_pid is not None:
        _die_with_parent(args.parent_pid)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
