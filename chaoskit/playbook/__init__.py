"""Playbooks: what one drill is (load, timed faults and actions, probes, checks, SLOs), how it is
loaded and checked, its schedule and preflight, and the typed records a drill passes on (`record`);
the drill itself runs in `chaoskit.drill`."""
