"""The workloads. Each creates and owns only its own tables (prefixed `chaoskit_`).

A workload describes one operation (one transaction) as a generator of statements (`steps`):
it yields `Stmt`s, BEGIN and COMMIT, and receives each statement's result. Describing rather than
executing lets two executors share every workload: `run` below executes synchronously through the
driver (threaded workers: MySQL, DM), and `chaoskit.workload.pg_loop` drives many PostgreSQL
connections from one thread with non-blocking libpq. Before the statement whose completion is the
commit a workload calls `ctx.committing()`: an exception after that point leaves the outcome
unknown (`info`), before it the transaction definitely did not happen (`fail`).
"""

from __future__ import annotations

import functools
import itertools
import random
import string
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from chaoskit.db.base import Driver
from chaoskit.keyranges import KeyRanges
from chaoskit.plugins import Plugins
from chaoskit.recorder import SEQUENCE, VERSION
from chaoskit.workload.checks import BankTotal, Check, LostUpdates, LostWrites
from chaoskit.workload.sql_script import Drawer, SqlScript
from chaoskit.workload.sql_script import Ledger as LedgerTable


class Stmt(NamedTuple):
    """One statement of an operation, with %s placeholders in the driver's style (a tuple: one is
    built per statement on the load's hot path)."""

    sql: str
    params: tuple = ()
    rows: bool = False  # the result is wanted as rows (else: the affected row count)


BEGIN = Stmt("BEGIN")
COMMIT = Stmt("COMMIT")
Steps = Generator[Stmt, Any, str]


@dataclass
class OpContext:
    worker: int
    rng: random.Random
    run_id: str
    workers: int = 1  # how many workers share the tables (for disjoint key choices)
    seq: int = 0  # ledger: the last sequence number this worker allocated
    phase: str = "pre"  # pre | commit
    key: int | None = None  # what this op wrote, as its workload's `keyed` says (None: nothing to track)
    kind: str | None = None  # write | read, where the workload says it per op (else its `writes` says)

    def committing(self) -> None:
        self.phase = "commit"


@dataclass
class WorkloadParams:
    table_rows: int = 10_000  # update/read/oltp
    accounts: int = 100  # bank
    initial_balance: int = 1_000
    payload_bytes: int = 64  # ledger row size
    range_size: int = 100  # oltp ranges
    point_selects: int = 10  # oltp
    extra: dict[str, Any] = field(default_factory=dict)
    sql: SqlScript | None = None  # the `sql` workload's file, read and checked (chaoskit.workload.sql_script)


# Checks judged from the role probe, whatever the workload (no table of its own is read).
CLUSTER_CHECKS = ("split_brain",)

# What a check reads after the run through the writer: a function of one connection.
TruthReader = Callable[[Any], dict[str, Any]]


