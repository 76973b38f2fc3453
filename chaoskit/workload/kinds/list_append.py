"""List-append: transactions of a few micro-operations on a small, rotating key space (append a
unique value to a key's list, read a key's whole list), at the isolation level the playbook
names. Every transaction is recorded with its micro-operations and what its reads returned; after
the run the `anomalies` check reads every list through the writer and judges the whole history
with the Elle-style checker (`chaoskit.elle.list_append`) against the level the engine
promises at that setting.

A list is a text column of comma-separated values, appended in one statement that creates the row
when it is missing (PostgreSQL: `INSERT ... ON CONFLICT DO UPDATE SET v = v || ...`; MySQL and
MariaDB: `INSERT ... ON DUPLICATE KEY UPDATE v = CONCAT(...)`; DM, which has neither: `MERGE INTO
... WHEN MATCHED THEN UPDATE SET v = v || ... WHEN NOT MATCHED THEN INSERT`, in a VARCHAR, since
dmPython hands a TEXT column back as a LOB object; two transactions that create the same key at
once may see one of them refused on the key, a failed transaction like any other). Values are unique for the run:
`n * 4096 + worker`, `n` counting up, per worker process, from its start in microseconds since
the epoch (a process appends far fewer than a million values a second, so a restarted one never
reuses a value; the largest stays below 2^63 until about 2041, a Java long for Elle). Keys
rotate every ROTATE_S seconds (KEYS of them live at a time), so lists stay short and reads cheap.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from chaoskit.elle.list_append import Append, Order, Read, Txn, check, cycle_text, forbidden_at
from chaoskit.workload import stamp
from chaoskit.workload.checks import Check, Judging
from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, Steps, Stmt, Workload, WorkloadParams

KEYS = 16
ROTATE_S = 1.0
MAX_OPS = 4  # micro-operations in a transaction: 1 to this many
WORKER_BITS = 4096  # a value's worker is its remainder by this (workers <= 2048)
LEVELS = ("read committed", "repeatable read", "serializable")
LEVEL_SQL = {level: f"SET TRANSACTION ISOLATION LEVEL {level.upper()}" for level in LEVELS}
SHOWN = 20  # anomalies of each sort written out in full (all are counted)

# what each engine promises at each level, in the checker's terms (`chaoskit.elle.list_append.LEVELS`)
CLAIMS: dict[tuple[str, str], tuple[str, str]] = {
    ("postgres", "read committed"): ("read-committed", "PostgreSQL read committed"),
    # PostgreSQL's repeatable read is snapshot isolation (its manual: write skew can happen)
    ("postgres", "repeatable read"): ("snapshot-isolation", "PostgreSQL repeatable read (snapshot isolation)"),
    ("postgres", "serializable"): ("serializable", "PostgreSQL serializable (SSI)"),
    ("mysql", "read committed"): ("read-committed", "InnoDB read committed"),
    # InnoDB's repeatable read reads a snapshot but writes the latest rows (its manual: consistent
    # nonlocking reads vs. locking reads and DML): read skew and lost updates are not excluded, so
    # it is judged for what it does promise, G0 and G1
    ("mysql", "repeatable read"): ("read-committed", "InnoDB repeatable read (snapshot reads, latest writes)"),
    ("mysql", "serializable"): ("serializable", "InnoDB serializable (reads take shared locks)"),
    ("dameng", "read committed"): ("read-committed", "DM read committed"),
    # no DM manual available here says DM's serializable allows more than its name: judged as named
    ("dameng", "serializable"): ("serializable", "DM serializable"),
}
# a level the engine does not offer, and why (said at validate)
UNOFFERED: dict[tuple[str, str], str] = {
    ("dameng", "repeatable read"): ("DM offers no repeatable read (dmPython's manual: ISO_LEVEL_REPEATABLE_READ is "
                                    "not supported yet): use read committed or serializable"),
}
# each engine's list column and its append, which creates the key's row when missing
LIST_COLUMN = {"postgres": "TEXT", "mysql": "TEXT", "dameng": "VARCHAR(8188)"}
APPEND_SQL = {
    "postgres": ("INSERT INTO {t} AS t (k, v) VALUES (%s, %s) "
                 "ON CONFLICT (k) DO UPDATE SET v = t.v || ',' || EXCLUDED.v"),
    "mysql": "INSERT INTO {t} (k, v) VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = CONCAT(v, ',', VALUES(v))",
    "dameng": ("MERGE INTO {t} t USING (SELECT CAST(%s AS BIGINT) AS k, CAST(%s AS VARCHAR(32)) AS v FROM DUAL) s "
               "ON (t.k = s.k) WHEN MATCHED THEN UPDATE SET t.v = t.v || ',' || s.v "
               "WHEN NOT MATCHED THEN INSERT (k, v) VALUES (s.k, s.v)"),
}
# InnoDB takes the level for the next transaction, before it begins; PostgreSQL and DM as the
# transaction's first statement
LEVEL_BEFORE_BEGIN = {"mysql"}


class Anomalies(Check):
    """Transactional anomalies in the run's list-append history, judged against the level the
    engine promises (see CLAIMS); an anomaly that level allows is said, never failing."""

    name = "anomalies"
    reads = "list_append"

    @classmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        began = stamp.now()
        rows = workload.driver.query(conn, f"SELECT k, v FROM {ListAppend.TABLE}")
        return {"lists": {int(k): _values(v) for k, v in rows}, "t_start": began, "t_end": stamp.now(),
                "level": workload.claim[0], "claim": workload.claim[1]}

    @classmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        if not truth:
            return cls.unread(j)
        if "lists" not in truth:
            return truth
        history = history_of(j.rec, truth)
        orders: tuple[Order, ...] = ("process", "realtime")
        got = check(history, forbidden_at(truth["level"], orders), orders)
        at = {t.id: t for t in history}
        origin = j.t_fault

        def shown(anomalies: tuple[Any, ...]) -> list[dict[str, Any]]:
            out = []
            for a in anomalies[:SHOWN]:
                out.append({"kind": a.kind, "explanation": a.explanation, "cycle": cycle_text(a.cycle),
                            "key": a.key, "transactions": [
                                {"id": t, "client": at[t].client, "outcome": at[t].outcome,
                                 "start_s": round(at[t].start - origin, 3) if origin else round(at[t].start, 3),
                                 "end_s": round(at[t].end - origin, 3) if origin else round(at[t].end, 3)}
                                for t in a.txns if t in at]})
            return out

        first = got.violations[:3] or got.allowed[:3]
        said = "; ".join(f"{a.kind} ({cycle_text(a.cycle) or ' '.join(f'T{t}' for t in a.txns[:4])})" for a in first)
        n = len(got.violations)
        text = (f"{n} {'anomaly' if n == 1 else 'anomalies'} that {truth['claim']} forbids: {said}" if n else
                f"no anomaly {truth['claim']} forbids" + (f"; it allows what was found: {said}" if said else ""))
        text += f" ({got.txns:,} transactions: {got.ok:,} ok, {got.failed:,} failed, {got.indeterminate:,} unknown)"
        return {"valid": not got.violations, "text": text, "claim": truth["claim"], "judged_as": truth["level"],
                "orders": list(orders), "times": "seconds from the fault" if origin else "epoch seconds",
                "transactions": got.txns, "ok": got.ok, "failed": got.failed, "indeterminate": got.indeterminate,
                "anomalies": got.counts, "violations": shown(got.violations), "allowed": shown(got.allowed),
                "violations_total": len(got.violations), "allowed_total": len(got.allowed),
                "history_file": "list-append.edn"}


def _values(text: str | bytes | None) -> tuple[int, ...]:
    """A list as read: an element that is not a number (nobody wrote it) reads as -1."""
    if not text:
        return ()
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return tuple(int(v) if v.isdigit() else -1 for v in text.split(","))


def history_of(rec: Any, truth: dict[str, Any]) -> list[Txn]:
    """The run's transactions (ids in the order they arrived), then the final read of every list
    through the writer; an element read whose transaction never reached the controller (its
    worker's results were lost with its loader) counts as an indeterminate append of that worker."""
    out: list[Txn] = []
    appended: set[tuple[int, int]] = set()
    for i, (worker, t0, t1, outcome, ops) in enumerate(rec.txns, start=1):
        micro = tuple(Append(k, v) if f == "append" else Read(k, v) for f, k, v in ops)
        appended.update((k, v) for f, k, v in ops if f == "append")
        out.append(Txn(i, worker, t0, t1, outcome, micro))
    lists: dict[int, tuple[int, ...]] = {int(k): tuple(v) for k, v in truth["lists"].items()}
    undelivered = set(rec.ledger_undelivered().workers())  # a lost loader's, or a batch after the end
    n = len(out)
    # every element read, gathered only when some worker's results never arrived (else none is theirs)
    seen = {(op.key, x) for t in out for op in t.ops if isinstance(op, Read) and op.value for x in op.value} | \
        {(k, x) for k, vs in lists.items() for x in vs} if undelivered else set()
    for k, v in sorted(seen):
        if (k, v) not in appended and v >= 0 and v % WORKER_BITS in undelivered:
            n += 1
            out.append(Txn(n, v % WORKER_BITS, truth["t_start"], truth["t_start"], "info", (Append(k, v),)))
    out.append(Txn(n + 1, -1, truth["t_start"], truth["t_end"], "ok",
                   tuple(Read(k, vs) for k, vs in sorted(lists.items()))))
    return out


class ListAppend(Workload):
    """Transactions appending to and reading keys' lists, at the playbook's isolation level."""

    name = "list-append"
    TABLE = "chaoskit_list_append"
    checks = ("anomalies",)
    data_checks = (Anomalies,)
    claim: tuple[str, str]
    needs_isolation: ClassVar[bool] = True

    @classmethod
    def engine_refusal(cls, engine: str, params: WorkloadParams) -> str | None:
        if params.isolation is None:
            return f"the list-append workload needs load.isolation: {' | '.join(LEVELS)} (the level it is judged at)"
        done = sorted({e for e, _ in CLAIMS})
        return None if engine in done else f"list-append runs on {', '.join(done)} (not {engine} yet)"

    @classmethod
    def level_refusal(cls, engine: str, params: WorkloadParams) -> str | None:
        level = (engine, params.isolation or "")
        if level in CLAIMS:
            return None
        return UNOFFERED.get(level) or f"isolation {params.isolation!r} is not one of {', '.join(LEVELS)}"

    def __init__(self, driver: Any, params: WorkloadParams, run_id: str) -> None:
        super().__init__(driver, params, run_id)
        refusal = self.engine_refusal(driver.family, params) or self.level_refusal(driver.family, params)
        if refusal:
            raise ValueError(refusal)
        self.claim = CLAIMS[(driver.family, params.isolation or "")]

    def setup(self, conn: Any) -> None:
        d = self.driver
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.TABLE} (k BIGINT PRIMARY KEY, "
                        f"v {LIST_COLUMN[d.family]} NOT NULL){d.table_suffix}")
        d.execute(conn, f"DELETE FROM {self.TABLE}")  # a run's lists are its own

    def prepare(self) -> None:
        d = self.driver
        # the level's words from this module's own table, never the playbook's text
        self._level = Stmt(LEVEL_SQL[self.params.isolation or ""], ())
        self._append = d.q(APPEND_SQL[d.family].format(t=self.TABLE))
        self._read = d.q(f"SELECT v FROM {self.TABLE} WHERE k = %s")
        self._next = int(time.time() * 1_000_000)

    def steps(self, ctx: OpContext) -> Steps:
        rng = ctx.rng
        base = int(stamp.now() / ROTATE_S) * KEYS
        plan = [(rng.random() < 0.5, base + rng.randrange(KEYS)) for _ in range(rng.randint(1, MAX_OPS))]
        writes = any(is_append for is_append, _ in plan)
        ctx.kind = "write" if writes else "read"
        ops: list[tuple[Any, ...]] = []
        ctx.txn = ops
        before = self.driver.family in LEVEL_BEFORE_BEGIN
        if before:
            yield self._level  # InnoDB: for the next transaction, said before it begins
        yield BEGIN
        if not before:
            yield self._level  # PostgreSQL, DM: the transaction's first statement
        for is_append, key in plan:
            if is_append:
                self._next += 1
                value = self._next * WORKER_BITS + ctx.worker
                ops.append(("append", key, value))
                yield Stmt(self._append, (key, str(value)))
            else:
                rows = yield Stmt(self._read, (key,), rows=True)
                ops.append(("r", key, _values(rows[0][0]) if rows else ()))
        ctx.committing()
        yield COMMIT
        return ctx.kind
