"""A list-append history in the format Jepsen and Elle read (EDN, one operation map per line), and
back. A user with Elle's command-line checker (elle-cli) can check a run's transactions
independently of chaoskit:

    java -jar elle-cli-0.1.10-standalone.jar --model list-append \\
        --consistency-models serializable RUN_DIR/list-append.edn

Each transaction is two operations: its invocation (`:type :invoke`, reads `nil`) at its start and
its completion (`:ok` with the values read, `:fail`, or `:info` when its outcome is unknown) at its
end; `:time` is nanoseconds from the history's first start. `:process` is the client, except that
after an `:info` a client continues as a new process (Jepsen's convention: a process whose
operation is indeterminate never performs another). Two keys Elle ignores carry what chaoskit
adds: `:txn` (the transaction's id) and `:client`.

`read_edn` reads such a history back (and Jepsen's own list-append histories: without `:txn`, a
transaction's id is its invocation's `:index`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from chaoskit.elle.list_append import Append, HistoryError, MicroOp, Read, Txn


class Keyword(str):
    """An EDN keyword (`:ok`), its name without the colon."""


# -- writing -------------------------------------------------------------------------------------
def _ops(ops: Iterable[MicroOp], reads: bool) -> str:
    out = []
    for op in ops:
        if isinstance(op, Append):
            out.append(f"[:append {op.key} {op.value}]")
        else:
            seen = "nil" if not reads or op.value is None else "[" + " ".join(map(str, op.value)) + "]"
            out.append(f"[:r {op.key} {seen}]")
    return "[" + " ".join(out) + "]"


def to_edn(history: Sequence[Txn]) -> str:
    """The history as Jepsen operations, one per line, in time order."""
    if not history:
        return ""
    base = min(t.start for t in history)
    # a completion at least a nanosecond after its invocation; at one instant completions go first
    # (a client's next transaction may begin at the instant its last one was answered)
    ns = {}
    for t in history:
        began = round((t.start - base) * 1e9)
        ns[t.id] = (began, max(began + 1, round((t.end - base) * 1e9)))
    # a client continues as a new process after each indeterminate transaction (and one chaoskit
    # numbers below 0, the final read, is a process of its own)
    process: dict[int, int] = {}
    next_process = max(t.client for t in history) + 1
    events: list[tuple[int, int, Txn]] = []  # (ns, 0 completion / 1 invoke, txn)
    for t in sorted(history, key=lambda t: (t.start, t.id)):
        events.append((ns[t.id][0], 1, t))
        events.append((ns[t.id][1], 0, t))
    lines = []
    for index, (at, what, t) in enumerate(sorted(events, key=lambda e: (e[0], e[1], e[2].id))):
        if what == 1:
            if t.client not in process:
                process[t.client] = t.client if t.client >= 0 else next_process
                next_process += t.client < 0
            proc = process[t.client]
            kind, value = "invoke", _ops(t.ops, reads=False)
        else:
            proc = process[t.client]
            kind, value = t.outcome, _ops(t.ops, reads=t.outcome == "ok")
            if t.outcome == "info":
                process[t.client], next_process = next_process, next_process + 1
        lines.append(f"{{:type :{kind}, :f :txn, :value {value}, :time {at}, :process {proc}, :index {index}, "
                     f":txn {t.id}, :client {t.client}}}")
    return "\n".join(lines) + "\n"


# -- reading -------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""[\s,]+|;[^\n]*|(?P<t>[\[\](){}]|"(?:[^"\\]|\\.)*"|[^\s,\[\](){}"]+)""")


