"""The user's own SQL as a workload: the file read into statements (parameters, quotes, comments,
transactions, the ledger), every mistake one line naming file, line and field; the draws; and the
ops it yields to an executor."""

from __future__ import annotations

import collections
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from chaoskit.errors import InputError
from chaoskit.workload.kinds.sql import UserSql
from chaoskit.workload.sql_script import Drawer, Zipf, describe, parse
from chaoskit.workload.workloads import BEGIN, COMMIT, OpContext, WorkloadParams

SHOP = textwrap.dedent("""\
    -- a shop: orders (the ledger) and stock
    -- @param item zipf 1 1000 1.1
    -- @param id uniform 5 9
    -- @param note string 12
    -- @param n sequence
    -- @ledger shop_orders run_id worker n

    -- @setup
    CREATE TABLE IF NOT EXISTS shop_orders (run_id VARCHAR(32), worker INT, n BIGINT, item INT,
      note VARCHAR(64), PRIMARY KEY (run_id, worker, n));
    CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;

    -- @transaction order weight=3
    BEGIN;
    INSERT INTO shop_orders (run_id, worker, n, item, note) VALUES (:run_id, :worker, :n, :item, :note);
    UPDATE shop_stock SET qty = qty - 1, tag = 'a:b;c''d' WHERE id = :item::int AND x LIKE '%sale%'; -- c;
    COMMIT;

    -- @transaction lookup weight=2
    /* a comment; with :not_a_param */ SELECT qty FROM shop_stock WHERE id = :id;
    """)


def test_the_file_becomes_statements_with_their_lines_parameters_and_kinds() -> None:
    s = parse(SHOP, "shop.sql")
    assert [st.line for st in s.setup] == [9, 11] and s.setup[1].parts == (
        "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql",)
    order, lookup = s.transactions
    assert (order.name, order.weight, order.writes, order.ledger_key) == ("order", 3, True, "n")
    assert (lookup.name, lookup.weight, lookup.writes, lookup.ledger_key) == ("lookup", 2, False, None)
    assert [st.verb for st in order.statements] == ["BEGIN", "INSERT", "UPDATE", "COMMIT"]
    assert [st.line for st in order.statements] == [14, 15, 16, 17]
    insert, update = order.statements[1:3]
    assert insert.params == ("run_id", "worker", "n", "item", "note")
    # inside quotes nothing is a parameter, a cast is not one, a literal % is doubled for the drivers
    assert update.params == ("item",)
    assert update.formatted() == ("UPDATE shop_stock SET qty = qty - 1, tag = 'a:b;c''d' WHERE id = %s::int AND "
                                  "x LIKE '%%sale%%'")
    assert lookup.statements[0].params == ("id",) and lookup.statements[0].formatted().endswith("WHERE id = %s")
    assert s.params["item"].draw == "zipf" and s.params["item"].s == 1.1 and s.ledger is not None
    assert s.text == SHOP


def test_validate_lists_every_statement_with_its_line() -> None:
    lines = describe(parse(SHOP, "/x/shop.sql"))
    assert "  shop.sql:15  INSERT INTO shop_orders (run_id, worker, n, item, note) VALUES (:run_id, :worker, :n, " \
           ":item, :note)" in lines
    assert "transaction order (weight 3 of 5, writes; its insert into shop_orders is keyed by :n (RPO)):" in lines
    assert "transaction lookup (weight 2 of 5, reads only):" in lines


def _broken(body: str) -> InputError:
    with pytest.raises(InputError) as err:
        parse(textwrap.dedent(body), "w.sql")
    return err.value