class Workload(ABC):
    """A workload owns its tables and the checks of its data: `checks` names those it can judge
    after a run (the playbook validator refuses any other), `truth_readers` reads what each needs
    through the writer, and `member_digest` is what every member must agree on for
    `replica_convergence`. A load source that cannot give a figure declares no check for it."""

    name: ClassVar[str]
    writes: ClassVar[bool] = True
    checks: ClassVar[tuple[str, ...]] = ()  # the checks of its own data it can judge, in the order they are run
    # the objects behind those checks that read its data after the run (`chaoskit.workload.checks`);
    # `replica_convergence` is the analysis's own, through `member_digest`
    data_checks: ClassVar[tuple[type[Check], ...]] = ()
    keyed: ClassVar[str | None] = None  # how an op's `key` reads (recorder.SEQUENCE / VERSION)
    # this run's rows are only ever added, never updated or deleted: a member holding more of them
    # than the one writer holds them for good (the convergence check stops waiting for it)
    rows_only_added: ClassVar[bool] = False

    def __init__(self, driver: Driver, params: WorkloadParams, run_id: str) -> None:
        self.driver = driver
        self.params = params
        self.run_id = run_id

    @classmethod
    def checks_for(cls, params: WorkloadParams) -> tuple[str, ...]:
        """The checks of its own data it can judge with these parameters (a user's SQL file: only
        with a ledger)."""
        return cls.checks

    @abstractmethod
    def setup(self, conn: Any) -> None:
        """Create (if missing) and fill the workload's tables. Idempotent."""

    @abstractmethod
    def prepare(self) -> None:
        """Build statements (in the process that runs the ops)."""

    @abstractmethod
    def steps(self, ctx: OpContext) -> Steps:
        """One operation as statements; returns its kind: write or read."""

    def run(self, conn: Any, ctx: OpContext) -> str:
        """Execute one operation synchronously; a failure inside a transaction rolls it back."""
        d = self.driver
        gen = self.steps(ctx)
        in_tx = False
        result: Any = None
        try:
            while True:
                stmt = gen.send(result)
                if stmt is BEGIN:
                    d.begin(conn)
                    in_tx, result = True, None
                elif stmt is COMMIT:
                    d.commit(conn)
                    in_tx, result = False, None
                elif stmt.rows:
                    result = d.query(conn, stmt.sql, stmt.params)
                else:
                    result = d.execute(conn, stmt.sql, stmt.params)
        except StopIteration as done:
            return str(done.value)
        except BaseException:
            if in_tx:
                d.rollback(conn)
            raise

    @classmethod
    def data_checks_for(cls, params: WorkloadParams, checks: Collection[str]) -> list[type[Check]]:
        """Its data checks among `checks` that it can judge with these parameters."""
        mine = cls.checks_for(params)
        return [c for c in cls.data_checks if c.name in checks and c.name in mine]

    def truth_readers(self, checks: Collection[str], before: Any = None) -> dict[str, TruthReader]:
        """For each of `checks` this workload judges from what the writer holds after the run, the
        read (keyed by the truth it produces). `before` is what `snapshot` read before the load."""
        return {c.reads: functools.partial(c.read, self, before=before)
                for c in self.data_checks_for(self.params, checks)}

    def member_digest(self, conn: Any) -> tuple[int, int]:
        """This run's data on one member, as (rows, checksum): equal on every member once the
        replicas converged. Only workloads that declare `replica_convergence` have one."""
        raise NotImplementedError(f"the {self.name} workload has no per-member digest")

    def _fill(self, conn: Any, table: str, columns: str, rows: Any, batch: int = 1000) -> None:
        d = self.driver
        marks = ", ".join(["%s"] * len(columns.split(",")))
        sql = d.q(f"INSERT INTO {table} ({columns}) VALUES ({marks})")
        chunk: list[tuple] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= batch:
                d.executemany(conn, sql, chunk)
                chunk = []
        if chunk:
            d.executemany(conn, sql, chunk)

    def _count(self, conn: Any, table: str) -> int:
        return int(self.driver.query(conn, f"SELECT COUNT(*) FROM {table}")[0][0])


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
        yield Stmt(self._insert, (self.run_id, ctx.worker, ctx.seq, time.time(), self._payload))
        return "write"

    def present(self, conn: Any) -> KeyRanges:
        return ledger_keys_present(self.driver, conn, self.LEDGER, self.run_id)

    def member_digest(self, conn: Any) -> tuple[int, int]:
        """This run's rows on the member: how many, and the sum of their sequence numbers."""
        return ledger_digest(self.driver, conn, self.LEDGER, self.run_id)


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



class _Keyed(Workload):
    TABLE = "chaoskit_kv"
    _sql: str

    def setup(self, conn: Any) -> None:
        d, p = self.driver, self.params
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id INT PRIMARY KEY, value BIGINT NOT NULL,"
                        f" pad VARCHAR(100)){d.table_suffix}")
        if self._count(conn, self.TABLE) != p.table_rows:
            d.execute(conn, f"DELETE FROM {self.TABLE}")
            pad = "p" * 60
            self._fill(conn, self.TABLE, "id, value, pad", ((i, 0, pad) for i in range(1, p.table_rows + 1)))


class Update(_Keyed):
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


