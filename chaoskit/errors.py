"""One exception tree, so the CLI can map every failure to an exit code in one place."""

from __future__ import annotations

from typing import Any


def escaped(text: str) -> str:
    """`text` with every character that is not printable shown as an escape (`\\x1b`, `\\n`,
    `\\u0085`): a message that quotes input can then neither drive the operator's terminal
    (an ESC sequence, a C1 CSI), nor become two lines, nor hide text (bidi overrides).
    Printable text, backslashes included, is left as it is, so escaping twice changes nothing."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                       else f"\\U{code:08x}")
    return "".join(out)


class ChaoskitError(Exception):
    """Base of every error chaoskit raises on purpose; its message is always one escaped line."""

    exit_code = 1

    def __init__(self, *args: object) -> None:
        super().__init__(*(escaped(a) if isinstance(a, str) else a for a in args))


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
        return f"{where}{what}{self.detail}"  # escaped as every ChaoskitError message is


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
