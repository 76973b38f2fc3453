"""HA managers: one abstract base (`base.HAManager`), one module per manager, chosen by the
cluster's `ha.kind` (see `registry`)."""
