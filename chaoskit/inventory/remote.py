"""Commands on hosts over SSH, behind a small interface so tests can use a scripted fake.

Two paths to a host, both over one persistent fabric/paramiko connection:
- `run`: one exec channel per command (fabric), separate stdout/stderr, any timeout.
- `shell`: one long-lived remote `sh` (root via the host's escalation when it has one) fed
  command after command. It costs no new channel or process on the control node, which is
  what keeps clock reads and fault injection within milliseconds of their scheduled instant.

Escalation is explicit: `sudo=True` wraps the command in `sudo -n` unless the login is root.
Host keys are checked against the inventory's known_hosts with paramiko's RejectPolicy unless
the host says `strict_host_keys: false`.
"""

from __future__ import annotations

import contextlib
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import paramiko
from fabric import Connection

from chaoskit.errors import HostUnreachable, RemoteCommandError
from chaoskit.inventory.models import Host, Inventory


@dataclass(frozen=True)
class CommandResult:
    host: str
    command: str
    exited: int
    stdout: str
    stderr: str
    started: float = 0.0  # control-node wall clock when sent
    finished: float = 0.0  # control-node wall clock when the exit status arrived

    @property
    def ok(self) -> bool:
        return self.exited == 0


class Remote(Protocol):
    """What the rest of chaoskit needs from a host."""

    name: str

    def run(self, command: str, *, sudo: bool = False, timeout: float | None = 60.0,
            check: bool = True) -> CommandResult: ...

    def shell(self, command: str, *, timeout: float | None = 30.0, check: bool = True) -> CommandResult: ...

    def stream(self, command: str, *, stop: Callable[[], bool], sudo: bool = False) -> Iterator[str]: ...

    def close(self) -> None: ...


def escalate(host: Host, command: str, sudo: bool) -> str:
    """The command as it must be sent: wrapped in sudo when root is needed and we are not root."""
    if not sudo or (host.user == "root" and not host.become):
        return command
    if host.user == "root" and host.become_user == "root":
        return command
    return f"sudo -n -u {shlex.quote(host.become_user)} -- sh -c {shlex.quote(command)}"


