"""Read: point selects by random primary key."""

from __future__ import annotations

from chaoskit.workload.workloads import KeyedRows, OpContext, Steps, Stmt


class Read(KeyedRows):
    """Point select by random primary key."""

    name = "read"
    writes = False

    def prepare(self) -> None:
        self._sql = self.driver.q(f"SELECT value FROM {self.TABLE} WHERE id = %s")

    def steps(self, ctx: OpContext) -> Steps:
        yield Stmt(self._sql, (ctx.rng.randint(1, self.params.table_rows),), rows=True)
        return "read"
