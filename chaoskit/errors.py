"""One exception tree, so the CLI can map every failure to an exit code in one place."""

from __future__ import annotations

from typing import Any


class ChaoskitError(Exception):
    """Base of every error chaoskit raises on purpose."""

    exit_code = 1


class InputError(ChaoskitError):
    """Bad input (inventory, playbook, CLI flag). Raised before any host is touched."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.detail = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ""
        if self.source:
            where = self.source + (f":{self.line}" if self.line else "") + ": "
        what = f"{self.field}: " if self.field else ""
        return f"{where}{what}{self.detail}"


class RemoteCommandError(ChaoskitError):
    """A command on a host exited non-zero (the result is attached, like invoke's UnexpectedExit)."""

    def __init__(self, host: str, command: str, result: Any) -> None:
        self.host = host
        self.command = command
        self.result = result
        stderr = (getattr(result, "stderr", "") or "").strip().splitlines()
        tail = stderr[-1] if stderr else ""
        super().__init__(f"{host}: `{command}` exited {getattr(result, 'exited', '?')}: {tail}")


class HostUnreachable(ChaoskitError):
    """SSH to a host failed (connect, auth or host key)."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(f"{host}: unreachable: {reason}")


class LabError(ChaoskitError):
    """The local lab could not be built, inspected or torn down."""


class PreflightError(ChaoskitError):
    """A check before the run failed; nothing was injected."""