def _parse_jump(spec: str) -> tuple[str | None, str, int]:
    user = None
    if "@" in spec:
        user, spec = spec.split("@", 1)
    port = 22
    if spec.startswith("[") and "]" in spec:
        addr, _, rest = spec[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
        return user, addr, port
    if spec.count(":") == 1:
        addr, p = spec.split(":")
        return user, addr, int(p)
    return user, spec, port


class SshRemote:
    """One host over one persistent SSH connection (opened lazily, reused, thread-safe)."""

    def __init__(self, host: Host, inventory: Inventory | None = None) -> None:
        self.host = host
        self.name = host.name
        self._inventory = inventory
        self._conn: Connection | None = None
        self._gateway: SshRemote | None = None
        self._lock = threading.Lock()
        self._shell: _Shell | None = None
        self._shell_lock = threading.Lock()

    # -- connection -------------------------------------------------------------------------
    def _connect_kwargs(self, host: Host) -> dict:
        kwargs: dict = {"banner_timeout": host.connect_timeout,
                        "auth_timeout": host.connect_timeout, "allow_agent": True}
        if host.key_file:
            kwargs["key_filename"] = [host.key_file]
            kwargs["look_for_keys"] = False
        return kwargs

    def _make_connection(self, host: Host, gateway: Connection | None) -> Connection:
        conn = Connection(host.address, user=host.user, port=host.port, gateway=gateway,
                          connect_timeout=host.connect_timeout,
                          connect_kwargs=self._connect_kwargs(host))
        if host.strict_host_keys:
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            conn.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        if host.known_hosts:
            try:
                conn.client.load_host_keys(host.known_hosts)
            except OSError as exc:
                raise HostUnreachable(host.name, f"cannot read known_hosts {host.known_hosts}: {exc}") from None
        return conn

    def _gateway_connection(self) -> Connection | None:
        jump = self.host.jump
        if not jump:
            return None
        if self._inventory is not None and jump in self._inventory.hosts:
            self._gateway = SshRemote(self._inventory.hosts[jump], self._inventory)
            return self._gateway.connection()
        user, addr, port = _parse_jump(jump)
        jump_host = self.host.model_copy(update={
            "name": f"{self.host.name}-jump", "address": addr, "port": port,
            "user": user or self.host.user, "jump": None})
        self._gateway = SshRemote(jump_host, self._inventory)
        return self._gateway.connection()

    def connection(self) -> Connection:
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            try:
                conn = self._make_connection(self.host, self._gateway_connection())
                conn.open()
                transport = conn.client.get_transport()
                if transport is not None:
                    transport.set_keepalive(5)
                    sock = transport.sock
                    if isinstance(sock, socket.socket):  # a jump host's channel has no TCP options
                        # small commands must not wait ~40 ms behind Nagle + delayed ACK
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except HostUnreachable:
                raise
            except Exception as exc:  # paramiko raises many unrelated types here
                reason = str(exc) or type(exc).__name__
                if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in reason:
                    reason = f"host key not in known_hosts ({self.host.known_hosts or 'system'})"
                raise HostUnreachable(self.name, reason) from None
            self._conn = conn
            return conn

    # -- commands ---------------------------------------------------------------------------
    def run(self, command: str, *, sudo: bool = False, timeout: float | None = 60.0,
            check: bool = True) -> CommandResult:
        conn = self.connection()
        wire = escalate(self.host, command, sudo)
        started = time.time()
        try:
            res = conn.run(wire, hide=True, warn=True, timeout=timeout, in_stream=False)
        except Exception as exc:  # CommandTimedOut, socket errors
            raise HostUnreachable(self.name, f"while running {command!r}: {exc}") from None
        result = CommandResult(self.name, command, res.exited, res.stdout, res.stderr, started, time.time())
        if check and not result.ok:
            raise RemoteCommandError(self.name, command, result)
        return result

    def shell(self, command: str, *, timeout: float | None = 30.0, check: bool = True) -> CommandResult:
        with self._shell_lock:
            if self._shell is None or not self._shell.alive:
                transport = self.connection().client.get_transport()
                if transport is None:
                    raise HostUnreachable(self.name, "no SSH transport")
                self._shell = _Shell(transport, self._shell_command())
            try:
                exited, out, err, started, finished = self._shell.execute(command, timeout)
            except (OSError, EOFError, paramiko.SSHException, TimeoutError) as exc:
                self._shell.close()
                self._shell = None
                raise HostUnreachable(self.name, f"shell command {command!r} failed: {exc}") from None
        result = CommandResult(self.name, command, exited, out, err, started, finished)
        if check and not result.ok:
            raise RemoteCommandError(self.name, command, result)
        return result

    def stream(self, command: str, *, stop: Callable[[], bool], sudo: bool = False) -> Iterator[str]:
        """Lines of a long-running command as they come (as the login user, or escalated with
        `sudo`), until it ends or `stop()` says so; then its process group is ended on the host
        (it runs under setsid)."""
        transport = self.connection().client.get_transport()
        if transport is None:
            raise HostUnreachable(self.name, "no SSH transport")
        channel = transport.open_session()
        channel.exec_command(escalate(self.host, f"setsid sh -c {shlex.quote('echo __ckpgid $$; ' + command)}", sudo))
        pgid = None
        buf = b""
        try:
            while not stop():
                if channel.recv_ready():
                    chunk = channel.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                    while b"\n" in buf:
                        raw, buf = buf.split(b"\n", 1)
                        line = raw.decode(errors="replace")
                        if pgid is None and line.startswith("__ckpgid "):
                            pgid = line.split()[1]
                            continue
                        yield line
                elif channel.exit_status_ready():
                    break
                else:
                    select.select([channel], [], [], 0.2)
        finally:
            with contextlib.suppress(Exception):
                channel.close()
            if pgid and pgid.isdigit():
                with contextlib.suppress(Exception):
                    self.shell(f"kill -TERM -{pgid} 2>/dev/null; true", check=False, timeout=10)

    def _shell_command(self) -> str:
        """A root shell; SSH_CONNECTION is carried through sudo's env reset (faults exempt the
        controller's SSH address, which they read from it)."""
        wrapped = escalate(self.host, "exec sh", sudo=True)
        if wrapped == "exec sh":
            return wrapped
        user = shlex.quote(self.host.become_user)
        return f'sudo -n -u {user} -- env SSH_CONNECTION="$SSH_CONNECTION" sh'

    def close(self) -> None:
        with self._shell_lock:
            if self._shell is not None:
                self._shell.close()
                self._shell = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        if self._gateway is not None:
            self._gateway.close()
            self._gateway = None


@dataclass
class _Shell:
    """A remote `sh` reading commands from its stdin; each reply is framed by a random marker."""

    transport: paramiko.Transport
    start_command: str
    channel: paramiko.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = self.transport.open_session()
        self.channel.exec_command(self.start_command)

    @property
    def alive(self) -> bool:
        return not self.channel.closed and not self.channel.exit_status_ready()

    def execute(self, command: str, timeout: float | None) -> tuple[int, str, str, float, float]:
        marker = "__ck_" + secrets.token_hex(8)
        # stdout's marker first and timed on arrival: a second small write through a jump host can
        # sit ~40 ms behind Nagle/delayed ACK; the stderr marker only completes stderr's capture.
        script = (f"{{ {command}\n}} </dev/null; __ck_rc=$?; printf '\\n%s %d\\n' {marker} $__ck_rc;"
                  f" printf '\\n%s\\n' {marker} >&2\n")
        started = time.time()
        self.channel.sendall(script.encode())
        out, err = bytearray(), bytearray()
        tail_out, tail_err = f"\n{marker} ".encode(), f"\n{marker}\n".encode()
        deadline = None if timeout is None else time.monotonic() + timeout
        finished: float | None = None
        while True:
            while self.channel.recv_ready():
                out += self.channel.recv(65536)
            while self.channel.recv_stderr_ready():
                err += self.channel.recv_stderr(65536)
            idx = out.find(tail_out)
            if idx >= 0 and finished is None and out.endswith(b"\n"):
                finished = time.time()
            if finished is not None and err.find(tail_err) >= 0:
                rc = int(out[idx + len(tail_out):].strip())
                e_idx = err.find(tail_err)
                return rc, out[:idx].decode(errors="replace"), err[:e_idx].decode(errors="replace"), \
                    started, finished
            if self.channel.exit_status_ready() and not self.channel.recv_ready():
                raise EOFError("remote shell exited")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no reply within {timeout}s")
            select.select([self.channel], [], [], 0.0005 if idx >= 0 else 0.05)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead channel must never mask the real error
            self.channel.close()
