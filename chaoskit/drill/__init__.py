"""The drill: one playbook run against one cluster, told top to bottom in `runner.run_drill` as
nested scopes, each owning its setup and its teardown (`runner.Drill`), so the way out is the way
in read backwards: heal, recovery wait, load stop, probe stop, link and logs, hosts.

- `runner`: the scopes and the function that nests them.
- `steps`: the playbook's steps on their instants (stage, trigger, revert, act).
- `recovery`: the wait after the heal (the cluster steady, throughput back).
- `session`: a drill inside its run directory (created first, run.json on refusal, sealed last).
- `preflight`: what is checked on the hosts and servers before anything changes.
- `dryrun`: what a drill would do, said without touching a host.
- `healing`: the way out shared by drills and experiments (faults reverted, settings restored).
- `experiment`: the experiment runner (sweep, ramp, compare cells).
"""
