"""Error classification per driver, and which failures count as fail vs info."""

from __future__ import annotations

import socket

import psycopg
import pymysql
import pytest
from psycopg import errors as pgerr

from chaoskit.db.base import ErrorClass
from chaoskit.db.dameng import DamengDriver
from chaoskit.db.mysql import MySQLDriver
from chaoskit.db.postgres import PostgresDriver
from chaoskit.db.registry import driver_for
from chaoskit.inventory.models import Cluster, Host, Inventory
from chaoskit.recorder import FAIL, INFO
from chaoskit.workload.runner import outcome_for

_ENGINE = {"postgres": "postgres", "postgres-patroni": "postgres", "mysql": "mysql", "mariadb-replication": "mysql",
           "dameng": "dameng"}


def _inv(kind: str, **extra: object) -> tuple[Cluster, Inventory]:
    cluster = Cluster(name="c", engine=_ENGINE[kind], members=[{"host": "h"}], user="u", **extra)  # type: ignore[arg-type]
    inv = Inventory(hosts={"h": Host(name="h", address="127.0.0.1")}, clusters={"c": cluster})
    return cluster, inv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("exc", "cls"), [
    (pgerr.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"), ErrorClass.read_only),
    (pgerr.SerializationFailure("could not serialize"), ErrorClass.serialization),
    (pgerr.DeadlockDetected("deadlock detected"), ErrorClass.serialization),
    (pgerr.UniqueViolation("duplicate key"), ErrorClass.constraint),
    (pgerr.QueryCanceled("canceling statement due to statement timeout"), ErrorClass.timeout),
    (pgerr.AdminShutdown("terminating connection due to administrator command"), ErrorClass.connection_lost),
    (psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
     ErrorClass.connection_lost),
    (psycopg.OperationalError("connection failed: connection to server at \"10.0.0.1\", port 5432 failed: "
                              "Connection refused"), ErrorClass.connect_refused),
    (psycopg.errors.ConnectionTimeout("connection timeout expired"), ErrorClass.timeout),
    (psycopg.OperationalError("connection failed: server is in hot standby mode"), ErrorClass.read_only),
    # what the lab's PostgreSQL answered on a full disk (SQLSTATE 53100), and out of memory (53200)
    (pgerr.DiskFull('could not extend file "base/5/16390": No space left on device'), ErrorClass.resources),
    (pgerr.OutOfMemory("out of memory"), ErrorClass.resources),
    (ValueError("weird"), ErrorClass.other),
])
def test_postgres_classes(exc: BaseException, cls: ErrorClass) -> None:
    assert PostgresDriver(*_inv("postgres")).classify(exc) == cls


# one failure, one name: what chaoskit's own clients meet as an exception and what a load tool
# reports of the same failure in words (pgbench, sysbench) are classed by one rule per driver
@pytest.mark.parametrize(("exc", "words", "cls"), [
    # libpq with target_session_attrs=read-write reaching a standby (pgbench's words after "error: ")
    (psycopg.OperationalError('connection failed: connection to server at "10.77.0.12", port 5432 failed: '
                              "session is read-only"),
     'pgbench: error: connection to server at "10.77.0.12", port 5432 failed: session is read-only', "read_only"),
    (psycopg.OperationalError('connection to server at "10.0.0.1", port 5432 failed: timeout expired'),
     'pgbench: error: connection to server at "10.0.0.1", port 5432 failed: timeout expired', "timeout"),
    (psycopg.OperationalError('connection to server at "127.0.0.1", port 1 failed: Connection refused'),
     'pgbench: error: connection to server at "127.0.0.1", port 1 failed: Connection refused', "connect_refused"),
    (pgerr.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
     "client 0 script 0 aborted in command 5 query 0: ERROR:  cannot execute UPDATE in a read-only transaction",
     "read_only"),
    (pgerr.SerializationFailure("could not serialize access due to concurrent update"),
     "ERROR:  could not serialize access due to concurrent update", "serialization"),
])
def test_postgres_words_of_a_tool_are_classed_as_the_same_exception(exc: BaseException, words: str,
                                                                     cls: str) -> None:
    driver = PostgresDriver(*_inv("postgres"))
    assert driver.classify(exc) == driver.classify_words(words) == cls


