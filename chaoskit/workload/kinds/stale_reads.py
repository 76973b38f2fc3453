"""Stale-reads: writers set registers through the writer's route while readers read them through a
read route (a replica endpoint, a proxy's read port, a libpq DSN with
`target_session_attrs=prefer-standby`), and every read is judged against the writes that were
acknowledged before it began.

Each writing client owns one register (a row keyed by its worker id) and sets it to a number that
only grows (microseconds since the epoch, counted up per process: a restarted client never goes
back). A reading client reads every register in one statement. A group whose route is a read
route (`read_route: true` in the inventory) reads; every other group writes. Every op is recorded
with what it set or read (`("set", register, value)`, `("get", register, value)`), on the control
clock.

For each read that answered, invoked at `t` (control clock):

- **staleness in writes**: the acknowledged writes (acknowledged before `t`) it did not see, over
  every register; **in seconds**: how long before `t` the oldest of them had been acknowledged
  (0 when it missed none). Neither is ever negative.
- **monotonic-read violation**: it saw a register older than an earlier read of the same client
  had seen (the client went back in time, e.g. its route moved to a replica further behind).
- **read-your-writes violation**: it missed a write acknowledged before `t` to the register of
  its client's own writer. An application that splits reads from writes has sessions that write
  through the primary route and read through the read route; chaoskit plays each with two clients:
  the readers in worker order are paired, round-robin, with the writers in worker order.
- **phantom read**: it saw a value nobody wrote (no write of that value, or one that failed, or
  one invoked only after the read answered). Never legal, on any route.

Reads are split into before the fault, during it (from the fault until the clients' recovery) and
after. A write also inserts its (register, value) into a log table in the same transaction; after
recovery the log is read through the writer: an acknowledged write missing from it is lost, a row
no write made (or a failed one) is a phantom. Staleness, monotonic-read and read-your-writes
violations are figures of the read route (no replica route promises otherwise); phantom reads,
lost and phantom writes fail the check.
"""

from __future__ import annotations

import bisect
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaoskit.recorder import FAIL, OK
from chaoskit.stats import nearest_rank
from chaoskit.workload import stamp
from chaoskit.workload.checks import Check, Judging
from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, Steps, Stmt, Workload

PHASES = ("before", "during", "after")
SHOWN = 10  # examples of each violation written out (all are counted)


@dataclass(frozen=True)
class Write:
    value: int
    t_invoke: float
    t_done: float
    outcome: str


@dataclass
class Registers:
    """Every writer's writes. A writer makes one at a time and its values only grow, so its
    acknowledged writes in the order they were acknowledged have growing values too."""

    writes: dict[int, list[Write]] = field(default_factory=dict)
    acked: dict[int, list[Write]] = field(default_factory=dict)  # acknowledged only, by t_done
    acked_done: dict[int, list[float]] = field(default_factory=dict)
    acked_values: dict[int, list[int]] = field(default_factory=dict)
    kept_values: dict[int, list[int]] = field(default_factory=dict)  # every write that did not fail, by value
    by_value: dict[tuple[int, int], Write] = field(default_factory=dict)

    @classmethod
    def of(cls, writes: Iterable[tuple[int, Write]]) -> Registers:
        r = cls()
        for w, x in writes:
            r.writes.setdefault(w, []).append(x)
            r.by_value[(w, x.value)] = x
        for w, xs in r.writes.items():
            ok = sorted((x for x in xs if x.outcome == OK), key=lambda x: x.t_done)
            r.acked[w], r.acked_done[w], r.acked_values[w] = ok, [x.t_done for x in ok], [x.value for x in ok]
            r.kept_values[w] = sorted(x.value for x in xs if x.outcome != FAIL)
        return r

    def missed(self, w: int, seen: int, before: float) -> tuple[int, Write | None, Write | None]:
        """The acknowledged writes to `w` done before `before` whose values are above `seen`: how
        many, the first of them and the last."""
        if w not in self.acked:
            return 0, None, None
        done = bisect.bisect_left(self.acked_done[w], before)
        above = bisect.bisect_right(self.acked_values[w], seen, 0, done)
        if above >= done:
            return 0, None, None
        return done - above, self.acked[w][above], self.acked[w][done - 1]

    def written(self, w: int, value: int, by: float) -> bool:
        """Someone set `value` in `w` in a write invoked before `by` that did not fail."""
        x = self.by_value.get((w, value))
        return x is not None and x.outcome != FAIL and x.t_invoke <= by

    def between(self, w: int, low: int, high: int) -> int:
        """Writes of `w` that did not fail with values in (low, high]."""
        values = self.kept_values.get(w, [])
        return bisect.bisect_right(values, high) - bisect.bisect_right(values, low)