@pytest.mark.parametrize(("body", "line", "field", "words"), [
    ("-- @transaction a\nSELECT :x;\n", 2, "@transaction a", "parameter :x is not declared"),
    ("-- @param x uniform 1 2\n-- @param y uniform 1 2\n-- @transaction a\nSELECT :x;\n", 1, "@param y",
     "declared but used by no transaction"),
    ("-- @transaction a\nUPDATE t SET a = 1;\nUPDATE t SET b = 1;\n", 3, "@transaction a", "only between BEGIN"),
    ("-- @transaction a\nBEGIN;\nUPDATE t SET a = 1;\n", 3, "@transaction a", "ends with COMMIT"),
    ("-- @transaction a\nBEGIN;\nBEGIN;\nUPDATE t SET a = 1;\nCOMMIT;\n", 3, "@transaction a", "BEGIN inside"),
    ("-- @param n sequence\n-- @ledger t run_id worker n\n-- @transaction a\n"
     "INSERT INTO t (run_id, worker, n) VALUES (:run_id, 7, :n);\n", 4, "@transaction a", "binds run_id, worker"),
    ("-- @param n uniform 1 9\n-- @ledger t run_id worker n\n-- @transaction a\n"
     "INSERT INTO t (run_id, worker, n) VALUES (:run_id, :worker, :n);\n", 4, "@transaction a", "a sequence"),
    ("-- @param n sequence\n-- @ledger t run_id worker n\n-- @transaction a\nSELECT :n;\n", 2, "@ledger",
     "no transaction inserts into t"),
    ("-- @transactions a\nSELECT 1;\n", 1, "@transactions", "unknown directive"),
    ("SELECT 1;\n-- @transaction a\nSELECT 1;\n", 1, "statement", "before any"),
    ("-- @transaction a\nSELECT 'open;\n", 2, "statement", "never closed"),
    ("-- @transaction a\nSELECT 1\n", 2, "statement", "does not end with `;`"),
    ("-- @setup\nCREATE TABLE t (a int);\n", 1, "@transaction", "nothing to run"),
    ("-- @param z zipf 1 10 0\n-- @transaction a\nSELECT :z;\n", 1, "@param z", "exponent"),
    ("-- @param z zipf 10 1 1.1\n-- @transaction a\nSELECT :z;\n", 1, "@param z", "LO <= HI"),
    ("-- @param s string 0\n-- @transaction a\nSELECT :s;\n", 1, "@param s", "length"),
    ("-- @param s gauss 1 2\n-- @transaction a\nSELECT :s;\n", 1, "@param s", "unknown draw"),
    ("-- @param worker uniform 1 2\n-- @transaction a\nSELECT :worker;\n", 1, "@param worker", "declared twice"),
    ("-- @param x uniform 1 2\n-- @setup\nCREATE TABLE t (a int DEFAULT :x);\n-- @transaction a\nSELECT :x;\n", 3,
     "@setup", "setup has none"),
    ("-- @transaction a weight=0\nSELECT 1;\n", 1, "@transaction a", "weight=N"),
    ("-- @ledger t; run_id worker n\n-- @transaction a\nSELECT 1;\n", 1, "@ledger", "plain identifiers"),
])
def test_each_mistake_is_one_line_naming_file_line_and_field(body: str, line: int, field: str, words: str) -> None:
    err = _broken(body)
    assert (err.source, err.line, err.field) == ("w.sql", line, field), str(err)
    assert words in err.detail and "\n" not in str(err)


def _pmf(n: int, s: float) -> list[float]:
    weights = [k ** -s for k in range(1, n + 1)]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("s", [0.5, 1.0, 1.1, 2.0])
def test_zipf_draws_follow_the_law_over_the_range(s: float) -> None:
    """P(k) = k**-s / sum over 1..n of j**-s: the frequencies of 100,000 seeded draws within 0.006."""
    n, draws = 10, 100_000
    rng = random.Random(42)
    z = Zipf(n, s)
    seen = collections.Counter(z.draw(rng) for _ in range(draws))
    assert set(seen) <= set(range(1, n + 1))
    for k, p in enumerate(_pmf(n, s), 1):
        assert abs(seen[k] / draws - p) < 0.006, (k, seen[k] / draws, p)


def test_zipf_over_a_large_range_keeps_its_head_and_its_bounds() -> None:
    """n = 1,000,000, s = 1.1: P(1) = 1 / sum(k**-1.1) = 1 / 8.0037 = 0.1249 (the sum worked out to
    four places: sum over k <= 10**6 of k**-1.1 = zeta(1.1) - 10 * 10**-0.6 + ... = 8.0037)."""
    rng = random.Random(7)
    z = Zipf(1_000_000, 1.1)
    got = [z.draw(rng) for _ in range(50_000)]
    assert min(got) >= 1 and max(got) <= 1_000_000 and max(got) > 1000
    assert abs(got.count(1) / len(got) - 1 / sum(k ** -1.1 for k in range(1, 1_000_001))) < 0.006


def test_each_parameter_is_drawn_in_its_range_and_sequences_count_per_worker() -> None:
    s = parse(SHOP, "shop.sql")
    a, b = Drawer(s, random.Random(1)), Drawer(s, random.Random(2))
    assert {a.value("id") for _ in range(500)} == {5, 6, 7, 8, 9}
    assert all(1 <= int(a.value("item")) <= 1000 for _ in range(500))
    note = str(a.value("note"))
    assert len(note) == 12 and note.isalnum()
    assert [a.value("n") for _ in range(3)] == [1, 2, 3] and b.value("n") == 1
    z = Drawer(parse("-- @param z zipf 5 9 1.1\n-- @transaction a\nSELECT :z;\n"), random.Random(3))
    seen = collections.Counter(z.value("z") for _ in range(3000))
    assert set(seen) == {5, 6, 7, 8, 9} and seen.most_common(1)[0][0] == 5  # LO is the most frequent


class _Driver:
    """The workload's view of a driver: its parameter style, nothing run."""

    placeholder = "%s"

    def q(self, sql: str) -> str:
        return sql


def _ops(workload: UserSql, ctx: OpContext, n: int) -> list[tuple[str, list[Any], list[str], int | None]]:
    """Run n ops through steps(): (kind, statements yielded, the phase at each, the op's key)."""
    out = []
    for _ in range(n):
        ctx.phase, ctx.key, ctx.kind = "pre", None, None
        gen = workload.steps(ctx)
        stmts, phases = [], []
        try:
            stmt = next(gen)
            while True:
                stmts.append(stmt)
                phases.append(ctx.phase)
                stmt = gen.send(None)
        except StopIteration as done:
            out.append((str(done.value), stmts, phases, ctx.key))
    return out


