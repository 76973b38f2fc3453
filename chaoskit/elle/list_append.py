"""Transactional anomalies in a list-append history, inferred the way Elle infers them (Kingsbury
and Alvaro, "Elle: Inferring Isolation Anomalies from Experimental Observations", VLDB 2020).
Pure: a history in, anomalies out; no database.

The workload's transactions append unique values to keys' lists and read keys' whole lists. Since
every value is appended once, a read names the transaction behind each of its elements, and the
longest read of a key gives the order of the key's versions (every other read must be a prefix of
it). From that order come the dependencies between committed transactions (Adya):

- ww: T1 appended the element just before T2's in a key's order (T2 overwrote T1's version);
- wr: T2 read a key whose last element T1 appended (T2 saw T1's version);
- rw: T1 read a key up to the element just before T2's (T1 missed T2's version: anti-dependency);

plus, when asked, each client's order (`process`: its next transaction began after the last one
answered) and real-time order (`realtime`: T1 was answered before T2 began). A cycle of these is an
anomaly, classified by its edges: G0 (ww only), G1c (ww and wr), G-single (exactly one rw), G2-item
(two or more rw); a cycle that needs a process or real-time edge carries that as a suffix
(`G-single-realtime`). Seen directly in the reads: G1a (an element of an aborted transaction),
G1b (a key's state in the middle of another transaction), lost update (two transactions read the
same version of a key and both appended to it), incompatible order (two reads that are not
prefixes of one another: the key's history forked), duplicate elements, garbage (an element nobody
appended), internal (a transaction's read that does not show its own earlier appends), and lost
append (an acknowledged append missing from a read that began after it was acknowledged).

Indeterminate transactions (no answer) are handled as Elle handles them: they may or may not have
happened. One whose append some read saw did happen (its appends order like a committed one's);
one nobody saw is left out; neither is ever counted as failed. A transaction the database said it
aborted is failed; a read of its element is G1a.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import networkx as nx

Outcome = Literal["ok", "fail", "info"]
EdgeKind = Literal["ww", "wr", "rw", "process", "realtime"]
Order = Literal["process", "realtime"]


@dataclass(frozen=True)
class Append:
    key: int
    value: int


@dataclass(frozen=True)
class Read:
    key: int
    value: tuple[int, ...] | None  # None: the transaction's answer did not say (failed, indeterminate)


MicroOp = Append | Read


@dataclass(frozen=True)
class Txn:
    """One transaction as its client saw it: begun at `start`, answered (or given up on, when
    indeterminate) at `end`, both on the control clock."""

    id: int
    client: int
    start: float
    end: float
    outcome: Outcome
    ops: tuple[MicroOp, ...]


@dataclass(frozen=True)
class Step:
    """One edge of a cycle: `src` before `dst` because of `kind` (on `key`, for ww/wr/rw)."""

    src: int
    dst: int
    kind: EdgeKind
    key: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Anomaly:
    kind: str
    txns: tuple[int, ...]  # the transactions involved, cycle order for a cycle
    explanation: str
    cycle: tuple[Step, ...] = ()
    key: int | None = None


@dataclass(frozen=True)
class Checked:
    anomalies: tuple[Anomaly, ...]
    forbidden: frozenset[str]
    txns: int
    ok: int
    failed: int
    indeterminate: int
    counts: dict[str, int] = field(default_factory=dict)  # anomaly kind -> how many

    @property
    def violations(self) -> tuple[Anomaly, ...]:
        """The anomalies the claimed isolation level forbids (they fail the drill)."""
        return tuple(a for a in self.anomalies if a.kind in self.forbidden)

    @property
    def allowed(self) -> tuple[Anomaly, ...]:
        """Anomalies found that the level allows (said as information)."""
        return tuple(a for a in self.anomalies if a.kind not in self.forbidden)


class HistoryError(ValueError):
    """Not a list-append history this checker can read (the reason names the transaction; `line`:
    where in a file it was read from)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# -- what each isolation level forbids (Adya's proscribed phenomena) --------------------------------