def judge_reads(txns: Iterable[tuple[int, float, float, str, tuple[tuple[Any, ...], ...]]], t_fault: float | None,
                t_recovered: float | None, undelivered: set[int] | None = None,
                workers: set[int] | None = None,
                on_read: Callable[[int, float, int, float], None] | None = None) -> dict[str, Any]:
    """The figures of every read (of `workers`' reads, if given) against every write, as the
    module's docstring defines them. Times in examples are seconds from the fault (else epoch).
    `txns` is read twice (the writes, then each read as it comes: a client's own in its order),
    so a run's reads are never all held at once. `on_read`, if given, is told each judged read:
    client, t_invoke, staleness in writes and in seconds (the staleness plot's)."""
    undelivered = undelivered or set()
    writes: list[tuple[int, Write]] = []
    reader_ids: set[int] = set()
    reading: set[int] = set()  # every client that tried a read
    for worker, t0, t1, outcome, ops in txns:
        sets = [(k, v) for f, k, v in ops if f == "set"]
        for k, v in sets:
            writes.append((k, Write(int(v), t0, t1, outcome)))
        if not sets:
            reading.add(worker)
            if outcome == OK:
                reader_ids.add(worker)
    regs = Registers.of(writes)
    writers = sorted(regs.writes)
    readers = sorted(reader_ids)
    pairs = {r: writers[i % len(writers)] for i, r in enumerate(readers)} if writers else {}
    origin = t_fault or 0.0

    def phase(t: float) -> str:
        if t_fault is None or t < t_fault:
            return "before"
        return "during" if t_recovered is None or t < t_recovered else "after"

    per: dict[str, dict[str, Any]] = {p: {"reads": 0, "stale": 0, "writes": array("q"), "seconds": array("d"),
                                          "monotonic": 0, "ryw": 0, "phantom": 0} for p in PHASES}
    examples: dict[str, list[dict[str, Any]]] = {"phantom": [], "monotonic": [], "ryw": []}
    newest: dict[int, dict[int, int]] = {}  # per reader: the newest value of each register it saw
    failed_reads = 0
    # a group of writers alone has no read to judge: the second pass would find none
    for worker, t_invoke, t_done, outcome, ops in (txns if workers is None or workers & reading else ()):
        if any(f == "set" for f, _, _ in ops):
            continue
        mine = workers is None or worker in workers
        if outcome != OK:
            failed_reads += mine
            continue
        seen_now = {int(k): int(v) for f, k, v in ops if f == "get"}
        high = newest.setdefault(worker, {})
        missed_n, oldest = 0, None
        phantoms: list[dict[str, int]] = []
        back: dict[int, int] = {}
        for w in writers:
            seen = seen_now.get(w, 0)
            if seen and w not in undelivered and not regs.written(w, seen, t_done):
                phantoms.append({"register": w, "value": seen})
            n, first, _ = regs.missed(w, seen, t_invoke)
            missed_n += n
            if first is not None:
                oldest = first.t_done if oldest is None else min(oldest, first.t_done)
            if seen < high.get(w, 0):
                back[w] = regs.between(w, seen, high[w])
        for w, v in seen_now.items():
            if w not in regs.writes and v and w not in undelivered:
                phantoms.append({"register": w, "value": v})  # a register no client of this run writes
            elif not any(ph["register"] == w for ph in phantoms):  # what it saw, a phantom apart
                high[w] = max(high.get(w, 0), v)
        if not mine:
            continue
        at = {"client": worker, "start_s": round(t_invoke - origin, 3), "end_s": round(t_done - origin, 3)}
        p = per[phase(t_invoke)]
        p["reads"] += 1
        behind = round(t_invoke - oldest, 6) if oldest is not None else 0.0
        p["writes"].append(missed_n)
        p["seconds"].append(behind)
        if on_read is not None:
            on_read(worker, t_invoke, missed_n, behind)
        p["stale"] += missed_n > 0
        if phantoms:
            p["phantom"] += 1
            if len(examples["phantom"]) < SHOWN:
                examples["phantom"].append({**at, "saw": phantoms})
        if back:
            p["monotonic"] += 1
            if len(examples["monotonic"]) < SHOWN:
                examples["monotonic"].append({**at, "back_writes": sum(back.values()),
                                              "registers": sorted(back)})
        own = pairs.get(worker)
        n, _, last = regs.missed(own, seen_now.get(own, 0), t_invoke) if own is not None else (0, None, None)
        if own is not None and n and last is not None:
            p["ryw"] += 1
            if len(examples["ryw"]) < SHOWN:
                examples["ryw"].append({**at, "writer": own, "saw": seen_now.get(own, 0), "acknowledged": last.value,
                                        "acknowledged_s": round(last.t_done - origin, 3)})
    phases = {name: _figures(p) for name, p in per.items() if p["reads"] or name == "before"}
    total = _figures({"reads": sum(per[p]["reads"] for p in PHASES), "stale": sum(per[p]["stale"] for p in PHASES),
                      "writes": array("q", (x for p in PHASES for x in per[p]["writes"])),
                      "seconds": array("d", (x for p in PHASES for x in per[p]["seconds"])),
                      **{k: sum(per[p][k] for p in PHASES) for k in ("monotonic", "ryw", "phantom")}})
    return {"reads": total["reads"], "failed_reads": failed_reads, "readers": readers if workers is None
            else [r for r in readers if r in workers], "writers": writers,
            "pairs": {str(r): w for r, w in pairs.items() if workers is None or r in workers},
            **{k: v for k, v in total.items() if k != "reads"}, "phases": phases,
            "examples": {k: v for k, v in examples.items() if v}}