def _tokens(text: str) -> Iterator[tuple[str, int]]:
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise HistoryError(f"not EDN at character {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group("t"):
            yield m.group("t"), m.start()


def _atom(tok: str) -> Any:
    if tok == "nil":
        return None
    if tok in ("true", "false"):
        return tok == "true"
    if tok.startswith(":"):
        return Keyword(tok[1:])
    if tok.startswith('"'):
        return re.sub(r"\\(.)", r"\1", tok[1:-1])
    if re.fullmatch(r"[+-]?\d+N?", tok):
        return int(tok.rstrip("N"))
    try:
        return float(tok.rstrip("M"))
    except ValueError:
        return tok  # a symbol


_CLOSING = {"[": "]", "(": ")", "{": "}"}


def _form(tok: str, tokens: Iterator[tuple[str, int]]) -> Any:
    """The form that begins with `tok` (its other tokens taken from `tokens`)."""
    if tok in _CLOSING:
        items, until = [], _CLOSING[tok]
        for inner, _ in tokens:
            if inner == until:
                break
            items.append(_form(inner, tokens))
        else:
            raise HistoryError(f"EDN ended before a {until!r}")
        if tok == "{":
            if len(items) % 2:
                raise HistoryError("an EDN map with an odd number of forms")
            return dict(zip(items[::2], items[1::2], strict=True))
        return items
    if tok in ("]", ")", "}"):
        raise HistoryError(f"an unexpected {tok!r} in EDN")
    return _atom(tok)


def _micro(ops: Any, where: str) -> list[tuple[str, int, Any]]:
    if not isinstance(ops, list):
        raise HistoryError(f"{where}: :value is not a vector of micro-operations")
    out = []
    for op in ops:
        if not (isinstance(op, list) and len(op) == 3 and op[0] in ("append", "r") and isinstance(op[1], int)
                and (op[0] == "r" or isinstance(op[2], int))):
            raise HistoryError(f"{where}: not a list-append micro-operation: {op!r}"[:200])
        out.append((str(op[0]), op[1], op[2]))
    return out


def _completed(op: dict[Any, Any], kind: Any, proc: Any, n: int, where: str, open_: dict[Any, dict[Any, Any]]
               ) -> Txn | None:
    """The transaction `op` completes (None: `op` is an invocation, or not a transaction)."""
    if op.get(Keyword("f"), Keyword("txn")) != "txn":
        return None
    if kind == "invoke":
        if proc in open_:
            raise HistoryError(f"{where}: invoked while its previous operation is open")
        open_[proc] = {**op, Keyword("index"): op.get(Keyword("index"), n)}
        return None
    if kind not in ("ok", "fail", "info") or proc not in open_:
        raise HistoryError(f"{where}: a completion :type {kind} without its invocation")
    inv = open_.pop(proc)
    ops = _micro(op.get(Keyword("value")) if kind == "ok" else inv.get(Keyword("value")), where)
    micro: list[MicroOp] = []
    for f, key, value in ops:
        if f == "append":
            micro.append(Append(key, int(value)))
        elif kind == "ok":
            if value is not None and not (isinstance(value, list) and all(isinstance(v, int) for v in value)):
                raise HistoryError(f"{where}: a read of key {key} that is not a vector of integers")
            micro.append(Read(key, tuple(value or ())))
        else:
            micro.append(Read(key, None))
    tid, client = op.get(Keyword("txn"), inv[Keyword("index")]), op.get(Keyword("client"), proc)
    if not isinstance(tid, int) or not isinstance(client, int):
        raise HistoryError(f"{where}: its transaction id and client are not integers")
    return Txn(int(tid), int(client), inv.get(Keyword("time"), 0) / 1e9, op.get(Keyword("time"), 0) / 1e9,
               str(kind), tuple(micro))  # type: ignore[arg-type]


def read_edn(text: str) -> list[Txn]:
    """A list-append history from Jepsen operations (a series of maps, or one vector of them)."""
    tokens = _tokens(text)
    forms: list[tuple[Any, int]] = []  # each top-level form and its line
    line, counted = 1, 0
    for tok, pos in tokens:
        line, counted = line + text.count("\n", counted, pos), pos
        try:
            forms.append((_form(tok, tokens), line))
        except HistoryError as exc:
            raise HistoryError(str(exc), line) from None
    if len(forms) == 1 and isinstance(forms[0][0], list):  # one vector of operations
        forms = [(op, forms[0][1]) for op in forms[0][0]]
    open_: dict[Any, dict[Any, Any]] = {}
    out: list[Txn] = []
    for n, (op, line) in enumerate(forms):
        if not isinstance(op, dict):
            raise HistoryError(f"operation {n + 1}: not a map", line)
        kind, proc = op.get(Keyword("type")), op.get(Keyword("process"))
        where = f"operation {n + 1} (process {proc})"
        try:
            done = _completed(op, kind, proc, n, where, open_)
        except HistoryError as exc:
            raise HistoryError(str(exc), line) from None
        if done is not None:
            out.append(done)
    for proc, inv in open_.items():  # never completed: its outcome is unknown
        where = f"process {proc}"
        ops = _micro(inv.get(Keyword("value")), where)
        tid, client, at = inv.get(Keyword("txn"), inv[Keyword("index")]), inv.get(Keyword("client"), proc), \
            inv.get(Keyword("time"), 0)
        if not isinstance(tid, int) or not isinstance(client, int) or not isinstance(at, int | float):
            raise HistoryError(f"{where}: its transaction id, client and time are not numbers")
        out.append(Txn(tid, client, at / 1e9, at / 1e9, "info",
                       tuple(Append(k, int(v)) if f == "append" else Read(k, None) for f, k, v in ops)))
    return out
