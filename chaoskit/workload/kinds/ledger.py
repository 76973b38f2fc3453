"""The ledger: append-only inserts keyed (run, worker, seq), the basis of RPO."""

from __future__ import annotations

from typing import Any

from chaoskit.keyranges import KeyRanges
from chaoskit.recorder import SEQUENCE
from chaoskit.workload import stamp
from chaoskit.workload.checks import LostWrites
from chaoskit.workload.sql_script import Ledger as LedgerTable
from chaoskit.workload.workloads import OpContext, Steps, Stmt, Workload, ledger_digest, ledger_keys_present


class Ledger(Workload):
    """Append-only inserts keyed (run, worker, seq): the basis of RPO."""

    name = "ledger"
    TABLE = "chaoskit_ledger"
    LEDGER = LedgerTable(TABLE, "run_id", "worker", "seq")
    checks = ("rpo", "replica_convergence")
    data_checks = (LostWrites,)
    keyed = SEQUENCE  # an op's key: the sequence number of the row it inserts for its worker
    rows_only_added = True

    def setup(self, conn: Any) -> None:
        self.driver.execute(conn, (
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (run_id VARCHAR(32) NOT NULL, worker INT NOT NULL,"
            " seq BIGINT NOT NULL, client_ts DOUBLE PRECISION NOT NULL, payload VARCHAR(4000),"
            f" PRIMARY KEY (run_id, worker, seq)){self.driver.table_suffix}"))

    def prepare(self) -> None:
        self._insert = self.driver.q(
            f"INSERT INTO {self.TABLE} (run_id, worker, seq, client_ts, payload) VALUES (%s, %s, %s, %s, %s)")
        self._payload = "x" * self.params.payload_bytes

    def steps(self, ctx: OpContext) -> Steps:
        ctx.seq += 1
        ctx.key = ctx.seq
        ctx.committing()  # autocommit: the INSERT is the commit
        yield Stmt(self._insert, (self.run_id, ctx.worker, ctx.seq, stamp.now(), self._payload))
        return "write"

    def present(self, conn: Any) -> KeyRanges | None:
        return ledger_keys_present(self.driver, conn, self.LEDGER, self.run_id)

    def member_digest(self, conn: Any) -> tuple[int, int]:
        """This run's rows on the member: how many, and the sum of their sequence numbers."""
        return ledger_digest(self.driver, conn, self.LEDGER, self.run_id)
