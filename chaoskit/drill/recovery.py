"""The wait after the heal: the load keeps running until the cluster has recovered as the playbook
defines it, at most `recovery.within` after the heal. First the cluster steady (one writer, every
member answering) held for `STEADY_HOLD_S`; then throughput back to `tps_fraction` of the baseline
for `hold` (the stretch the analysis finds as t_recovered). Without the second wait a drill whose
`duration` ends soon after the heal reports t_recovered null for a recovery it stopped watching."""

from __future__ import annotations

from collections.abc import Callable

from chaoskit.analysis.failover import baseline_tps, recovered_at
from chaoskit.ha.registry import is_multi_writer
from chaoskit.inventory.models import Cluster
from chaoskit.playbook.models import Playbook
from chaoskit.playbook.record import DrillRecord
from chaoskit.recorder import Recorder
from chaoskit.timesource import Clock, Held
from chaoskit.topology.probe import first_writer
from chaoskit.topology.roles import steady

STEADY_HOLD_S = 1.0  # the recovery wait's "steady": held this long (a campaign between runs holds 3 s)


def wait_recovery(record: DrillRecord, pb: Playbook, cluster: Cluster, roles: Callable[[], dict[str, str]],
                  recorder: Recorder, clock: Clock) -> None:
    """Wait for the cluster steady (`roles()` is the probe's current view), then for throughput;
    each outcome is an event of the record (`cluster_steady` stamped when it became steady,
    `cluster_not_steady` with the roles last seen, `throughput_recovered` / `_not_recovered`)."""
    multi_writer = is_multi_writer(cluster)
    deadline = clock.now() + pb.recovery.within
    held = Held(STEADY_HOLD_S)
    while clock.now() < deadline:
        now_roles = roles()
        if multi_writer:
            now_roles = first_writer(now_roles, [m.host for m in cluster.members])
        if held.look(steady(now_roles, len(cluster.members)), clock.now()):
            assert held.since is not None  # look() holds only with a start
            record.event("cluster_steady", held.since, roles=now_roles)
            wait_throughput(record, pb, recorder, clock, deadline)
            return
        clock.sleep(0.2)
    record.event("cluster_not_steady", clock.now(), roles=roles())


def wait_throughput(record: DrillRecord, pb: Playbook, recorder: Recorder, clock: Clock, deadline: float) -> None:
    """Until a `hold` stretch at `tps_fraction` of the baseline has been seen after the last
    disturbance took effect, or the bound. A drill whose throughput came back before the heal does
    not wait at all."""
    base = baseline_tps(recorder, record.t0 + pb.load.warmup, record.t0 + pb.baseline)
    disturbed = [f.t_effect for f in record.faults] + [a["t_sent"] for a in record.actions if a.get("t_sent")]
    if not base or not disturbed:
        return
    since = max(disturbed)
    while True:
        t = recovered_at(recorder, since, base, pb.recovery.tps_fraction, pb.recovery.hold)
        if t is not None:
            record.event("throughput_recovered", t, baseline_tps=round(base, 1))
            return
        if clock.now() >= deadline:
            record.event("throughput_not_recovered", clock.now(), baseline_tps=round(base, 1),
                         tps_fraction=pb.recovery.tps_fraction, hold_s=pb.recovery.hold)
            return
        clock.sleep(min(0.5, deadline - clock.now()))  # the last look is at the bound itself
