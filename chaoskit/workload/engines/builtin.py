"""chaoskit's own clients (`tool: builtin`, the default): the workload's ops run by the load
runner's worker processes (`chaoskit.workload.loop` for the engines with a non-blocking wire,
threads for the others), over every database chaoskit has a driver for. Every op is recorded with
its instants, its key and its latency, so these clients alone give RPO, and the client profiles
(deadline, pool, per-op) shape their connections. They have no settings of their own: the load's
`workload` and its parameters are theirs."""

from __future__ import annotations

from chaoskit.workload.engine import BUILTIN, LoadEngine, Measures


class Builtin(LoadEngine):
    name = BUILTIN
    measures = Measures(0.0, True, True, True)  # every op, its key, its latency
