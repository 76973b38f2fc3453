"""The user's own SQL as a workload: a `.sql` file read into typed statements, and the draws of its
parameters.

The file stays plain SQL (a client can run it as it is); chaoskit reads directives from comment
lines that start with `-- @`:

    -- @param id    uniform 1 100000        an integer drawn uniformly in [1, 100000]
    -- @param hot   zipf 1 100000 1.1       an integer in [1, 100000], 1 the most frequent (exponent 1.1)
    -- @param note  string 16               16 random letters and digits
    -- @param n     sequence                this worker's next number (1, 2, 3, ...)
    -- @ledger orders run_id worker n       RPO: this run's rows of `orders` are read back by these columns

    -- @setup                               what follows runs once, before the load
    CREATE TABLE IF NOT EXISTS orders (...);

    -- @transaction new_order weight=3      what follows is one operation (weight: how often it is chosen)
    BEGIN;
    INSERT INTO orders (run_id, worker, n, note) VALUES (:run_id, :worker, :n, :note);
    UPDATE stock SET qty = qty - 1 WHERE id = :hot;
    COMMIT;

Parameters are `:name` outside quotes and comments (`::type` casts are not parameters); each is
drawn once per operation, so two uses in one transaction see one value. `:run_id` (this run's id)
and `:worker` (the worker's number) are given. A transaction of several statements is written
between BEGIN (or START TRANSACTION) and COMMIT; one statement alone runs in autocommit.

A statement is a read when it starts with SELECT, SHOW, VALUES, TABLE, EXPLAIN, DESCRIBE or DESC,
or WITH without INSERT, UPDATE, DELETE or MERGE in it; any other statement writes. An operation
writes when one of its statements does: its fate after a lost connection at the commit is then
unknown (`info`), as for chaoskit's own workloads.

With `@ledger TABLE RUN_COLUMN WORKER_COLUMN SEQUENCE_COLUMN`, the INSERT into TABLE must bind
those columns to `:run_id`, `:worker` and a `sequence` parameter: each such insert is a write
whose key (worker, number) is looked up after the run, so RPO (acknowledged writes lost) and
replica convergence can be judged. Without a ledger, only the cluster's checks run.
"""

from __future__ import annotations

import math
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path

from chaoskit.errors import InputError

GIVEN = ("run_id", "worker")  # parameters chaoskit fills itself
DRAWS = ("uniform", "zipf", "string", "sequence")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_READS = ("SELECT", "SHOW", "VALUES", "TABLE", "EXPLAIN", "DESCRIBE", "DESC")
_CONTROL = ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SET", "USE")  # neither read nor write
_DML = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
_MAX_STRING = 4000
_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class Param:
    """How one parameter is drawn: `uniform` lo..hi, `zipf` lo..hi with exponent `s` (lo the most
    frequent), `string` of `length`, `sequence` (the worker's next number)."""

    name: str
    draw: str
    lo: int = 0
    hi: int = 0
    s: float = 0.0
    length: int = 0


@dataclass(frozen=True)
class Statement:
    """One statement as the literal text between its parameters (`parts` has one more item than
    `params`), and where it starts in the file."""

    parts: tuple[str, ...]
    params: tuple[str, ...]
    line: int
    writes: bool
    verb: str  # the first keyword, upper case (BEGIN, COMMIT, SELECT, INSERT, ...)

    @property
    def text(self) -> str:
        """As written, parameters shown as :name (what `validate` lists)."""
        out = [self.parts[0]]
        for name, part in zip(self.params, self.parts[1:], strict=True):
            out += [f":{name}", part]
        return "".join(out)

    @property
    def returns_rows(self) -> bool:
        """A read whose rows the executor fetches (a control statement returns none)."""
        return not self.writes and self.verb not in _CONTROL

    def formatted(self) -> str:
        """With %s placeholders and a literal % doubled when it has parameters (the drivers' format
        style), else as written (a statement without parameters is sent as it is)."""
        if not self.params:
            return self.parts[0]
        return "%s".join(part.replace("%", "%%") for part in self.parts)


@dataclass(frozen=True)
class Transaction:
    name: str
    weight: int
    statements: tuple[Statement, ...]  # BEGIN and COMMIT included when written
    line: int
    ledger_key: str | None = None  # the sequence parameter whose value keys this op's ledger row

    @property
    def writes(self) -> bool:
        return any(s.writes for s in self.statements)

    @property
    def explicit(self) -> bool:
        return self.statements[0].verb in ("BEGIN", "START")


@dataclass(frozen=True)
class Ledger:
    table: str
    run_column: str
    worker_column: str
    seq_column: str


