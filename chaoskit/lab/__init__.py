"""The local lab: network namespaces as hosts, an sshd each, etcd + Patroni/PostgreSQL and a
MariaDB GTID pair, driven by chaoskit exactly like a staging cluster (over SSH, via lab.yaml)."""
