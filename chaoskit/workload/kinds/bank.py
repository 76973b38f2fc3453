"""Bank: transfers between accounts in one transaction; the total never changes."""

from __future__ import annotations

from typing import Any

from chaoskit.workload.checks import BankTotal
from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, Steps, Stmt, Workload


class Bank(Workload):
    """Transfers between accounts in one transaction; the total never changes."""

    name = "bank"
    TABLE = "chaoskit_bank"
    checks = ("bank",)
    data_checks = (BankTotal,)

    def setup(self, conn: Any) -> None:
        d, p = self.driver, self.params
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id INT PRIMARY KEY, balance BIGINT NOT NULL)"
                        f"{d.table_suffix}")
        if self._count(conn, self.TABLE) != p.accounts:
            d.execute(conn, f"DELETE FROM {self.TABLE}")
            self._fill(conn, self.TABLE, "id, balance", ((i, p.initial_balance) for i in range(1, p.accounts + 1)))

    def prepare(self) -> None:
        self._debit = self.driver.q(f"UPDATE {self.TABLE} SET balance = balance - %s WHERE id = %s")
        self._credit = self.driver.q(f"UPDATE {self.TABLE} SET balance = balance + %s WHERE id = %s")

    def steps(self, ctx: OpContext) -> Steps:
        n = self.params.accounts
        src, dst = ctx.rng.sample(range(1, n + 1), 2)
        amount = ctx.rng.randint(1, 10)
        yield BEGIN
        # Lock in id order so concurrent transfers do not deadlock.
        for acct, stmt in sorted([(src, self._debit), (dst, self._credit)]):
            yield Stmt(stmt, (amount, acct))
        ctx.committing()
        yield COMMIT
        return "write"

    def expected_total(self) -> int:
        return self.params.accounts * self.params.initial_balance

    def total(self, conn: Any) -> tuple[int, int]:
        rows = self.driver.query(conn, f"SELECT COUNT(*), SUM(balance) FROM {self.TABLE}")
        return int(rows[0][0]), int(rows[0][1] or 0)
