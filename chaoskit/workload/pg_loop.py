"""PostgreSQL's wire for the load's event loop (`chaoskit.workload.loop`): libpq's non-blocking
API through psycopg's `pq` layer. Statements with parameters are prepared once per connection
(server-side, text parameters) and executed by name, like pgbench -M prepared.
"""

from __future__ import annotations

from typing import Any

from psycopg import pq

from chaoskit.db.postgres import PostgresDriver
from chaoskit.recorder import Recorder
from chaoskit.workload.loop import ClientDeadline, ConnLoop, Slot, Wire
from chaoskit.workload.workloads import BEGIN, COMMIT, Stmt, Workload

__all__ = ["ClientDeadline", "PgLoop", "PgWire"]

_IDLE_TX = pq.TransactionStatus.IDLE
_OK_STATUSES = frozenset({pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY})


class _PgState:
    __slots__ = ("pg", "prep_name", "prepared", "preparing", "res")

    def __init__(self, pg: Any) -> None:
        self.pg = pg
        self.prepared: dict[str, bytes] = {}
        self.prep_name = b""
        self.preparing = False
        self.res: Any = None


class PgWire(Wire):
    driver: PostgresDriver

    def attach(self, slot: Slot) -> int:
        pg = slot.conn.pgconn
        pg.nonblocking = 1
        slot.wire = _PgState(pg)
        return int(pg.socket)

    def send(self, slot: Slot, stmt: Stmt) -> None:
        st: _PgState = slot.wire
        pg = st.pg
        st.res = None
        if not stmt.params:
            st.preparing = False
            pg.send_query(stmt.sql.encode())
            return
        name = st.prepared.get(stmt.sql)
        if name is None:
            st.prep_name = f"ck{len(st.prepared)}".encode()
            st.preparing = True
            pg.send_prepare(st.prep_name, self.driver.numbered(stmt.sql), None)
        else:
            st.preparing = False
            pg.send_query_prepared(name, self.driver.encode_params(stmt.params))

    def flush(self, slot: Slot) -> bool:
        return bool(slot.wire.pg.flush() == 1)

    def read(self, slot: Slot) -> bool:
        st: _PgState = slot.wire
        pg = st.pg
        pg.consume_input()
        while not pg.is_busy():
            res = pg.get_result()
            if res is None:
                break
            if res.status in _OK_STATUSES:
                st.res = res
            elif slot.error is None:
                try:
                    self.driver.check(pg, res)
                except Exception as exc:
                    slot.error = exc
        else:
            return False  # the rest of the reply is still on its way
        stmt = slot.stmt
        if st.preparing and slot.error is None and stmt is not None:
            st.prepared[stmt.sql] = st.prep_name  # prepared: now run it
            self.send(slot, stmt)
            return False
        res, st.res = st.res, None
        if slot.error is None and stmt is not None and stmt is not BEGIN and stmt is not COMMIT:
            slot.result = self.driver.rows(res) if stmt.rows else self.driver.rowcount(res)
        return True

    def usable(self, slot: Slot) -> bool:
        return bool(slot.wire.pg.status == pq.ConnStatus.OK)

    def in_transaction(self, slot: Slot) -> bool:
        return bool(slot.wire.pg.transaction_status != _IDLE_TX)


class PgLoop(ConnLoop):
    """Many PostgreSQL workers from one thread, like pgbench."""

    def __init__(self, driver: PostgresDriver, workload: Workload, spec: Any, recorder: Recorder,
                 worker_ids: list[int], t_start: float, rate: float | None) -> None:
        super().__init__(PgWire(driver), workload, spec, recorder, worker_ids, t_start, rate)
