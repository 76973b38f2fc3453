"""What load agents left behind, read from their directories as the agents wrote them (the
recorder's figures are checked against these)."""

from __future__ import annotations

from pathlib import Path


def agent_pids(directory: Path) -> list[tuple[int, int]]:
    """The agents' (pid, start time), from their pid files."""
    from chaoskit.workload.agent import PID

    return [(int(pid), int(start)) for pid, start in (p.read_text().split()[:2]
                                                      for p in sorted(directory.glob(f"*/{PID}")))]


def pid_alive(agent: tuple[int, int]) -> bool:
    """Still that process, and not a zombie (an orphan's exit waits for its reaper)."""
    from chaoskit.lab.procs import alive

    return alive(*agent)


def spooled(directory: Path) -> tuple[list[str], int]:
    """What the agents themselves spooled: every delivery's kind, and the ledger writes acknowledged."""
    import numpy as np

    from chaoskit.recorder import LEDGER_UNSET
    from chaoskit.workload.agent import SPOOL
    from chaoskit.workload.spool import SpoolReader
    from chaoskit.workload.wire import decode_delivery

    kinds, acked = [], 0
    for spool in sorted(directory.glob(f"*/{SPOOL}")):
        for f in SpoolReader(spool).read():
            kind, _, payload = decode_delivery(f.payload)
            kinds.append(kind)
            for _, _, raw in getattr(payload, "ledger", ()):
                acked += int((np.frombuffer(raw, dtype="<u4") < LEDGER_UNSET).sum())
    return kinds, acked
