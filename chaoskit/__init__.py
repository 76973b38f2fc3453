"""chaoskit: failover and latency drills for replicated databases, turned into evidence.

Glossary (the contract between the parts; docs/methodology.md has the full definitions):

- host: a machine reached over SSH. Facts about it (clock offset, netem) are measured.
- cluster: the database nodes under test, how to find their roles, how clients reach the writer.
- inventory: hosts + clusters + credentials by reference (env var or file, never inline).
- playbook: one drill: load, a schedule of faults and actions, probes, checks, SLOs.
- workload: what the load does (ledger, bank, update, read, oltp) through a driver.
- op: one client operation: ``invoke`` then exactly one of ``ok``, ``fail`` (did not happen)
  or ``info`` (outcome unknown).
- fault: something done to a host that must be undone; journaled on the host with a TTL.
- action: something done that is not undone (switchover, restart).
- probe: a periodic observation (roles, lag) on the same clock as ops.
- checker: turns a history into a verdict ``{valid: true|false|unknown}``.
- run: one execution of a playbook; everything it produced lives in one run directory.
"""

__version__ = "0.1.0"
