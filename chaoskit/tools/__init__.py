"""External load tools (pgbench, sysbench, JMeter): reading what each writes, in its own words.

Each tool has one module here that knows its output format and says what it can and cannot
measure (a per-transaction log gives every op's instants; a per-second report gives rates only).
The readers take text and paths, never run anything: starting a tool is the load runner's work.
"""
