"""The MHA lab's repair after every node crashed: all three come back read-only, and the one to
make writable again is the node replicating from no one that the other two replicate from. The
`SHOW SLAVE STATUS` answers are scripted; the expected node is read off them."""

from __future__ import annotations

import pytest

from chaoskit.errors import LabError
from chaoskit.lab.recipes import lab_spec, mha


def _slave_status(master: str | None) -> str:
    if master is None:
        return ""
    return ("*************************** 1. row ***************************\n"
            f"                Slave_IO_State: Waiting for master to send event\n"
            f"                   Master_Host: {master}\n                   Master_Port: 3306\n")


def _script(monkeypatch: pytest.MonkeyPatch, sources: dict[str, str | None]) -> None:
    def sql(host, statement, vertical=False):
        assert statement == "SHOW SLAVE STATUS"
        if sources[host.name] == "down":
            raise LabError(f"MariaDB on {host.name}: can't connect")
        return _slave_status(sources[host.name])
    monkeypatch.setattr(mha.my, "sql", sql)


def test_the_node_the_others_follow_is_the_primary(monkeypatch: pytest.MonkeyPatch) -> None:
    # mha2 was promoted by an earlier failover: mha1 and mha3 follow 10.77.0.62
    _script(monkeypatch, {"mha1": "10.77.0.62", "mha2": None, "mha3": "10.77.0.62"})
    assert mha.restarted_primary(lab_spec()).name == "mha2"


@pytest.mark.parametrize("sources", [
    {"mha1": None, "mha2": None, "mha3": "10.77.0.61"},  # two roots: which one took writes is unknown
    {"mha1": None, "mha2": "10.77.0.61", "mha3": "10.77.0.62"},  # mha3 follows a replica
    {"mha1": "10.77.0.62", "mha2": "10.77.0.61", "mha3": "10.77.0.61"},  # a cycle, no root
    {"mha1": None, "mha2": "10.77.0.61", "mha3": "down"},  # one node cannot be asked
])
def test_no_primary_unless_the_nodes_agree(monkeypatch: pytest.MonkeyPatch, sources: dict[str, str | None]) -> None:
    _script(monkeypatch, sources)
    assert mha.restarted_primary(lab_spec()) is None