CYCLES = ("G0", "G1c", "G-single", "G2-item")
ALWAYS = frozenset({"incompatible-order", "duplicate-elements", "garbage-read", "internal", "lost-append"})
_G1 = frozenset({"G0", "G1a", "G1b", "G1c"})
_SNAPSHOT = frozenset({"G-single", "lost-update", "non-repeatable-read"})
LEVELS: dict[str, frozenset[str]] = {
    "read-committed": _G1,  # PL-2
    "snapshot-isolation": _G1 | _SNAPSHOT,  # allows G2-item (write skew)
    "repeatable-read": _G1 | _SNAPSHOT | {"G2-item"},  # PL-2.99 (item cycles)
    "serializable": _G1 | _SNAPSHOT | {"G2-item"},  # PL-3 (on items: a list is one item)
}


def forbidden_at(level: str, orders: Iterable[Order] = ()) -> frozenset[str]:
    """The anomaly kinds `level` forbids; a cycle that needs a client's order or real time is
    forbidden when its plain kind is and that order was asked for."""
    if level not in LEVELS:
        raise ValueError(f"unknown isolation level {level!r} (one of {', '.join(LEVELS)})")
    base = LEVELS[level]
    out = set(base | ALWAYS)
    for order in orders:
        out |= {f"{c}-{order}" for c in CYCLES if c in base}
    return frozenset(out)


EXPLAIN = {
    "G0": "write cycle: each transaction's append came after another's round the cycle (dirty write)",
    "G1c": "circular information flow: each transaction saw or overwrote another's writes round the cycle",
    "G-single": "read skew: one transaction missed a write that the rest of the cycle already depended on",
    "G2-item": "write skew: two or more transactions each missed another's write round the cycle",
}
_SUFFIX = {"process": " (with each client's own order)", "realtime": " (with real-time order)"}
_PREFER: tuple[EdgeKind, ...] = ("ww", "wr", "process", "realtime", "rw")
SEARCH_EDGES = 200  # edges that close a cycle tried for the shortest one, per class and component


def cycle_text(cycle: Sequence[Step]) -> str:
    """`T2 -rw(1)-> T1 -wr(1)-> T2`: each edge's kind, and its key for ww, wr and rw."""
    if not cycle:
        return ""
    hops = [f"-{s.kind}({s.key})->" if s.key is not None else f"-{s.kind}->" for s in cycle]
    return " ".join(f"T{s.src} {h}" for s, h in zip(cycle, hops, strict=True)) + f" T{cycle[0].src}"


# -- the checker ---------------------------------------------------------------------------------
def check(history: Sequence[Txn], forbidden: frozenset[str], orders: Iterable[Order] = ()) -> Checked:
    """Every anomaly in `history`; `forbidden` (see `forbidden_at`) says which fail the drill."""
    return _Checker(history, frozenset(orders)).run(forbidden)


