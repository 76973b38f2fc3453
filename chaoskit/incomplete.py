"""What a run that could not finish says about why.

A drill, an experiment or an import that fails after its run directory exists still seals it (the
evidence of what it saw is never lost): run.json gets `incomplete`, one line naming where and why
(`"analysis: RuntimeError: ... (chaoskit/analysis/drill.py:120 in analyse)"`), the report says
INCOMPLETE in its headline, the command exits 3 with that line on stderr, and the tracebacks go to
`logs/chaoskit-error.txt` in the run directory, never to the operator's terminal.

`Failures` collects them as the run goes; `guard(stage)` runs one stage of the writing and, when
it raises (a KeyboardInterrupt too), records it and lets the rest go on.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chaoskit.errors import escaped

ERROR_FILE = "logs/chaoskit-error.txt"
_PACKAGE = Path(__file__).resolve().parent


def where(exc: BaseException) -> str | None:
    """The innermost frame of chaoskit's own code the exception passed ("recorder.py:399 in
    totals"), or None when it never did."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            rel = Path(frame.filename).resolve().relative_to(_PACKAGE)
        except ValueError:
            continue
        found = f"chaoskit/{rel.as_posix()}:{frame.lineno} in {frame.name}"
    return found


def one_line(stage: str, exc: BaseException) -> str:
    """`<stage>: <Type>: <message> (<where>)`, on one escaped line."""
    if isinstance(exc, KeyboardInterrupt):
        text = f"{stage}: interrupted (Ctrl-C or SIGTERM)"
    else:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        text = f"{stage}: {type(exc).__name__}" + (f": {message[:300]}" if message else "")
    at = where(exc)
    return escaped(text + (f" ({at})" if at else ""))


@dataclass
class Failures:
    """The stages of one run that failed: their lines (for `incomplete`) and tracebacks."""

    lines: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)

    def add(self, stage: str, exc: BaseException) -> str:
        line = one_line(stage, exc)
        self.lines.append(line)
        self.tracebacks.append(f"== {line}\n" + "".join(traceback.format_exception(exc)))
        return line

    @contextlib.contextmanager
    def guard(self, stage: str) -> Iterator[None]:
        """Run one stage; a failure (or an interrupt) is recorded and the run goes on."""
        try:
            yield
        except (Exception, KeyboardInterrupt) as exc:
            self.add(stage, exc)

    def __bool__(self) -> bool:
        return bool(self.lines)

    def summary(self, before: str | None = None) -> str | None:
        """The `incomplete` line: every failure, the earliest first (None: nothing failed)."""
        parts = [p for p in (before, *self.lines) if p]
        return "; ".join(dict.fromkeys(parts)) or None

    def write(self, run_dir: Path) -> None:
        """The tracebacks into logs/chaoskit-error.txt (appended: a drill's, then its writing's)."""
        if not self.tracebacks:
            return
        path = run_dir / ERROR_FILE
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(path, "a") as fh:
                fh.write("\n".join(self.tracebacks) + "\n")
            path.chmod(0o600)
        self.tracebacks = []