def _figures(p: dict[str, Any]) -> dict[str, Any]:
    def spread(values: Sequence[float]) -> dict[str, Any]:
        ordered = sorted(values)
        if not ordered:
            return {"median": None, "p99": None, "max": None}
        return {"median": nearest_rank(ordered, 50), "p99": nearest_rank(ordered, 99), "max": ordered[-1]}

    return {"reads": p["reads"], "stale_reads": p["stale"], "staleness_writes": spread(p["writes"]),
            "staleness_s": spread(p["seconds"]), "monotonic_read_violations": p["monotonic"],
            "read_your_writes_violations": p["ryw"], "phantom_reads": p["phantom"]}


def lost_writes(txns: Iterable[tuple[int, float, float, str, tuple[tuple[Any, ...], ...]]],
                present: set[tuple[int, int]]) -> dict[str, Any]:
    """Every write as the writer's log holds it after recovery against what the writers were told:
    an acknowledged write whose row is not there is lost; a row no write set, or one that failed,
    is a phantom; a write whose outcome is unknown may be there or not."""
    acknowledged, lost, phantoms = 0, 0, 0
    lost_by: dict[str, int] = {}
    written: dict[tuple[int, int], str] = {}
    for _, _, _, outcome, ops in txns:
        for f, k, v in ops:
            if f == "set":
                written[(int(k), int(v))] = outcome
    for (w, v), outcome in written.items():
        if outcome == OK:
            acknowledged += 1
            if (w, v) not in present:
                lost += 1
                lost_by[str(w)] = lost_by.get(str(w), 0) + 1
    phantom = sorted(x for x in present if written.get(x, FAIL) == FAIL)
    phantoms = len(phantom)
    return {"acknowledged_writes": acknowledged, "lost_acknowledged": lost, "lost_by_register": lost_by,
            "phantom_writes": phantoms, "phantom_sample": [list(x) for x in phantom[:SHOWN]]}


class StaleReadCheck(Check):
    """Reads through read routes judged against the acknowledged writes (see the module)."""

    name = "stale_reads"
    reads = "registers"  # the truth's key: the writers' log, read after recovery
    per_group = True

    @classmethod
    def read(cls, workload: Any, conn: Any, before: Any) -> dict[str, Any]:
        rows = workload.driver.query(conn, f"SELECT w, v FROM {StaleReads.LOG}")
        return {"written": [(int(w), int(v)) for w, v in rows]}

    @classmethod
    def judge(cls, truth: dict[str, Any] | None, j: Judging) -> dict[str, Any]:
        if not truth:
            return cls.unread(j)
        if "written" not in truth:
            return truth
        undelivered = set(j.rec.ledger_undelivered().workers())
        got = judge_reads(j.rec.txns, j.t_fault, j.t_recovered, undelivered)
        final = lost_writes(j.rec.txns, {(w, v) for w, v in truth["written"] if w not in undelivered})
        valid = not got["phantom_reads"] and not final["lost_acknowledged"] and not final["phantom_writes"]
        return {"valid": valid, "text": _sentence(got, final), **final, **got,
                "times": "seconds from the fault" if j.t_fault else "epoch seconds"}

    @classmethod
    def judge_group(cls, truth: dict[str, Any] | None, j: Judging, workers: set[int], max_lost: int | None,
                    nodes: dict[tuple[int, int], str]) -> dict[str, Any] | None:
        got = judge_reads(j.rec.txns, j.t_fault, j.t_recovered, set(j.rec.ledger_undelivered().workers()), workers)
        return got if got["reads"] or got["failed_reads"] else None