@pytest.mark.parametrize(("exc", "words", "cls"), [
    (pymysql.err.OperationalError(1290, "The MariaDB server is running with the --read-only option"),
     "FATAL: mysql_stmt_execute() returned error 1290 (The MariaDB server is running with the --read-only option "
     "so it cannot execute this statement) for query 'INSERT INTO sbtest1'", "read_only"),
    (pymysql.err.OperationalError(2013, "Lost connection to server during query"),
     "FATAL: mysql_stmt_execute() returned error 2013 (Lost connection to server during query) for query 'BEGIN'",
     "connection_lost"),
    (pymysql.err.OperationalError(2002, "Can't connect to server on '127.0.0.1' (115)"),
     "FATAL: error 2002: Can't connect to server on '127.0.0.1' (115)", "connect_refused"),
    (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"),
     "FATAL: `thread_run' function failed: SQL error, errno = 1213, state = '40001': Deadlock found",
     "serialization"),
])
def test_mysql_words_of_a_tool_are_classed_as_the_same_exception(exc: BaseException, words: str, cls: str) -> None:
    driver = MySQLDriver(*_inv("mysql"))
    assert driver.classify(exc) == driver.classify_words(words) == cls


def test_postgres_real_refused_connection() -> None:
    cluster, inv = _inv("postgres", port=_free_port())
    driver = driver_for(cluster, inv, connect_timeout=1)
    with pytest.raises(psycopg.OperationalError) as info:
        driver.connect_writer()
    assert driver.classify(info.value) == ErrorClass.connect_refused


@pytest.mark.parametrize(("exc", "cls"), [
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '10.0.0.1' ([Errno 111] refused)"),
     ErrorClass.connect_refused),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), ErrorClass.connection_lost),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query (timed out)"),
     ErrorClass.timeout),
    (pymysql.err.OperationalError(2006, "MySQL server has gone away"), ErrorClass.connection_lost),
    (pymysql.err.OperationalError(1290, "The MariaDB server is running with the --read-only option"),
     ErrorClass.read_only),
    (pymysql.err.OperationalError(1213, "Deadlock found"), ErrorClass.serialization),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), ErrorClass.timeout),
    (pymysql.err.IntegrityError(1062, "Duplicate entry"), ErrorClass.constraint),
    (pymysql.err.OperationalError(1114, "The table 'chaoskit_ledger' is full"), ErrorClass.resources),
    (pymysql.err.InternalError(3, "Error writing file './binlog.000002' (Errcode: 28 \"No space left on device\")"),
     ErrorClass.resources),
    (pymysql.err.InterfaceError(0, ""), ErrorClass.connection_lost),
    (pymysql.err.ProgrammingError(1064, "syntax"), ErrorClass.other),
])
def test_mysql_classes(exc: BaseException, cls: ErrorClass) -> None:
    assert MySQLDriver(*_inv("mysql")).classify(exc) == cls


def test_mysql_real_refused_connection() -> None:
    cluster, inv = _inv("mysql", port=_free_port())
    driver = driver_for(cluster, inv, connect_timeout=1)
    with pytest.raises(pymysql.MySQLError) as info:
        driver.connect_writer()
    assert driver.classify(info.value) == ErrorClass.connect_refused


