"""OLTP: a sysbench-like transaction (point selects, ranges, updates, delete+insert), and its
read-only and write-only variants."""

from __future__ import annotations

import random
import string
from typing import Any

from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, Steps, Stmt, Workload


class Oltp(Workload):
    """sysbench-like transaction: point selects, ranges, index and non-index updates, delete+insert."""

    name = "oltp"
    TABLE = "chaoskit_sbtest"
    reads_enabled = True
    writes_enabled = True

    def setup(self, conn: Any) -> None:
        d, p = self.driver, self.params
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id INT PRIMARY KEY, k INT NOT NULL,"
                        f" c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL){d.table_suffix}")
        d.create_index(conn, "chaoskit_sbtest_k", self.TABLE, "k")
        if self._count(conn, self.TABLE) != p.table_rows:
            d.execute(conn, f"DELETE FROM {self.TABLE}")
            rng = random.Random(7)
            self._fill(conn, self.TABLE, "id, k, c, pad",
                       ((i, rng.randint(1, p.table_rows), _chars(rng, 119), _chars(rng, 59))
                        for i in range(1, p.table_rows + 1)))

    def prepare(self) -> None:
        q, t = self.driver.q, self.TABLE
        self._point = q(f"SELECT c FROM {t} WHERE id = %s")
        self._simple = q(f"SELECT c FROM {t} WHERE id BETWEEN %s AND %s")
        self._sum = q(f"SELECT SUM(k) FROM {t} WHERE id BETWEEN %s AND %s")
        self._order = q(f"SELECT c FROM {t} WHERE id BETWEEN %s AND %s ORDER BY c")
        self._distinct = q(f"SELECT DISTINCT c FROM {t} WHERE id BETWEEN %s AND %s ORDER BY c")
        self._upd_index = q(f"UPDATE {t} SET k = k + 1 WHERE id = %s")
        self._upd_nonindex = q(f"UPDATE {t} SET c = %s WHERE id = %s")
        self._delete = q(f"DELETE FROM {t} WHERE id = %s")
        self._insert = q(f"INSERT INTO {t} (id, k, c, pad) VALUES (%s, %s, %s, %s)")

    def steps(self, ctx: OpContext) -> Steps:
        p, rng = self.params, ctx.rng
        rid = lambda: rng.randint(1, p.table_rows)  # noqa: E731
        yield BEGIN
        if self.reads_enabled:
            for _ in range(p.point_selects):
                yield Stmt(self._point, (rid(),), rows=True)
            for stmt in (self._simple, self._sum, self._order, self._distinct):
                lo = rng.randint(1, max(1, p.table_rows - p.range_size))
                yield Stmt(stmt, (lo, lo + p.range_size - 1), rows=True)
        if self.writes_enabled:
            # writes touch only this worker's ids, so two transactions never lock the same rows
            yield Stmt(self._upd_index, (self._own_id(ctx),))
            yield Stmt(self._upd_nonindex, (_chars(rng, 119), self._own_id(ctx)))
            victim = self._own_id(ctx)
            yield Stmt(self._delete, (victim,))
            yield Stmt(self._insert, (victim, rid(), _chars(rng, 119), _chars(rng, 59)))
        if self.writes_enabled:
            ctx.committing()
        yield COMMIT
        return "write" if self.writes_enabled else "read"

    def _own_id(self, ctx: OpContext) -> int:
        """An id only this worker deletes and re-inserts (ids ≡ worker mod workers): concurrent
        delete+insert of one id would otherwise collide on the primary key."""
        w = max(1, ctx.workers)
        slots = max(1, self.params.table_rows // w)
        return min(self.params.table_rows, ctx.rng.randrange(slots) * w + (ctx.worker - 1) % w + 1)


class OltpReadOnly(Oltp):
    name = "oltp-ro"
    writes = False
    writes_enabled = False


class OltpWriteOnly(Oltp):
    name = "oltp-wo"
    reads_enabled = False


def _chars(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.digits, k=n))