@dataclass(frozen=True)
class SqlScript:
    path: str
    params: dict[str, Param]
    setup: tuple[Statement, ...]
    transactions: tuple[Transaction, ...]
    ledger: Ledger | None
    text: str = ""  # the file as it was read (kept in the run directory as evidence)

    @property
    def writes(self) -> bool:
        return any(t.writes for t in self.transactions)

    @property
    def kept_as(self) -> str:
        """Where a run directory keeps the file as it was read."""
        return f"workload/{Path(self.path).name}"


def load_script(path: str | Path) -> SqlScript:
    """Read and check the file; a mistake is an InputError naming the file, the line and what is
    wrong (the input shown escaped)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the SQL file: {exc.strerror}", source=str(p)) from None
    if len(raw) > _MAX_BYTES:
        raise InputError(f"the SQL file is {len(raw):,} bytes; at most {_MAX_BYTES:,}", source=str(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 (byte {exc.start})", source=str(p)) from None
    return parse(text, str(p))


def _fail(source: str, line: int, field: str, message: str) -> InputError:
    return InputError(message, source=source, line=line, field=field)


def parse(text: str, source: str = "<sql>") -> SqlScript:
    params: dict[str, Param] = {}
    ledger: Ledger | None = None
    ledger_line = 0
    sections: list[tuple[str, str, int, int, list[tuple[int, str]]]] = []  # kind, name, weight, line, body
    current: list[tuple[int, str]] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        directive = re.match(r"^\s*--\s*@([A-Za-z_]+)(.*)$", line)
        if directive is None:
            if current is not None:
                current.append((n, line))
            elif line.strip() and not line.strip().startswith("--"):
                raise _fail(source, n, "statement", f"a statement before any `-- @setup` or `-- @transaction` "
                                                    f"line: {_shown(line)}")
            continue
        word, rest = directive.group(1).lower(), directive.group(2).split()
        if word == "param":
            param = _param(source, n, rest)
            if param.name in params or param.name in GIVEN:
                raise _fail(source, n, f"@param {param.name}", "declared twice (run_id and worker are given)")
            params[param.name] = param
        elif word == "ledger":
            if ledger is not None:
                raise _fail(source, n, "@ledger", "a second ledger; one table is the ledger")
            if len(rest) != 4 or not all(_IDENT.match(x) for x in rest):
                raise _fail(source, n, "@ledger", f"expected TABLE RUN_COLUMN WORKER_COLUMN SEQUENCE_COLUMN "
                                                  f"(plain identifiers), got {_shown(' '.join(rest))}")
            ledger, ledger_line = Ledger(*rest), n
        elif word == "setup":
            if rest:
                raise _fail(source, n, "@setup", f"takes nothing after it, got {_shown(' '.join(rest))}")
            if any(kind == "setup" for kind, *_ in sections):
                raise _fail(source, n, "@setup", "a second setup section")
            current = []
            sections.append(("setup", "setup", 0, n, current))
        elif word == "transaction":
            name, weight = _transaction_head(source, n, rest)
            if any(s[1] == name for s in sections if s[0] == "transaction"):
                raise _fail(source, n, f"@transaction {name}", "two transactions of this name")
            current = []
            sections.append(("transaction", name, weight, n, current))
        else:
            raise _fail(source, n, f"@{word}", "unknown directive; choose from @param, @ledger, @setup, @transaction")
    setup: tuple[Statement, ...] = ()
    transactions: list[Transaction] = []
    used: set[str] = set()
    for kind, name, weight, at, body in sections:
        statements = _statements(source, body, at)
        if kind == "setup":
            for st in statements:
                if st.params:
                    raise _fail(source, st.line, "@setup", f"parameters are drawn per operation; setup has none: "
                                                           f":{st.params[0]}")
            setup = tuple(statements)
            continue
        tx = _transaction(source, name, weight, at, statements, params, ledger)
        used |= {p for st in tx.statements for p in st.params}
        transactions.append(tx)
    if not transactions:
        raise _fail(source, 1, "@transaction", "no `-- @transaction NAME` section: nothing to run")
    unused = sorted(set(params) - used)
    if unused:
        raise _fail(source, 1, f"@param {unused[0]}", "declared but used by no transaction (a misspelt name?)")
    if ledger is not None and not any(t.ledger_key for t in transactions):
        raise _fail(source, ledger_line, "@ledger", f"no transaction inserts into {ledger.table} with "
                                                    f"({ledger.run_column}, {ledger.worker_column}, "
                                                    f"{ledger.seq_column}) bound to (:run_id, :worker, a sequence)")
    return SqlScript(source, params, setup, tuple(transactions), ledger, text)


def _shown(value: str) -> str:
    return repr(value[:120])


def _param(source: str, line: int, rest: list[str]) -> Param:
    if len(rest) < 2 or not _NAME.match(rest[0]):
        raise _fail(source, line, "@param", f"expected NAME DRAW ..., got {_shown(' '.join(rest))}")
    name, draw, args = rest[0], rest[1].lower(), rest[2:]
    field = f"@param {name}"
    need = {"uniform": 2, "zipf": 3, "string": 1, "sequence": 0}
    if draw not in need:
        raise _fail(source, line, field, f"unknown draw {_shown(rest[1])}; choose from {', '.join(DRAWS)}")
    if len(args) != need[draw]:
        raise _fail(source, line, field, f"{draw} takes {need[draw]} value(s), got {_shown(' '.join(args))}")
    try:
        if draw in ("uniform", "zipf"):
            lo, hi = int(args[0]), int(args[1])
            if not -2**62 <= lo <= hi <= 2**62:
                raise ValueError(f"expected LO <= HI, got {lo} and {hi}")
            s = float(args[2]) if draw == "zipf" else 0.0
            if draw == "zipf" and not 0.0 < s <= 10.0:
                raise ValueError(f"the exponent must be in (0, 10], got {args[2]}")
            if draw == "zipf" and hi - lo >= 2**31:
                raise ValueError("a zipf range holds at most 2**31 values")
            return Param(name, draw, lo, hi, s)
        if draw == "string":
            length = int(args[0])
            if not 1 <= length <= _MAX_STRING:
                raise ValueError(f"the length must be 1 to {_MAX_STRING}, got {length}")
            return Param(name, draw, length=length)
    except ValueError as exc:
        raise _fail(source, line, field, str(exc) if "invalid literal" not in str(exc)
                    else f"not a number: {_shown(' '.join(args))}") from None
    return Param(name, draw)


def _transaction_head(source: str, line: int, rest: list[str]) -> tuple[str, int]:
    if not rest or not _NAME.match(rest[0]):
        raise _fail(source, line, "@transaction", f"expected NAME [weight=N], got {_shown(' '.join(rest))}")
    weight = 1
    for extra in rest[1:]:
        m = re.fullmatch(r"weight=(\d{1,6})", extra)
        if m is None or int(m.group(1)) < 1:
            raise _fail(source, line, f"@transaction {rest[0]}", f"expected weight=N (1 to 999999), got "
                                                                 f"{_shown(extra)}")
        weight = int(m.group(1))
    return rest[0], weight


def _statements(source: str, body: list[tuple[int, str]], head_line: int) -> list[Statement]:
    """Split on `;` outside quotes, comments and dollar quotes; `:name` parameters found there too."""
    out: list[Statement] = []
    parts: list[str] = []
    names: list[str] = []
    buf: list[str] = []
    start_line: int | None = None
    text = "\n".join(line for _, line in body)
    line_of = [n for n, line in body for _ in range(len(line) + 1)]
    i, state, dollar = 0, "", ""
    while i < len(text):
        c = text[i]
        if state == "":
            if start_line is None and not c.isspace():
                if text.startswith("--", i):
                    end = text.find("\n", i)
                    i = len(text) if end < 0 else end
                    continue
                start_line = line_of[i]
            if c == ";":
                parts.append("".join(buf))
                out.append(_statement(source, parts, names, start_line or head_line))
                parts, names, buf, start_line = [], [], [], None
                i += 1
                continue
            if c in "'\"`":
                state = c
            elif text.startswith("--", i):
                state = "-"
            elif text.startswith("/*", i):
                state = "*"
            elif c == "$":
                m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", text[i:])
                if m:
                    state, dollar = "$", m.group(0)
                    buf.append(dollar)
                    i += len(dollar)
                    continue
            elif c == ":" and text.startswith("::", i):
                buf.append("::")
                i += 2
                continue
            elif c == ":" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                m = re.match(r":([A-Za-z_][A-Za-z0-9_]*)", text[i:])
                if m:
                    parts.append("".join(buf))
                    names.append(m.group(1))
                    buf = []
                    i += len(m.group(0))
                    continue
            buf.append(c)
            i += 1
            continue
        # inside something: copied as it is until its end
        if state in "'\"`" and c == state:
            if text.startswith(state * 2, i):  # a doubled quote stays inside
                buf.append(state * 2)
                i += 2
                continue
            state = ""
        elif state == "'" and c == "\\" and i + 1 < len(text):  # MySQL's backslash escape
            buf.append(text[i:i + 2])
            i += 2
            continue
        elif state == "-" and c == "\n":
            state = ""
        elif state == "*" and text.startswith("*/", i):
            buf.append("*/")
            i += 2
            state = ""
            continue
        elif state == "$" and text.startswith(dollar, i):
            buf.append(dollar)
            i += len(dollar)
            state = ""
            continue
        buf.append(c)
        i += 1
    if state in "'\"`$*" and state:
        raise _fail(source, start_line or head_line, "statement", "a quote, comment or dollar quote is never closed")
    rest = "".join(buf).strip()
    if rest or names:
        raise _fail(source, start_line or head_line, "statement", f"a statement does not end with `;`: "
                                                                  f"{_shown(rest)}")
    return [st for st in out if st.verb]


def _statement(source: str, parts: list[str], names: list[str], line: int) -> Statement:
    head = re.sub(r"^(\s|--[^\n]*\n|/\*.*?\*/|\()*", "", parts[0], flags=re.DOTALL)
    word = re.match(r"[A-Za-z]+", head)
    verb = word.group(0).upper() if word else ""
    whole = "".join(parts)
    if verb in _CONTROL:
        writes = False
    elif verb == "WITH":
        writes = bool(_DML.search(whole))
    else:
        writes = verb not in _READS
    if verb and not parts[0].strip() and not names:
        verb = ""
    return Statement(tuple(p.strip() if len(parts) == 1 else p for p in _trimmed(parts)), tuple(names), line,
                     writes, verb)


def _trimmed(parts: list[str]) -> list[str]:
    parts = list(parts)
    parts[0] = parts[0].lstrip()
    parts[-1] = parts[-1].rstrip()
    return parts


def _transaction(source: str, name: str, weight: int, line: int, statements: list[Statement],
                 params: dict[str, Param], ledger: Ledger | None) -> Transaction:
    field = f"@transaction {name}"
    if not statements:
        raise _fail(source, line, field, "no statement")
    verbs = [s.verb for s in statements]
    if verbs[0] in ("BEGIN", "START"):
        if verbs[-1] not in ("COMMIT", "END") or len(statements) < 3:
            raise _fail(source, statements[-1].line, field, "a transaction opened with BEGIN ends with COMMIT, "
                                                            "with statements between")
        inner = statements[1:-1]
    elif len(statements) > 1:
        raise _fail(source, statements[1].line, field, "several statements are one transaction only between BEGIN "
                                                       "and COMMIT (else each would commit on its own)")
    else:
        inner = statements
    for st in inner:
        if st.verb in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"):
            raise _fail(source, st.line, field, f"{st.verb} inside the transaction: one BEGIN first, one COMMIT "
                                                "last")
    for st in statements:
        for p in st.params:
            if p not in params and p not in GIVEN:
                raise _fail(source, st.line, field, f"parameter :{p} is not declared (-- @param {p} ...)")
    key = None
    if ledger is not None:
        for st in inner:
            bound = _ledger_insert(st, ledger)
            if bound is None:
                continue
            seq = bound.get(ledger.seq_column.lower())
            if bound.get(ledger.run_column.lower()) != "run_id" or bound.get(ledger.worker_column.lower()) != "worker" \
                    or seq is None or seq not in params or params[seq].draw != "sequence":
                raise _fail(source, st.line, field, f"the insert into the ledger {ledger.table} binds "
                                                    f"{ledger.run_column}, {ledger.worker_column} and "
                                                    f"{ledger.seq_column} to :run_id, :worker and a sequence "
                                                    "parameter, each as a plain value")
            if key is not None:
                raise _fail(source, st.line, field, "two ledger inserts in one transaction: one key per op")
            key = seq
    return Transaction(name, weight, tuple(statements), line, key)


def _ledger_insert(st: Statement, ledger: Ledger) -> dict[str, str | None] | None:
    """column -> the parameter bound to it (None: not a bare parameter), for an INSERT into the
    ledger table; None for any other statement."""
    marked = "".join(f"{part}\x00{i}\x00" if i < len(st.params) else part for i, part in enumerate(st.parts))
    m = re.match(r"^\s*INSERT\s+INTO\s+([A-Za-z0-9_$.\"`]+)\s*(?:\(([^)]*)\))?\s*VALUES\s*\((.*)\)\s*$", marked,
                 re.IGNORECASE | re.DOTALL)
    if m is None or m.group(1).replace('"', "").replace("`", "").lower() != ledger.table.lower():
        return None
    if m.group(2) is None:
        return {}
    columns = [c.strip().strip('"`').lower() for c in m.group(2).split(",")]
    values = _top_level_split(m.group(3))
    if len(columns) != len(values):
        return {}
    out: dict[str, str | None] = {}
    for col, val in zip(columns, values, strict=True):
        bare = re.fullmatch(r"\s*\x00(\d+)\x00\s*", val)
        out[col] = st.params[int(bare.group(1))] if bare else None
    return out


def _top_level_split(text: str) -> list[str]:
    out: list[str] = []
    buf: list[str] = []
    depth, quote = 0, ""
    for c in text:
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            out.append("".join(buf))
            buf = []
            continue
        buf.append(c)
    out.append("".join(buf))
    return out


def describe(script: SqlScript) -> list[str]:
    """What the workload will run, as `chaoskit validate` lists it: each statement with its file
    line and its parameters as written, what each transaction is, and how each parameter is drawn."""
    name = Path(script.path).name
    total = sum(t.weight for t in script.transactions)
    out = []
    if script.setup:
        out.append("setup (once, on the writer, before the load):")
        out += [f"  {name}:{st.line}  {_one_line(st.text)}" for st in script.setup]
    for tx in script.transactions:
        what = "writes" if tx.writes else "reads only"
        key = f"; its insert into {script.ledger.table} is keyed by :{tx.ledger_key} (RPO)" \
            if tx.ledger_key and script.ledger else ""
        out.append(f"transaction {tx.name} (weight {tx.weight} of {total}, {what}{key}):")
        out += [f"  {name}:{st.line}  {_one_line(st.text)}" for st in tx.statements]
    draws = []
    for p in script.params.values():
        how = {"uniform": f"uniform {p.lo}..{p.hi}", "zipf": f"zipf {p.lo}..{p.hi} exponent {p.s:g}",
               "string": f"{p.length} letters and digits", "sequence": "the worker's next number"}[p.draw]
        draws.append(f":{p.name} {how}")
    out.append("parameters, drawn once per op: " + "; ".join([*draws, ":run_id this run's id", ":worker the worker"]))
    return out


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 160 else flat[:157] + "..."


# -- draws ---------------------------------------------------------------------------------------
_ALNUM = string.ascii_letters + string.digits


class Zipf:
    """Integers 1..n with P(k) proportional to k**-s, by rejection-inversion (Hörmann and
    Derflinger, 1996): constant time per draw for any n, no table."""

    def __init__(self, n: int, s: float) -> None:
        self.n, self.s = n, s
        self.h_x1 = self._big_h(1.5) - 1.0
        self.h_n = self._big_h(n + 0.5)
        self.cut = 2.0 - self._big_h_inv(self._big_h(2.5) - self._h(2.0))

    def _h(self, x: float) -> float:
        return math.exp(-self.s * math.log(x))

    def _big_h(self, x: float) -> float:
        log_x = math.log(x)
        return _expm1_over(( 1.0 - self.s) * log_x) * log_x

    def _big_h_inv(self, x: float) -> float:
        t = max(-1.0, x * (1.0 - self.s))
        return math.exp(_log1p_over(t) * x)

    def draw(self, rng: random.Random) -> int:
        while True:
            u = self.h_n + rng.random() * (self.h_x1 - self.h_n)
            x = self._big_h_inv(u)
            k = min(self.n, max(1, int(x + 0.5)))
            if k - x <= self.cut or u >= self._big_h(k + 0.5) - self._h(k):
                return k


def _expm1_over(x: float) -> float:
    return math.expm1(x) / x if abs(x) > 1e-8 else 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))


def _log1p_over(x: float) -> float:
    return math.log1p(x) / x if abs(x) > 1e-8 else 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))


class Drawer:
    """One worker's draws: a value per parameter per operation (sequences count per worker)."""

    def __init__(self, script: SqlScript, rng: random.Random) -> None:
        self.rng = rng
        self.params = script.params
        self.counters: dict[str, int] = {}
        self.zipf = {p.name: Zipf(p.hi - p.lo + 1, p.s) for p in script.params.values() if p.draw == "zipf"}

    def value(self, name: str) -> int | str:
        p, rng = self.params[name], self.rng
        if p.draw == "uniform":
            return rng.randint(p.lo, p.hi)
        if p.draw == "zipf":
            return p.lo + self.zipf[name].draw(rng) - 1
        if p.draw == "string":
            return "".join(rng.choices(_ALNUM, k=p.length))
        self.counters[name] = self.counters.get(name, 0) + 1
        return self.counters[name]