def test_dameng_real_refused_and_silent_server(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dmPython")
    monkeypatch.setenv("CK_DM_PW", "not-used-by-a-server")
    pw = {"env": "CK_DM_PW"}
    cluster, inv = _inv("dameng", port=_free_port(), password=pw)
    driver = driver_for(cluster, inv, connect_timeout=1)
    assert isinstance(driver, DamengDriver) and driver.q("SELECT %s") == "SELECT ?"
    with pytest.raises(Exception) as info:
        driver.connect_writer()
    assert driver.classify(info.value) == ErrorClass.connect_refused
    with socket.socket() as silent:  # accepts TCP, never answers: like a frozen host
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        cluster, inv = _inv("dameng", port=silent.getsockname()[1], password=pw)
        driver = driver_for(cluster, inv, connect_timeout=1)
        with pytest.raises(Exception) as info:
            driver.connect_writer()
        assert driver.classify(info.value) == ErrorClass.connection_lost


def test_dameng_connect_params_and_service_name() -> None:
    cluster, inv = _inv("dameng", dsn="DMHA", port=5236, options={"dmsvc_path": "/etc/dm"})
    driver = DamengDriver(cluster, inv)
    params = driver.connect_params("DMHA", None)
    assert params["server"] == "DMHA" and "port" not in params and params["autoCommit"] is True
    assert params["dmsvc_path"] == "/etc/dm"


def test_postgres_writer_conninfo_has_timeouts_and_passthrough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CK_PW", "pw")
    cluster, inv = _inv("postgres", dsn="host=a,b port=5432 target_session_attrs=read-write",
                        password={"env": "CK_PW"}, options={"sslmode": "require"})
    info = psycopg.conninfo.conninfo_to_dict(PostgresDriver(cluster, inv, op_timeout=3).writer_conninfo())
    assert info["host"] == "a,b" and info["target_session_attrs"] == "read-write"
    assert info["sslmode"] == "require" and info["password"] == "pw"
    assert info["tcp_user_timeout"] == "3000" and "statement_timeout=3000" in info["options"]


@pytest.mark.parametrize(("cls", "phase", "interrupted", "expected"), [
    (ErrorClass.connection_lost, "pre", False, FAIL),
    (ErrorClass.connection_lost, "commit", False, INFO),
    (ErrorClass.timeout, "commit", True, INFO),  # our deadline fired: the server may have committed
    (ErrorClass.timeout, "commit", False, FAIL),  # the server cancelled the statement
    (ErrorClass.read_only, "commit", False, FAIL),
    (ErrorClass.constraint, "commit", False, FAIL),
    (ErrorClass.resources, "commit", False, FAIL),  # the server refused the statement: nothing committed
    (ErrorClass.other, "commit", False, INFO),
])
def test_commit_phase_errors_are_info(cls: ErrorClass, phase: str, interrupted: bool, expected: str) -> None:
    assert outcome_for(cls, phase, interrupted) == expected


def test_a_tuned_driver_shares_everything_but_its_timeouts() -> None:
    import pytest

    from chaoskit.db.base import ClientProfile
    from chaoskit.db.registry import driver_for
    from chaoskit.inventory.models import Inventory

    inv = Inventory.model_validate({"hosts": {"pg1": {"name": "pg1", "address": "127.0.0.1"}},
                                    "clusters": {"pg": {"name": "pg", "engine": "postgres", "user": "u",
                                                        "members": [{"host": "pg1"}]}}})
    base = driver_for(inv.clusters["pg"], inv)
    probe = base.tuned(connect_timeout=0.5, op_timeout=0.5)
    pool = base.tuned(profile=ClientProfile("pool"))
    assert (base.connect_timeout, base.op_timeout, base.profile.name) == (2.0, 5.0, "deadline")
    assert (probe.connect_timeout, probe.op_timeout) == (0.5, 0.5) and probe.cluster is base.cluster
    assert pool.profile.name == "pool" and pool.connect_timeout == 2.0 and type(pool) is type(base)
    with pytest.raises(TypeError, match="cluster"):
        base.tuned(cluster=None)


@pytest.mark.parametrize(("exc", "gave_up", "outcome"), [
    # PyMySQL's own read_timeout: the client stopped waiting; the server may still commit
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query (timed out)"), True, INFO),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), False, INFO),
    # the server cancelled the statement itself (MariaDB max_statement_time): it did not happen
    (pymysql.err.OperationalError(1969, "Query execution was interrupted (max_statement_time exceeded)"), False,
     FAIL),
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on 'x' (timed out)"), False, FAIL),
])
def test_mysql_client_timeout_leaves_the_commit_unknown(exc: BaseException, gave_up: bool, outcome: str) -> None:
    """What the load records for an error that came while committing."""
    driver = MySQLDriver(*_inv("mysql"))
    assert driver.client_gave_up(exc) is gave_up
    assert outcome_for(driver.classify(exc), "commit", driver.client_gave_up(exc)) == outcome


@pytest.mark.parametrize("library", ["pymysql", "mysqlclient"])
def test_both_mysql_client_libraries_give_one_failure_one_name(library: str) -> None:
    """The same refused port and silent listener on loopback, reached through each library: the
    same class (the C client says a timeout as "system error: 110", PyMySQL as "(timed out)")."""
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    held: list[object] = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in range(2)], daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        for port, cls in ((closed_port, ErrorClass.connect_refused), (silent.getsockname()[1], ErrorClass.timeout)):
            cluster, inv = _inv("mysql", endpoints=[f"127.0.0.1:{port}"])
            driver = MySQLDriver(cluster, inv, connect_timeout=1.0, op_timeout=1.0).tuned(library=library)
            with pytest.raises(Exception) as err:
                driver.connect_writer()
            assert driver.classify(err.value) == cls, (port, err.value)
            assert driver.loop_capable() is (library == "pymysql")
    finally:
        silent.close()
