"""Runs made elsewhere, read into chaoskit's run directory: the same timeline, outage figures and
report as a drill's, from a load tool's own per-sample output and the instants the faults were
made (one module per source format)."""
