"""Playbooks: one drill (load, timed faults and actions, probes, checks, SLOs) and its runner."""