class Read(_Keyed):
    """Point select by random primary key."""

    name = "read"
    writes = False

    def prepare(self) -> None:
        self._sql = self.driver.q(f"SELECT value FROM {self.TABLE} WHERE id = %s")

    def steps(self, ctx: OpContext) -> Steps:
        yield Stmt(self._sql, (ctx.rng.randint(1, self.params.table_rows),), rows=True)
        return "read"


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

    def present(self, conn: Any) -> KeyRanges:
        assert self.script.ledger is not None
        return ledger_keys_present(self.driver, conn, self.script.ledger, self.run_id)

    def member_digest(self, conn: Any) -> tuple[int, int]:
        if self.script.ledger is None:
            raise NotImplementedError("an sql workload without a @ledger has no per-member digest")
        return ledger_digest(self.driver, conn, self.script.ledger, self.run_id)


def ledger_keys_present(driver: Driver, conn: Any, led: LedgerTable, run_id: str) -> KeyRanges:
    """The (worker, sequence) keys of this run's rows in a ledger table (chaoskit's or the user's),
    as each worker's runs of consecutive numbers: the database finds the runs (a number minus its
    dense rank within its worker is the same along a run), so a day of writes comes back as a few
    rows per worker, not one per write."""
    w, s, run = led.worker_column, led.seq_column, led.run_column
    sql = driver.q(f"SELECT w, MIN(s), MAX(s) FROM (SELECT {w} AS w, {s} AS s, {s} - DENSE_RANK() OVER "
                   f"(PARTITION BY {w} ORDER BY {s}) AS g FROM {led.table} WHERE {run} = %s) ledger_runs GROUP BY w, g")
    return KeyRanges.from_runs(driver.query(conn, sql, (run_id,)))


def ledger_digest(driver: Driver, conn: Any, led: LedgerTable, run_id: str) -> tuple[int, int]:
    """This run's rows in a ledger table on one member: how many, and the sum of their sequence numbers."""
    sql = driver.q(f"SELECT COUNT(*), COALESCE(SUM({led.seq_column}), 0) FROM {led.table} WHERE {led.run_column} = %s")
    count, total = driver.query(conn, sql, (run_id,))[0]
    return int(count), int(total)


def _chars(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.digits, k=n))


# every Workload subclass of this module with a name (`chaoskit.plugins`): a new one is its class
WORKLOADS: dict[str, type[Workload]] = Plugins(__name__, Workload, "name", "workload").all()


def default_checks(workload: str, params: WorkloadParams | None = None) -> tuple[str, ...]:
    """The checks a playbook runs when it names none: the workload's own, then the cluster's."""
    own = WORKLOADS[workload].checks_for(params or WorkloadParams()) if workload in WORKLOADS else ()
    first = tuple(c for c in own if c != "replica_convergence")
    return first + CLUSTER_CHECKS + tuple(c for c in own if c == "replica_convergence")


def unsupported_check(workload: str, check: str, params: WorkloadParams | None = None) -> str | None:
    """Why `workload` cannot run `check` (None: it can), in words a playbook author can act on."""
    own = WORKLOADS[workload].checks_for(params or WorkloadParams())
    if check in CLUSTER_CHECKS or check in own:
        return None
    if workload == "sql" and check in WORKLOADS[workload].checks:
        return (f"the {check} check needs a ledger in your SQL file (`-- @ledger TABLE RUN_COLUMN WORKER_COLUMN "
                "SEQUENCE_COLUMN`): without one, no write can be looked up after the run")
    owners = [name for name, cls in WORKLOADS.items() if check in cls.checks]
    if not owners:
        known = sorted({*CLUSTER_CHECKS, *(c for cls in WORKLOADS.values() for c in cls.checks)})
        return f"unknown check {check[:40]!r}; choose from {', '.join(known)}"
    judges = ", ".join(own + CLUSTER_CHECKS)
    named = [n if n != "sql" else "{sql: FILE} with a @ledger" for n in owners]
    return (f"the {check} check needs load.workload: {' or '.join(named)} (the {workload} workload "
            f"judges {judges})")


def make_workload(name: str, driver: Driver, params: WorkloadParams, run_id: str) -> Workload:
    try:
        cls = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None
    return cls(driver, params, run_id)


def data_checks(workload: str, params: WorkloadParams | None, checks: Collection[str]) -> list[type[Check]]:
    """The data checks of `workload` among a playbook's `checks` (none for a workload no load runs)."""
    cls = WORKLOADS.get(workload)
    return cls.data_checks_for(params or WorkloadParams(), checks) if cls is not None else []