def _sentence(got: dict[str, Any], final: dict[str, Any]) -> str:
    s, w = got["staleness_s"], got["staleness_writes"]
    if not got["reads"]:
        return f"no read answered ({got['failed_reads']:,} failed); {final['lost_acknowledged']:,} acknowledged " \
               "writes lost"
    text = (f"{got['reads']:,} reads: {got['stale_reads']:,} stale (at most {w['max']:,} writes, "
            f"{s['max']:.3f} s behind; p99 {s['p99']:.3f} s), {got['monotonic_read_violations']:,} went back in "
            f"time, {got['read_your_writes_violations']:,} missed their client's own acknowledged write, "
            f"{got['phantom_reads']:,} saw a value nobody wrote")
    return text + f"; {final['lost_acknowledged']:,} of {final['acknowledged_writes']:,} acknowledged writes lost"


# each engine's set of a register, creating its row the first time (DM has no upsert but MERGE)
SET_SQL = {
    "postgres": "INSERT INTO {t} AS t (w, v) VALUES (%s, %s) ON CONFLICT (w) DO UPDATE SET v = EXCLUDED.v",
    "mysql": "INSERT INTO {t} (w, v) VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
    "dameng": ("MERGE INTO {t} t USING (SELECT CAST(%s AS INT) AS w, CAST(%s AS BIGINT) AS v FROM DUAL) s "
               "ON (t.w = s.w) WHEN MATCHED THEN UPDATE SET t.v = s.v "
               "WHEN NOT MATCHED THEN INSERT (w, v) VALUES (s.w, s.v)"),
}


class StaleReads(Workload):
    """Writers set their registers through the writer; readers read them all through a read route."""

    name = "stale-reads"
    TABLE = "chaoskit_registers"
    LOG = "chaoskit_register_log"  # every write, in the same transaction: what the loss is counted on
    checks = ("stale_reads",)
    data_checks = (StaleReadCheck,)

    @classmethod
    def route_refusal(cls, read_groups: int, write_groups: int) -> str | None:
        if not read_groups or not write_groups:
            return ("the stale-reads workload needs a group that reads through a read route (a cluster with "
                    "read_route: true as its route) and one that writes through the writer")
        return None

    def setup(self, conn: Any) -> None:
        d = self.driver
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.TABLE} (w INT PRIMARY KEY, v BIGINT NOT NULL)"
                        f"{d.table_suffix}")
        d.execute(conn, f"CREATE TABLE IF NOT EXISTS {self.LOG} (w INT NOT NULL, v BIGINT NOT NULL, PRIMARY KEY (w, v))"
                        f"{d.table_suffix}")
        d.execute(conn, f"DELETE FROM {self.TABLE}")  # a run's registers are its own
        d.execute(conn, f"DELETE FROM {self.LOG}")

    def prepare(self) -> None:
        d = self.driver
        self.reading = bool(getattr(d.cluster, "read_route", False))
        self._set = d.q(SET_SQL[d.family].format(t=self.TABLE))
        self._log = d.q(f"INSERT INTO {self.LOG} (w, v) VALUES (%s, %s)")
        self._get = d.q(f"SELECT w, v FROM {self.TABLE}")
        self._next = int(time.time() * 1_000_000)

    def steps(self, ctx: OpContext) -> Steps:
        ops: list[tuple[Any, ...]] = []
        ctx.txn = ops
        if self.reading:
            ctx.kind = "read"
            rows = yield Stmt(self._get, (), rows=True)
            ops.extend(("get", int(w), int(v)) for w, v in rows)
            return "read"
        ctx.kind = "write"
        # this process's clients share the counter: each takes its value now (the loop runs
        # other clients' statements between this one's)
        self._next = value = max(self._next + 1, int(stamp.now() * 1_000_000))
        ops.append(("set", ctx.worker, value))
        yield BEGIN
        yield Stmt(self._log, (ctx.worker, value))
        yield Stmt(self._set, (ctx.worker, value))
        ctx.committing()
        yield COMMIT
        return "write"
