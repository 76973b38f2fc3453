"""What an op's error means for its outcome and its connection: one rule for every executor.

`fail` only when the op definitely did not happen; after the commit was sent, or when the client
gave up waiting, the outcome is unknown (`info`). Errors that may leave the session unusable or
pointed at the wrong node drop the connection, so the next op reconnects to the current writer.
"""

from __future__ import annotations

from chaoskit.db.base import Driver, ErrorClass, connect_class
from chaoskit.recorder import FAIL, INFO

# the server answered with an error for the transaction itself: it did not commit (a failure
# while the commit record was written would end the connection instead: connection_lost, unknown)
_DEFINITE = {ErrorClass.connect_refused, ErrorClass.read_only, ErrorClass.constraint, ErrorClass.serialization,
             ErrorClass.resources}
DROP_CONNECTION = {ErrorClass.connection_lost, ErrorClass.timeout, ErrorClass.read_only,
                   ErrorClass.connect_refused, ErrorClass.other}


def outcome_for(exc_class: ErrorClass, phase: str, interrupted: bool) -> str:
    """fail only when the op definitely did not happen."""
    if phase != "commit":
        return FAIL
    if exc_class in _DEFINITE and not interrupted:
        return FAIL
    if exc_class == ErrorClass.timeout and not interrupted:
        return FAIL  # the server cancelled the statement itself
    return INFO


def connect_error_class(driver: Driver, exc: BaseException) -> ErrorClass:
    """A failed connect: a timeout or a standby reached, else refused (the op never started)."""
    return connect_class(driver.classify(exc))


def client_deadline(op_timeout: float) -> float:
    """When the client gives up on an op: just after the server's own statement timeout."""
    return op_timeout + 0.25


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
