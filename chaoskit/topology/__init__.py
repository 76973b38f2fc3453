"""Role and lag probes per HA stack (SQL, Patroni REST, MariaDB replication)."""