class _Checker:
    def __init__(self, history: Sequence[Txn], orders: frozenset[Order]) -> None:
        self.txns = {t.id: t for t in history}
        if len(self.txns) != len(history):
            raise HistoryError("two transactions share an id")
        self.orders = orders
        self.found: list[Anomaly] = []
        self.writer: dict[tuple[int, int], int] = {}  # (key, value) -> the transaction that appended it
        self.appends: dict[tuple[int, int], list[int]] = {}  # (txn, key) -> its values, in order
        for t in history:
            for op in t.ops:
                if isinstance(op, Append):
                    other = self.writer.setdefault((op.key, op.value), t.id)
                    if other != t.id or op.value in self.appends.get((t.id, op.key), []):
                        raise HistoryError(f"value {op.value} appended to key {op.key} twice (transactions "
                                           f"{other} and {t.id}): list-append needs unique values")
                    self.appends.setdefault((t.id, op.key), []).append(op.value)
                elif t.outcome == "ok" and op.value is None:
                    raise HistoryError(f"transaction {t.id} is ok but its read of key {op.key} has no value")

    def _say(self, kind: str, txns: Iterable[int], explanation: str, key: int | None = None,
             cycle: tuple[Step, ...] = ()) -> None:
        self.found.append(Anomaly(kind, tuple(txns), explanation, cycle, key))

    def run(self, forbidden: frozenset[str]) -> Checked:
        reads = self._reads()
        orders = self._version_orders()
        self._lost_appends(orders)
        self._lost_updates(reads, orders)
        graph = self._graph(reads, orders)
        self._cycles(graph)
        counts: dict[str, int] = {}
        for a in self.found:
            counts[a.kind] = counts.get(a.kind, 0) + 1
        outcomes = [t.outcome for t in self.txns.values()]
        return Checked(tuple(self.found), forbidden, len(outcomes), outcomes.count("ok"), outcomes.count("fail"),
                       outcomes.count("info"), counts)

    # -- reads, checked one by one --------------------------------------------------------------
    def _reads(self) -> dict[int, dict[int, tuple[int, ...]]]:
        """Each ok transaction's external read per key (its first read of the key before it
        appended to it), every ok read checked for duplicates, garbage, aborted and intermediate
        elements, and against the transaction's own earlier reads and appends of the key: its own
        appends must show, at the end and in order (else `internal`, at any level); what others
        appended may show up between two of its reads only where the level lets a transaction see
        newer commits (`non-repeatable-read`: read committed, and InnoDB's repeatable read once the
        transaction wrote the row)."""
        external: dict[int, dict[int, tuple[int, ...]]] = {}
        for t in self.txns.values():
            if t.outcome != "ok":
                continue
            last: dict[int, tuple[int, ...]] = {}  # key -> its last read of it
            mine: dict[int, list[int]] = {}  # key -> its appends since that read (or since it began)
            for op in t.ops:
                if isinstance(op, Append):
                    mine.setdefault(op.key, []).append(op.value)
                    continue
                value = op.value
                assert value is not None
                self._one_read(t, op.key, value)
                since = mine.get(op.key, [])
                if op.key not in last and not since:
                    external.setdefault(t.id, {})[op.key] = value
                body = value[:len(value) - len(since)]
                if since and tuple(value[len(value) - len(since):]) != tuple(since):
                    self._say("internal", [t.id], f"T{t.id} read key {op.key} as {list(value)} after appending "
                              f"{since} to it: its own appends do not show at the end, in order", op.key)
                elif op.key in last and body != last[op.key]:
                    before = last[op.key]
                    kind = "non-repeatable-read" if body[:len(before)] == before else "internal"
                    self._say(kind, [t.id], f"T{t.id} read key {op.key} as {list(before)} and later, in the same "
                              f"transaction, as {list(body)}" + (" (without its own appends since)" if since else "")
                              + (": others' appends showed up between its reads" if kind != "internal" else
                                 ": what it had read went missing"), op.key)
                last[op.key] = value
                mine[op.key] = []
        return external

    def _one_read(self, t: Txn, key: int, value: tuple[int, ...]) -> None:
        if len(set(value)) != len(value):
            dup = next(v for i, v in enumerate(value) if v in value[:i])
            self._say("duplicate-elements", [t.id], f"T{t.id} read key {key} with element {dup} twice: an append "
                      "was applied more than once", key)
        for v in value:
            w = self.writer.get((key, v))
            if w is None:
                self._say("garbage-read", [t.id], f"T{t.id} read element {v} of key {key}, which no transaction "
                          "appended", key)
            elif w != t.id and self.txns[w].outcome == "fail":
                self._say("G1a", [w, t.id], f"T{t.id} read element {v} of key {key} that T{w} appended, but T{w} "
                          "aborted (aborted read)", key)
        if value:
            w = self.writer.get((key, value[-1]))
            mine = self.appends.get((w, key), []) if w is not None else []
            if w is not None and w != t.id and mine and mine[-1] != value[-1]:
                self._say("G1b", [w, t.id], f"T{t.id} read key {key} ending at {value[-1]}, a state in the middle "
                          f"of T{w}, which appended {mine[-1]} to it afterwards (intermediate read)", key)

    # -- version orders ------------------------------------------------------------------------
    def _version_orders(self) -> dict[int, tuple[int, ...]]:
        """Per key, the longest ok read (every read must be a prefix of it); a key whose reads fork
        is said once and its reads make no edges."""
        by_key: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        for t in self.txns.values():
            if t.outcome != "ok":
                continue
            for op in t.ops:
                if isinstance(op, Read) and op.value is not None:
                    by_key.setdefault(op.key, []).append((t.id, op.value))
        orders: dict[int, tuple[int, ...]] = {}
        self.forked: set[int] = set()
        for key, seen in sorted(by_key.items()):
            longest_by, longest = max(seen, key=lambda s: len(s[1]))
            bad = next(((tid, v) for tid, v in seen if longest[:len(v)] != v), None)
            if bad is not None:
                self.forked.add(key)
                self._say("incompatible-order", sorted({bad[0], longest_by}),
                          f"T{bad[0]} read key {key} as {list(bad[1])} and T{longest_by} as {list(longest)}: neither "
                          "is a prefix of the other, so the key's history forked (for instance, writes lost and "
                          "others applied in a failover)", key)
            if len(set(longest)) == len(longest):
                orders[key] = longest
        return orders

    def _lost_appends(self, orders: dict[int, tuple[int, ...]]) -> None:
        """An acknowledged append missing from a read of its key that began after it was answered."""
        last_read: dict[int, tuple[float, int, tuple[int, ...]]] = {}
        for t in self.txns.values():
            if t.outcome != "ok":
                continue
            for op in t.ops:
                if isinstance(op, Read) and op.value is not None and op.key not in self.forked and (
                        op.key not in last_read or t.start >= last_read[op.key][0]):  # a later read of one txn too
                    last_read[op.key] = (t.start, t.id, op.value)
        for (key, value), w in sorted(self.writer.items()):
            t = self.txns[w]
            if t.outcome != "ok" or key not in last_read:
                continue
            began, reader, seen = last_read[key]
            if began > t.end and value not in seen:
                self._say("lost-append", [w, reader], f"T{w}'s append of {value} to key {key} was acknowledged, "
                          f"but T{reader}, begun {began - t.end:.3f} s after that, read the key without it", key)

    def _lost_updates(self, external: dict[int, dict[int, tuple[int, ...]]], orders: dict[int, tuple[int, ...]]
                      ) -> None:
        """Two ok transactions that read the same version of a key and both appended to it."""
        groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        for tid, reads in sorted(external.items()):
            for key, value in reads.items():
                if key in orders and (tid, key) in self.appends:
                    groups.setdefault((key, value), []).append(tid)
        for (key, value), tids in groups.items():
            if len(tids) > 1:
                self._say("lost-update", tids, f"{', '.join(f'T{t}' for t in tids)} all read key {key} as "
                          f"{list(value)} and appended to it: each one's read missed another's append", key)

    # -- the dependency graph ------------------------------------------------------------------
    def _node(self, tid: int | None) -> bool:
        """Committed, or indeterminate with an append someone read (it happened)."""
        return tid is not None and (self.txns[tid].outcome == "ok" or tid in self.seen_info)

    def _graph(self, external: dict[int, dict[int, tuple[int, ...]]], orders: dict[int, tuple[int, ...]]
               ) -> nx.DiGraph:
        self.seen_info = self._seen_info(orders)
        g: nx.DiGraph = nx.DiGraph()
        g.add_nodes_from(t for t in self.txns if self._node(t))

        def edge(a: int, b: int, kind: EdgeKind, key: int | None, why: str) -> None:
            if a == b:
                return
            kinds = g.get_edge_data(a, b, default=None)
            if kinds is None:
                g.add_edge(a, b, kinds={})
                kinds = g.get_edge_data(a, b)
            kinds["kinds"].setdefault(kind, Step(a, b, kind, key, why))

        for key, order in orders.items():
            if key in self.forked:
                continue
            for v1, v2 in itertools.pairwise(order):
                a, b = self.writer.get((key, v1)), self.writer.get((key, v2))
                if self._node(a) and self._node(b):
                    assert a is not None and b is not None
                    edge(a, b, "ww", key, f"T{a} appended {v1} to key {key}, T{b} appended {v2} right after")
        for tid, reads in external.items():
            for key, seen in reads.items():
                versions = orders.get(key)
                if versions is None or key in self.forked:
                    continue
                if seen:
                    w = self.writer.get((key, seen[-1]))
                    if self._node(w):
                        assert w is not None
                        edge(w, tid, "wr", key, f"T{tid} read key {key} ending at {seen[-1]}, which T{w} appended")
                if len(seen) < len(versions):
                    w = self.writer.get((key, versions[len(seen)]))
                    if self._node(w):
                        assert w is not None
                        edge(tid, w, "rw", key, f"T{tid} read key {key} as {list(seen)}, without "
                                               f"{versions[len(seen)]}, which T{w} appended next")
        if "process" in self.orders:
            by_client: dict[int, list[Txn]] = {}
            for t in self.txns.values():
                if self._node(t.id):
                    by_client.setdefault(t.client, []).append(t)
            for seq in by_client.values():
                seq.sort(key=lambda t: t.start)
                for before, after in itertools.pairwise(seq):
                    if before.outcome == "ok" and before.end <= after.start:  # after no answer it went on blind
                        edge(before.id, after.id, "process", None,
                             f"client {before.client} began T{after.id} after T{before.id} answered")
        if "realtime" in self.orders:
            self._realtime(edge)
        return g

    def _seen_info(self, orders: dict[int, tuple[int, ...]]) -> set[int]:
        out = set()
        for key, order in orders.items():
            for v in order:
                w = self.writer.get((key, v))
                if w is not None and self.txns[w].outcome == "info":
                    out.add(w)
        return out

    def _realtime(self, edge: Callable[[int, int, EdgeKind, int | None, str], None]) -> None:
        """T1 -> T2 when T1 was answered before T2 began, kept to the frontier (Elle's way): a
        transaction answered before another answered one began is reached through that one."""
        events: list[tuple[float, int, int]] = []  # (time, 0 begin / 1 answered, txn)
        for t in self.txns.values():
            if not self._node(t.id):
                continue
            events.append((t.start, 0, t.id))
            if t.outcome == "ok":
                events.append((t.end, 1, t.id))
        frontier: list[int] = []
        for _, what, tid in sorted(events):
            if what == 0:
                for u in frontier:
                    edge(u, tid, "realtime", None, f"T{u} was answered before T{tid} began")
            else:
                begun = self.txns[tid].start
                frontier = [u for u in frontier if not self.txns[u].end < begun] + [tid]

    # -- cycles --------------------------------------------------------------------------------
    def _cycles(self, g: nx.DiGraph) -> None:
        for scc in nx.strongly_connected_components(g):
            if len(scc) < 2:
                continue
            sub = g.subgraph(scc)
            found = self._classify(sub, frozenset())
            if found is None and self.orders:
                found = self._classify(sub, frozenset(self.orders))
            if found is not None:
                name, cycle = found
                suffix = next((o for o in ("realtime", "process") if any(s.kind == o for s in cycle)), None)
                kind = f"{name}-{suffix}" if suffix else name
                self._say(kind, [s.src for s in cycle], EXPLAIN[name] + (_SUFFIX[suffix] if suffix else ""),
                          cycle=cycle)

    def _classify(self, g: nx.DiGraph, extra: frozenset[str]) -> tuple[str, tuple[Step, ...]] | None:
        """The weakest class of cycle in `g` (G0, G1c, G-single, G2-item) using ww, wr, rw and
        the `extra` order edges; a cycle found with `extra` must use one of them."""
        for name, plain, rw in (("G0", {"ww"}, 0), ("G1c", {"ww", "wr"}, 0), ("G-single", {"ww", "wr"}, 1),
                                ("G2-item", {"ww", "wr"}, 2)):
            kinds = frozenset(plain) | extra
            cycle = self._shortest_cycle(g, kinds, rw, need=extra)
            if cycle is not None:
                return name, cycle
        return None

    def _shortest_cycle(self, g: nx.DiGraph, kinds: frozenset[str], rw: int, need: frozenset[str]
                        ) -> tuple[Step, ...] | None:
        """The shortest cycle over edges of `kinds` with no rw edge (rw=0), exactly one (1), or
        any number (2: when none with fewer exists, every cycle has two or more); with `need`, one
        of its edges must be of a kind in `need`."""
        def usable(u: int, v: int, allowed: frozenset[str]) -> bool:
            return bool(allowed & g[u][v]["kinds"].keys())

        def path(src: int, dst: int, allowed: frozenset[str]) -> list[int] | None:
            prev: dict[int, int | None] = {src: None}
            todo = deque([src])
            while todo:
                u = todo.popleft()
                for v in g.successors(u):
                    if v in prev or not usable(u, v, allowed):
                        continue
                    prev[v] = u
                    if v == dst:
                        out = [v]
                        while prev[out[-1]] is not None:
                            out.append(prev[out[-1]])
                        return out[::-1]
                    todo.append(v)
            return None

        allowed = kinds | ({"rw"} if rw == 2 else frozenset())
        walk = kinds if rw < 2 else allowed  # the edges a cycle's way back may use
        # only edges that close a cycle are tried (the components of the edges the way back may
        # use, and for one rw edge whether its head reaches its tail there), the first SEARCH_EDGES
        # of them for the shortest
        h = nx.DiGraph((a, b) for a, b, d in g.edges(data=True) if walk & d["kinds"].keys())
        h.add_nodes_from(g)
        sccs = list(nx.strongly_connected_components(h))
        comp = {n: i for i, c in enumerate(sccs) for n in c}
        if rw == 1:
            dag = nx.condensation(h, sccs)  # its nodes numbered as `comp` numbers them
            reach: dict[int, set[int]] = {}

            def closes(u: int, v: int) -> bool:
                if comp[v] not in reach:
                    reach[comp[v]] = nx.descendants(dag, comp[v]) | {comp[v]}
                return comp[u] in reach[comp[v]]
        else:
            def closes(u: int, v: int) -> bool:
                return comp[u] == comp[v]
        best: tuple[Step, ...] | None = None
        tried = 0
        for u, v in sorted(g.edges()):
            first = set(g[u][v]["kinds"])
            if rw == 1:
                if "rw" not in first:
                    continue
                hop = "rw"
            else:
                hop_kinds = first & allowed
                if not hop_kinds:
                    continue
                hop = next(k for k in _PREFER if k in hop_kinds)
            if not closes(u, v):
                continue
            tried += 1
            if tried > SEARCH_EDGES and best is not None:
                break
            back = path(v, u, walk)
            if back is None:
                continue
            steps = [g[u][v]["kinds"][hop]]
            for a, b in itertools.pairwise(back):
                here = g[a][b]["kinds"]
                pick = next(k for k in _PREFER if k in here and k in walk)
                steps.append(here[pick])
            if need and not any(s.kind in need for s in steps):
                continue
            if best is None or len(steps) < len(best):
                best = tuple(steps)
        return best