def test_ops_are_chosen_by_weight_and_bind_one_value_per_parameter() -> None:
    wl = UserSql(_Driver(), WorkloadParams(sql=parse(SHOP, "shop.sql")), "run1")  # type: ignore[arg-type]
    wl.prepare()
    ctx = OpContext(worker=3, rng=random.Random(5), run_id="run1")
    ops = _ops(wl, ctx, 2000)
    writes = [o for o in ops if o[0] == "write"]
    assert 0.55 < len(writes) / len(ops) < 0.65  # weight 3 of 5
    keys = [o[3] for o in writes]
    assert keys == list(range(1, len(writes) + 1))  # the ledger's key: the worker's sequence, op by op
    _, stmts, phases, key = writes[0]
    assert stmts[0] is BEGIN and stmts[-1] is COMMIT
    insert, update = stmts[1], stmts[2]
    assert insert.params[:3] == ("run1", 3, key) and insert.params[3] == update.params[0]  # :item once per op
    assert phases == ["pre", "pre", "pre", "commit"]  # unknown only from the COMMIT on
    reads = [o for o in ops if o[0] == "read"]
    assert all(o[3] is None and o[2] == ["pre"] and o[1][0].rows for o in reads)  # a read never commits
    assert {o[1][0].params[0] for o in reads} <= {5, 6, 7, 8, 9}


def test_a_write_alone_is_committed_by_its_statement() -> None:
    script = parse("-- @param v uniform 1 3\n-- @transaction bump\nUPDATE t SET v = v + 1 WHERE id = :v;\n", "b.sql")
    wl = UserSql(_Driver(), WorkloadParams(sql=script), "r")  # type: ignore[arg-type]
    wl.prepare()
    ((kind, stmts, phases, key),) = _ops(wl, OpContext(worker=1, rng=random.Random(1), run_id="r"), 1)
    assert (kind, phases, key) == ("write", ["commit"], None) and not stmts[0].rows
    assert UserSql.checks_for(WorkloadParams(sql=script)) == ()


def _playbook(tmp_path: Path, sql: str, extra: str = "") -> Path:
    (tmp_path / "w.sql").write_text(sql)
    pb = tmp_path / "pb.yaml"
    pb.write_text(textwrap.dedent("""\
        name: t
        cluster: pg
        load:
          workload: {sql: w.sql}
        baseline: 5s
        steps:
          - at: 8s
            fault: {kind: kill, target: "role:primary", processes: [postgres], duration: 5s}
        duration: 20s
        """) + extra)
    return pb


def test_a_playbook_judges_rpo_only_with_a_ledger(tmp_path: Path) -> None:
    from chaoskit.playbook.loader import load_playbook

    pb = load_playbook(_playbook(tmp_path, SHOP)).playbook
    assert pb.checks == ("rpo", "split_brain", "replica_convergence")
    assert pb.load.to_spec().workload == "sql" and pb.load.to_spec().params.sql is not None
    plain = "-- @transaction a\nSELECT 1;\n"
    assert load_playbook(_playbook(tmp_path, plain)).playbook.checks == ("split_brain",)
    with pytest.raises(InputError) as err:
        load_playbook(_playbook(tmp_path, plain, "checks: [rpo]\n"))
    assert "needs a ledger in your SQL file" in str(err.value) and err.value.line == 10


def test_a_playbook_names_the_sql_files_mistake_and_refuses_a_bare_sql(tmp_path: Path) -> None:
    from chaoskit.playbook.loader import load_playbook

    with pytest.raises(InputError) as err:
        load_playbook(_playbook(tmp_path, "-- @param x uniform 1 x\n-- @transaction a\nSELECT :x;\n"))
    assert str(err.value) == f"{tmp_path / 'w.sql'}:1: @param x: not a number: '1 x'"
    pb = _playbook(tmp_path, SHOP)
    pb.write_text(pb.read_text().replace("{sql: w.sql}", "sql"))
    with pytest.raises(InputError) as err:
        load_playbook(pb)
    assert "runs your file: workload: {sql: my.sql}" in str(err.value) and err.value.line == 4


def test_statements_with_parameters_use_the_drivers_style_and_a_literal_percent() -> None:
    from chaoskit.db.dameng import DamengDriver
    from chaoskit.db.postgres import _numbered
    from chaoskit.inventory.models import Cluster, Host, Inventory

    assert _numbered("SELECT %s WHERE a LIKE '%%s%%' AND b = %s") == "SELECT $1 WHERE a LIKE '%s%' AND b = $2"
    cluster = Cluster(name="c", engine="dameng", members=[{"host": "h"}], user="u")  # type: ignore[list-item]
    inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"c": cluster})
    assert DamengDriver(cluster, inv).q("SELECT %s WHERE a LIKE '%%s%%'") == "SELECT ? WHERE a LIKE '%s%'"
