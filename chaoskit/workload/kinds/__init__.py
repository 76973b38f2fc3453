"""The workloads, a module each (found by `chaoskit.workload.workloads.WORKLOADS`): a class
derived from `Workload` with a `name`, its tables, its statements and the checks of its data."""
