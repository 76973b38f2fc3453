"""Remotes for unit tests, shipped with the package so users' own tests can use them too.

- `ScriptedRemote`: answers each command from a script of rules (a substring, a regex or a
  predicate -> a reply, an exception to raise, or a hang), and records every command in order:
  for testing what is sent, in which order, and what happens when a host fails or stops answering
  at a given step.
- `LocalRemote`: runs the commands in a local `sh` (no SSH): the real host scripts against real
  local processes, with the fault journal under a temporary root (FaultManager's
  `journal_root`): for testing that a fault is applied, healed by the controller, by its dead-man
  and by `recover`, without a lab.

Use either through `RemotePool(inventory, factory=...)`.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chaoskit.errors import HostUnreachable, RemoteCommandError
from chaoskit.inventory.remote import CommandResult


@dataclass
class Reply:
    """What a scripted host answers: an exit status and output; `delay` seconds before it."""

    exited: int = 0
    stdout: str = ""
    stderr: str = ""
    delay: float = 0.0


HANG = object()  # a reply that never comes (until the remote is closed)


# Which of chaoskit's host scripts a command is (for rules and for checking the order of calls).
def is_stage(command: str) -> bool:
    """journal.stage_script: journal a fault, arm its dead-man."""
    return "deadman.pid" in command and "set -e" in command


def is_trigger(command: str) -> bool:
    """journal.trigger_script: the instant."""
    return ".inject" in command and not is_stage(command)


def is_revert(command: str) -> bool:
    """journal.revert_script by the controller."""
    return '.revert" controller' in command and not is_trigger(command) and not is_stage(command)


def fault_id_of(command: str) -> str:
    """The fault id a stage, trigger or revert command is about."""
    m = re.search(r"\bID=([0-9a-f]{12})\b", command) or re.search(r"/([0-9a-f]{12})\.inject", command)
    if m is None:
        raise ValueError(f"no fault id in {command[:200]!r}")
    return m.group(1)


@dataclass
class Rule:
    match: str | re.Pattern[str] | Callable[[str], bool]
    reply: Reply | BaseException | object | Callable[[str], Reply]
    times: int | None = None  # answered this many times, then the rule is spent (None: always)

    def matches(self, command: str) -> bool:
        if self.times == 0:
            return False
        if isinstance(self.match, str):
            return self.match in command
        if isinstance(self.match, re.Pattern):
            return bool(self.match.search(command))
        return bool(self.match(command))


@dataclass
class ScriptedRemote:
    name: str
    rules: list[Rule] = field(default_factory=list)
    default: Reply | None = field(default_factory=Reply)  # None: an unscripted command is an error
    calls: list[str] = field(default_factory=list)
    clock: Callable[[], float] = time.time
    _closed: threading.Event = field(default_factory=threading.Event)

    def on(self, match: str | re.Pattern[str] | Callable[[str], bool],
           reply: Reply | BaseException | object | Callable[[str], Reply], times: int | None = None) -> ScriptedRemote:
        """Add a rule (earlier rules win)."""
        self.rules.append(Rule(match, reply, times))
        return self

    def _answer(self, command: str, check: bool) -> CommandResult:
        self.calls.append(command)
        started = self.clock()
        rule = next((r for r in self.rules if r.matches(command)), None)
        if rule is None:
            if self.default is None:
                raise AssertionError(f"{self.name}: unscripted command: {command[:200]!r}")
            reply: Any = self.default
        else:
            if rule.times is not None:
                rule.times -= 1
            reply = rule.reply
        if reply is HANG:
            self._closed.wait()
            raise HostUnreachable(self.name, "closed while a command hung")
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply) and not isinstance(reply, Reply):
            reply = reply(command)
        if reply.delay:
            time.sleep(reply.delay)
        res = CommandResult(self.name, command, reply.exited, reply.stdout, reply.stderr, started, self.clock())
        if check and res.exited != 0:
            raise RemoteCommandError(self.name, command, res)
        return res

    def run(self, command: str, *, sudo: bool = False, timeout: float | None = 60.0,
            check: bool = True) -> CommandResult:
        return self._answer(command, check)

    def shell(self, command: str, *, timeout: float | None = 30.0, check: bool = True) -> CommandResult:
        return self._answer(command, check)

    def stream(self, command: str, *, stop: Callable[[], bool], sudo: bool = False) -> Iterator[str]:
        res = self._answer(command, False)
        yield from res.stdout.splitlines()

    def close(self) -> None:
        self._closed.set()


class LocalRemote:
    """This machine as a host: each command in a fresh `sh -c` (as the test's own user)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[str] = []

    def _exec(self, command: str, timeout: float | None, check: bool) -> CommandResult:
        self.calls.append(command)
        started = time.time()
        try:
            proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise HostUnreachable(self.name, f"timed out after {timeout}s") from exc
        res = CommandResult(self.name, command, proc.returncode, proc.stdout, proc.stderr, started, time.time())
        if check and res.exited != 0:
            raise RemoteCommandError(self.name, command, res)
        return res

    def run(self, command: str, *, sudo: bool = False, timeout: float | None = 60.0,
            check: bool = True) -> CommandResult:
        return self._exec(command, timeout, check)

    def shell(self, command: str, *, timeout: float | None = 30.0, check: bool = True) -> CommandResult:
        return self._exec(command, timeout, check)

    def stream(self, command: str, *, stop: Callable[[], bool], sudo: bool = False) -> Iterator[str]:
        proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if stop():
                    break
                yield line.rstrip("\n")
        finally:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        pass
