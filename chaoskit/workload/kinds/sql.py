"""The user's own SQL file as a workload."""

from __future__ import annotations

import itertools
from typing import Any

from chaoskit.db.base import Driver
from chaoskit.keyranges import KeyRanges
from chaoskit.recorder import SEQUENCE
from chaoskit.workload.checks import LostWrites
from chaoskit.workload.sql_script import Drawer
from chaoskit.workload.workloads import (
    BEGIN,
    COMMIT,
    OpContext,
    Steps,
    Stmt,
    Workload,
    WorkloadParams,
    ledger_digest,
    ledger_keys_present,
)


class UserSql(Workload):
    """The user's own SQL file (`load.workload: {sql: file.sql}`; its format:
    `chaoskit.workload.sql_script`). Its tables are the user's: setup runs the file's `@setup`
    statements as written. Each op is one of its transactions, chosen by weight, with its
    parameters drawn once per op. With a `@ledger`, the ledger inserts are keyed writes: RPO and
    replica convergence are judged on that table's rows of this run, as the ledger workload's."""

    name = "sql"
    checks = ("rpo", "replica_convergence")  # with a @ledger in the file (`checks_for`)
    data_checks = (LostWrites,)
    keyed = SEQUENCE

    def __init__(self, driver: Driver, params: WorkloadParams, run_id: str) -> None:
        super().__init__(driver, params, run_id)
        if params.sql is None:
            raise ValueError("the sql workload needs its file: load.workload: {sql: my.sql}")
        self.script = params.sql
        self.writes = self.script.writes  # type: ignore[misc]  # of this file, not of the class

    @classmethod
    def checks_for(cls, params: WorkloadParams) -> tuple[str, ...]:
        return cls.checks if params.sql is not None and params.sql.ledger is not None else ()

    def setup(self, conn: Any) -> None:
        for st in self.script.setup:
            self.driver.execute(conn, st.formatted())

    def prepare(self) -> None:
        """Each transaction as the statements its executor runs: BEGIN and COMMIT as the driver's
        own (a written START TRANSACTION too), the others in the driver's parameter style."""
        self._ops: list[list[tuple[Stmt, tuple[str, ...]]]] = []
        for tx in self.script.transactions:
            ops: list[tuple[Stmt, tuple[str, ...]]] = []
            for n, st in enumerate(tx.statements):
                if tx.explicit and n == 0:
                    ops.append((BEGIN, ()))
                elif tx.explicit and n == len(tx.statements) - 1:
                    ops.append((COMMIT, ()))
                else:
                    sql = self.driver.q(st.formatted()) if st.params else st.formatted()
                    ops.append((Stmt(sql, (), st.returns_rows), st.params))
            self._ops.append(ops)
        self._weights = list(itertools.accumulate(tx.weight for tx in self.script.transactions))
        self._drawers: dict[int, Drawer] = {}

    def steps(self, ctx: OpContext) -> Steps:
        script = self.script
        i = ctx.rng.choices(range(len(self._ops)), cum_weights=self._weights)[0] if len(self._ops) > 1 else 0
        tx, ops = script.transactions[i], self._ops[i]
        ctx.kind = "write" if tx.writes else "read"
        drawer = self._drawers.get(ctx.worker)
        if drawer is None:
            drawer = self._drawers[ctx.worker] = Drawer(script, ctx.rng)
        values: dict[str, Any] = {"run_id": self.run_id, "worker": ctx.worker}
        for _, names in ops:  # each parameter once per op: two uses see one value
            for name in names:
                if name not in values:
                    values[name] = drawer.value(name)
        if tx.ledger_key is not None:
            ctx.key = int(values[tx.ledger_key])
        for n, (stmt, names) in enumerate(ops):
            if tx.writes and n == len(ops) - 1:  # the COMMIT, or the one statement in autocommit
                ctx.committing()
            yield stmt._replace(params=tuple(values[name] for name in names)) if names else stmt
        return ctx.kind

    def present(self, conn: Any) -> KeyRanges | None:
        assert self.script.ledger is not None
        return ledger_keys_present(self.driver, conn, self.script.ledger, self.run_id)

    def member_digest(self, conn: Any) -> tuple[int, int]:
        if self.script.ledger is None:
            raise NotImplementedError("an sql workload without a @ledger has no per-member digest")
        return ledger_digest(self.driver, conn, self.script.ledger, self.run_id)
