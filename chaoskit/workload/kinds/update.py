"""Update: the classic random-row write, each row's value its version (lost updates)."""

from __future__ import annotations

from typing import Any

from chaoskit.recorder import VERSION
from chaoskit.workload.checks import LostUpdates
from chaoskit.workload.workloads import KeyedRows, OpContext, Steps, Stmt


class Update(KeyedRows):
    """UPDATE ... SET value = value + 1 WHERE id = <random>: the classic random-row write. Each
    row's value is its version: read before the load and after recovery, every row must have
    grown by at least its acknowledged increments (fewer: lost updates) and by at most its
    acknowledged plus indeterminate ones (more: phantom updates). This assumes chaoskit is the
    only writer of its table during the drill."""

    name = "update"
    checks = ("rpo",)
    data_checks = (LostUpdates,)
    keyed = VERSION  # an op's key: the row whose version (value) it increments

    def prepare(self) -> None:
        self._sql = self.driver.q(f"UPDATE {self.TABLE} SET value = value + 1 WHERE id = %s")

    def steps(self, ctx: OpContext) -> Steps:
        ctx.key = row = ctx.rng.randint(1, self.params.table_rows)
        ctx.committing()
        yield Stmt(self._sql, (row,))
        return "write"

    def snapshot(self, conn: Any) -> dict[int, int]:
        """Every row's version (value) now."""
        return {int(i): int(v) for i, v in self.driver.query(conn, f"SELECT id, value FROM {self.TABLE}")}
