"""External load tools (pgbench, sysbench, JMeter): reading what each writes, in its own words.

Each tool has one module here that knows its output format and says what it can and cannot
measure (a per-transaction log gives every op's instants; a per-second report gives rates only):
`MEASURES` is that, once, for every load source a client group can have. The readers take text
and paths, never run anything: starting a tool is its client group's work
(`chaoskit.workload.tool_group`).
"""

from __future__ import annotations

from typing import NamedTuple


class Measures(NamedTuple):
    """What a load source can give: the resolution of its clients' outage edges (0: each op's own
    instants), whether the writes it acknowledged can be looked up afterwards (RPO), and whether
    each op's latency is known; whether chaoskit's client profiles shape its connections."""

    rto_resolution_s: float
    rpo: bool
    latency: bool
    profiles: bool  # whether chaoskit's client profiles (deadline, pool, per-op) shape its connections


MEASURES = {
    "builtin": Measures(0.0, True, True, True),  # chaoskit's own clients: every op, its key, its latency
    "pgbench": Measures(0.0, False, True, True),  # its per-transaction log: every transaction's end and latency
    "sysbench": Measures(1.0, False, False, False),  # its per-second report: rates only
    "jmeter": Measures(0.0, False, True, False),  # its JTL: every sample's start and elapsed time
}
