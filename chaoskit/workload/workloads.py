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
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from chaoskit.db.base import Driver
from chaoskit.keyranges import KeyRanges
from chaoskit.plugins import Plugins
from chaoskit.workload.checks import Check
from chaoskit.workload.sql_script import Ledger as LedgerTable
from chaoskit.workload.sql_script import SqlScript


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
    # the op's micro-operations as they went, for a workload that records its transactions
    # (list-append): ("append", key, value) and ("r", key, what it read)
    txn: list[tuple[Any, ...]] | None = None

    def recorded_txn(self) -> tuple[tuple[Any, ...], ...] | None:
        return tuple(self.txn) if self.txn is not None else None

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
    isolation: str | None = None  # list-append: the level its transactions run at (and are judged at)


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

    @classmethod
    def engine_refusal(cls, engine: str, params: WorkloadParams) -> str | None:
        """Why this workload cannot run on `engine` with these parameters (None: it can)."""
        return None

    @classmethod
    def level_refusal(cls, engine: str, params: WorkloadParams) -> str | None:
        """Why `engine` cannot run this workload at the isolation level `params` names (None: it
        can, or the workload takes no level)."""
        return None

    @classmethod
    def route_refusal(cls, read_groups: int, write_groups: int) -> str | None:
        """Why this workload cannot run with `read_groups` client groups on read routes (clusters
        with `read_route: true`) beside `write_groups` on the writer's routes (None: it can). A
        workload that writes cannot run on a read route (its tables are set up through the writer
        either way)."""
        if read_groups and cls.writes:
            return (f"the {cls.name} workload writes, and a read route (read_route: true) only reads: route its "
                    "groups through the writer, or use the stale-reads workload")
        return None

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


class KeyedRows(Workload):
    """A table of `table_rows` numbered rows with a value each (the update and read workloads'):
    created and filled once, shared."""


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


def ledger_keys_present(driver: Driver, conn: Any, led: LedgerTable, run_id: str) -> KeyRanges | None:
    """The (worker, sequence) keys of this run's rows in a ledger table (chaoskit's or the user's),
    as each worker's runs of consecutive numbers: the database finds the runs (a number minus its
    dense rank within its worker is the same along a run), so a day of writes comes back as a few
    rows per worker, not one per write. None: the server has no such table (a restore to before it
    was made, a drill that dropped it), so none of the run's rows."""
    if not driver.table_exists(conn, led.table):
        return None
    w, s, run = led.worker_column, led.seq_column, led.run_column
    sql = driver.q(f"SELECT w, MIN(s), MAX(s) FROM (SELECT {w} AS w, {s} AS s, {s} - DENSE_RANK() OVER "
                   f"(PARTITION BY {w} ORDER BY {s}) AS g FROM {led.table} WHERE {run} = %s) ledger_runs GROUP BY w, g")
    return KeyRanges.from_runs(driver.query(conn, sql, (run_id,)))


def ledger_digest(driver: Driver, conn: Any, led: LedgerTable, run_id: str) -> tuple[int, int]:
    """This run's rows in a ledger table on one member: how many, and the sum of their sequence numbers."""
    sql = driver.q(f"SELECT COUNT(*), COALESCE(SUM({led.seq_column}), 0) FROM {led.table} WHERE {led.run_column} = %s")
    count, total = driver.query(conn, sql, (run_id,))[0]
    return int(count), int(total)


class _Found(Mapping[str, type[Workload]]):
    """The workloads by name, found on first use (`chaoskit.plugins`): every Workload subclass with
    a name in a module of `chaoskit.workload.kinds`, so a new workload is its module alone."""

    def __init__(self) -> None:
        self.plugins: Plugins[type[Workload]] = Plugins("chaoskit.workload.kinds", Workload, "name", "workload")

    def __getitem__(self, name: str) -> type[Workload]:
        return self.plugins.all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.plugins.all())

    def __len__(self) -> int:
        return len(self.plugins.all())


WORKLOADS: Mapping[str, type[Workload]] = _Found()


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
    # the shipped workloads first, then your own file's
    named = [n if n != "sql" else "{sql: FILE} with a @ledger" for n in sorted(owners, key=lambda n: n == "sql")]
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
