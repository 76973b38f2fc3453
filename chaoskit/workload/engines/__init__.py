"""The load engines: one module each (`chaoskit.workload.engine` says what each declares)."""
