"""Workloads (what the load does) and the load runner (how many, how fast, on which clock)."""
