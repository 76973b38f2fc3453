"""Transactional histories and the anomalies in them, the way Jepsen's Elle finds them: the
list-append checker (`list_append`) and Jepsen's EDN history format (`edn`). Pure: no database,
no files; the workload that records such histories judges them through here."""
