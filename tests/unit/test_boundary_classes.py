"""The boundary's second pass, class by class (issue 24): values that become options, IPv6 scope
ids, tags that lose production, values normalised but not re-checked, messages with control
characters, secrets past the reference rule, input computed on before its type is known.

Each class is tried over every field of its kind with generated values (hypothesis): a value of the
class is refused at validate with one line naming file, line and field, or, where it is legitimately
accepted, the planned host scripts hold it only as data. The number of values each test tries is its
`max_examples`: 30 per field (FEW) or 200 per test (MANY)."""

from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from chaoskit.errors import ChaoskitError, InputError, escaped
from chaoskit.faults.manager import FaultManager
from chaoskit.faults.spec import parse_fault
from chaoskit.faults.targets import validate_target
from chaoskit.inventory.loader import load_inventory
from chaoskit.inventory.models import Inventory
from chaoskit.playbook.loader import load_playbook
from chaoskit.report.writer import markdown_env, template_env

ROOT = Path(__file__).resolve().parents[2]
LAB_DOC: dict[str, Any] = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _write(doc: Any, suffix: str = ".yaml") -> Path:
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False, encoding="utf-8") as f:
        if isinstance(doc, str):
            f.write(doc)
        else:
            yaml.safe_dump(doc, f, allow_unicode=True, sort_keys=False)
    return Path(f.name)


def _set(doc: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _small(path: tuple) -> dict[str, Any]:
    """The lab inventory cut to the cluster the path is about (YAML parsing is most of a load)."""
    cluster = path[1] if path[0] == "clusters" else "mariadb" if path[:2] == ("hosts", "my1") else "pg"
    c = LAB_DOC["clusters"][cluster]
    keep = {m["host"] if isinstance(m, dict) else m for m in c["members"]} | {"dcs1", "mham"}
    if path[0] == "hosts":
        keep.add(path[1])
    small = {**LAB_DOC, "hosts": {h: v for h, v in LAB_DOC["hosts"].items() if h in keep},
             "clusters": {cluster: c}}
    small.pop("loaders", None)  # its hosts are cut
    return small


def inventory_with(path: tuple, value: Any) -> Inventory:
    p = _write(_set(_small(path), path, value))
    try:
        return load_inventory(p)
    finally:
        p.unlink()


def refused_in_one_line(path: tuple, value: Any) -> InputError:
    """The inventory with `value` at `path` is refused: InputError, one printable line naming the
    file and a line number."""
    with pytest.raises(InputError) as info:
        inventory_with(path, value)
    message = str(info.value)
    assert message.isprintable(), message
    assert re.match(r"^/\S+\.yaml:\d+: ", message), message
    return info.value


# -- 1. values that become options ---------------------------------------------------------------

# every inventory field whose value reaches a command as a name or a path (pg1 is a Patroni member,
# mha1 an MHA member with a socket; `repmgr` and `pgaf` hold those managers' names and paths)
NAME_AND_PATH_FIELDS = [
    ("clusters", "pg", "members", 0, "processes", "patroni", "pid_file"),
    ("clusters", "pg", "members", 0, "processes", "patroni", "exe"),
    ("clusters", "pg", "members", 0, "processes", "patroni", "comm"),
    ("clusters", "pg", "members", 0, "data_dir"),
    ("clusters", "pg", "members", 0, "service"),
    ("clusters", "pg", "members", 0, "logs", "postgres"),
    ("clusters", "mha", "members", 0, "db_socket"),
    ("clusters", "pg", "user"),
    ("clusters", "pg", "database"),
    ("clusters", "mha", "ha", "conf"),
    ("clusters", "mha", "ha", "log"),
    ("clusters", "mha", "ha", "pid_file"),
    ("clusters", "mha", "ha", "tools_dir"),
    ("clusters", "mha", "ha", "manager_host"),
    ("clusters", "repmgr", "ha", "config_file"),
    ("clusters", "repmgr", "ha", "os_user"),
    ("clusters", "repmgr", "ha", "user"),
    ("clusters", "pgaf", "ha", "formation"),
    ("clusters", "pgaf", "ha", "database"),
    ("hosts", "pg1", "user"),
    ("hosts", "my1", "jump"),
    ("lab", "bridge"),
]
OPTION_LIKE = st.builds(lambda dashes, word: dashes + word, st.sampled_from(["-", "--"]),
                        st.text(alphabet="abcdefghijklmnopqrstuvwxyz=/_.-0123456789", min_size=0, max_size=20))


@pytest.mark.parametrize("path", NAME_AND_PATH_FIELDS, ids=lambda p: ".".join(map(str, p)))
@FEW
@given(value=OPTION_LIKE)
def test_a_name_or_path_that_starts_with_a_dash_is_refused(path: tuple, value: str) -> None:
    refused_in_one_line(path, value)


# every host command that takes a value from the inventory takes it after `--`
# ("$J", "$rr", "$rd": the journal's and the relay's own directories, chaoskit's constants)
VALUE_COMMANDS = re.compile(r"\b(systemctl (?:stop|start|is-active)|head -n 1|cat|chown|id -[ug])((?: [^\s\"$|;]+)*) "
                            r"\"\$(?!J\b|\{?J/|rd\b|rr\b)")


def test_every_command_given_a_value_ends_its_options_with_a_double_dash() -> None:
    from chaoskit.faults import hostscript, process, relay

    bodies = [hostscript.LIB, *(getattr(m, n) for m in (process, relay) for n in dir(m)
                                if n.isupper() and isinstance(getattr(m, n), str))]
    offenders = [m.group(0) for body in bodies for m in VALUE_COMMANDS.finditer(body) if "--" not in m.group(2)]
    assert not offenders, offenders
    # and the ones we know of are there, so the pattern above cannot be matching nothing
    text = "\n".join(bodies)
    for needle in ('systemctl stop -- "$SERVICE"', 'systemctl start -- "$SERVICE"',
                   'systemctl is-active --quiet -- "$SERVICE"', 'head -n 1 -- "$1"', 'id -u -- "$PROXY_USER"'):
        assert needle in text


# -- 2. addresses whose IPv6 scope id is anything ------------------------------------------------

ADDRESS_FIELDS = [
    (("hosts", "pg1", "address"), "fe80::1%{}"),
    (("clusters", "pg", "members", 0, "db_address"), "fe80::1%{}"),
    (("clusters", "mariadb", "endpoints", 0), "[fe80::1%{}]:3306"),
    (("clusters", "pg", "ha", "dcs", "endpoints", 0), "[fe80::1%{}]:2379"),
    (("clusters", "pgaf", "ha", "monitor"), "[fe80::1%{}]:5440"),
    (("hosts", "my1", "jump"), "ckops@[fe80::1%{}]:22"),
    (("lab", "subnet"), "10.77.0.0%{}/24"),
]
VALID_SCOPE = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}|[0-9]{1,10})$")
SCOPES = st.one_of(st.text(min_size=1, max_size=40).filter(lambda s: "%" not in s and "/" not in s),
                   st.sampled_from(["eth0 -j ACCEPT", "-oProxyCommand=x", "a" * 100_000, "eth0\u00a0x", "ᛖᚱ",
                                    "lo", "ckbr0", "7"]))


@pytest.mark.parametrize("path,shape", ADDRESS_FIELDS, ids=lambda p: ".".join(map(str, p)) if isinstance(p, tuple)
                         else "")
@FEW
@given(scope=SCOPES)
def test_a_scope_id_is_an_interface_name_or_number(path: tuple, shape: str, scope: str) -> None:
    value = shape.format(scope)
    if VALID_SCOPE.fullmatch(scope) and path != ("lab", "subnet"):
        inv = inventory_with(path, value)  # accepted: then it holds only what an interface name holds
        node: Any = inv.evidence()
        for part in path:
            node = node[part]
        assert node == value and not re.search(r"\s|%-", node)
    else:
        refused_in_one_line(path, value)


def test_conninfo_is_built_by_the_driver_not_by_formatting() -> None:
    """No `host=` conninfo is written with an f-string outside the lab's own fixed recipes."""
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "chaoskit").rglob("*.py") if "/lab/" not in str(p)
                 for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"f[\"']host=\{", line)]
    assert not offenders, offenders


# -- 3. tags that lose production ----------------------------------------------------------------

PRODUCTION = st.builds(lambda word, flips: "".join(c.upper() if f else c for c, f in zip(word, flips, strict=False)),
                       st.sampled_from(["prod", "production", "prd", "live"]), st.lists(st.booleans(), min_size=10,
                                                                                         max_size=10))
TAG_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
OTHER_VALUES = st.sampled_from(["staging", "dev", "lab", "test", "qa"])


@MANY
@given(prod=PRODUCTION, key=st.sampled_from(["env", "environment"]), undo=OTHER_VALUES,
       extra=st.dictionaries(TAG_KEYS.filter(lambda k: k not in ("env", "environment")), OTHER_VALUES, max_size=3),
       level=st.sampled_from(["defaults", "host"]))
def test_production_set_at_any_level_stays_production(prod: str, key: str, undo: str, extra: dict[str, str],
                                                      level: str) -> None:
    doc = copy.deepcopy(_small(("hosts", "pg1")))
    doc["defaults"]["tags"] = {key: prod} if level == "defaults" else {"env": "lab"}
    doc["hosts"]["pg1"]["tags"] = {**extra, **({key: undo} if level == "defaults" else {key: prod})}
    p = _write(doc)
    try:
        inv = load_inventory(p)
    finally:
        p.unlink()
    host = inv.hosts["pg1"]
    assert host.is_production and host.tags[key] == prod.lower()
    assert all(host.tags[k] == v for k, v in extra.items())  # merged key by key, never replaced


@MANY
@given(group_tags=st.dictionaries(TAG_KEYS, OTHER_VALUES, max_size=3),
       host_tags=st.dictionaries(TAG_KEYS, OTHER_VALUES, max_size=3), prod=PRODUCTION)
def test_ansible_groups_merge_tags_key_by_key_and_keep_production(group_tags: dict[str, str],
                                                                  host_tags: dict[str, str], prod: str) -> None:
    doc = {"all": {"vars": {"chaoskit_tags": {"env": prod}}, "children": {"db": {
        "vars": {"chaoskit_tags": {**group_tags, "env": "staging"}},
        "hosts": {"a": {"ansible_host": "10.77.0.11", "chaoskit_tags": {**host_tags, "env": "dev"}}}}}}}
    p = _write(doc)
    try:
        inv = load_inventory(p)
    finally:
        p.unlink()
    tags = inv.hosts["a"].tags
    assert inv.hosts["a"].is_production and tags["env"] == prod.lower()
    for k, v in {**group_tags, **host_tags}.items():
        if k != "env":
            assert tags[k] == host_tags.get(k, v)  # the host's own value wins, else the group's


@FEW
@given(key=TAG_KEYS, flips=st.lists(st.booleans(), min_size=8, max_size=8).filter(any))
def test_tag_keys_that_differ_only_in_case_are_refused(key: str, flips: list[bool]) -> None:
    other = "".join(c.upper() if f else c for c, f in zip(key, flips + [False] * len(key), strict=False))
    assume(other != key)
    err = refused_in_one_line(("hosts", "pg1", "tags"), {key: "a", other: "b"})
    assert "differ only in case" in err.detail


# -- 4. normalised but not re-checked ------------------------------------------------------------

FOREIGN_DIGITS = st.text(alphabet="٠١٢٣٤٥٦٧٨٩०१२३४५६७८९０１２３４５６７８９", min_size=1, max_size=4)


@FEW
@given(digits=FOREIGN_DIGITS, unit=st.sampled_from(["mbit", "kbit", "bps"]), space=st.sampled_from(["", " ", "\u00a0"]))
def test_a_rate_is_checked_in_the_form_the_host_gets(digits: str, unit: str, space: str) -> None:
    for rate in (f"{digits}{space}{unit}", f"1{space or ' '}{unit}"):
        with pytest.raises(ValueError):
            parse_fault({"kind": "proxy", "target": "pg1", "cluster": "pg", "peers": ["pg2"], "peer_port": 5432,
                         "rate": rate, "duration": 5, "ttl": 30})
    spec = parse_fault({"kind": "proxy", "target": "pg1", "cluster": "pg", "peers": ["pg2"], "peer_port": 5432,
                        "rate": f"10{unit.upper()}", "duration": 5, "ttl": 30})
    assert spec.rate == f"10{unit}"  # type: ignore[attr-defined]


@FEW
@given(digits=FOREIGN_DIGITS, field=st.sampled_from([("clusters", "mariadb", "endpoints", 0),
                                                     ("clusters", "pgaf", "ha", "monitor"), ("hosts", "my1", "jump")]))
def test_a_port_is_ascii_digits(digits: str, field: tuple) -> None:
    refused_in_one_line(field, f"10.77.0.21:{digits}")


PLAYBOOK = (ROOT / "playbooks" / "pg-partition-primary.yaml").read_text()
LAB = load_inventory(ROOT / "inventories" / "lab.yaml")
FAULT_FIELDS = st.fixed_dictionaries({
    "kind": st.sampled_from(["partition", "proxy", "kill", "stop", "pause", "stress", "replica_stop"]),
    "target": st.sampled_from(["role:primary", "role:replica@all", "pg1", "dcs1", "my1", "client"]),
    "cluster": st.sampled_from(["pg", "mariadb", "pg-single"]),
}, optional={
    "peers": st.lists(st.sampled_from(["pg2", "role:replica", "all", "dcs1"]), min_size=1, max_size=2),
    "processes": st.lists(st.sampled_from(["patroni", "postgres", "mariadbd"]), min_size=1, max_size=2),
    "rate": st.sampled_from(["1mbit", "10 mbit", "１mbit", "5kbps"]),
    "delay_ms": st.sampled_from([0, 50]),
    "peer_port": st.sampled_from([5432, 3306]),
    "cpu_workers": st.sampled_from([0, 1]),
})


@MANY
@given(fields=FAULT_FIELDS)
# once drawn: a peer that is no host ('all', not 'all-hosts'), which the planner's target check refuses
@example(fields={"kind": "proxy", "target": "role:primary", "cluster": "pg", "rate": "1mbit", "peer_port": 5432,
                 "peers": ["all"]})
def test_validate_and_the_planner_agree_on_every_fault(fields: dict[str, Any]) -> None:
    """The same fault values given to `validate` (a playbook step) and to the planner (every host
    the fault could land on, roles aside): validate accepts exactly what the planner can plan."""
    fault = {**fields, "duration": "5s"}
    try:
        spec = parse_fault({**fault, "ttl": 60})
    except ValueError:
        spec = None
    planner_ok = spec is not None
    if spec is not None:
        fm = FaultManager(LAB)
        fm.roles = lambda c: ({m.host: "primary" for m in c.members}, set())  # type: ignore[assignment]
        base = spec.target.partition("@")[0]
        cluster = LAB.clusters[spec.cluster] if spec.cluster else None
        hosts = [m.host for m in cluster.members] if base.startswith("role:") and cluster else [base]
        try:
            if base != "client":
                validate_target(spec, LAB)  # what `plan` checks first when it resolves the target itself
                for host in hosts:
                    fm.plan(spec, fault_id="0" * 12, hosts=[host])
        except InputError as exc:
            planner_ok = exc.source == "topology"  # a live fact (a role nobody has now) is not input
        except ChaoskitError:
            planner_ok = False
        finally:
            fm.close()
    doc = yaml.safe_load(PLAYBOOK)
    doc["cluster"] = fields["cluster"]
    doc["steps"] = [{"at": doc["steps"][0]["at"], "fault": fault}]
    p = _write(doc)
    try:
        load_playbook(p, LAB)
        validate_ok = True
    except InputError as exc:
        validate_ok = False
        assert str(exc).isprintable() and str(exc).startswith(str(p))
    finally:
        p.unlink()
    if fields["target"] == "client":  # a client-link fault is planned by the drill's link, not on a host
        return
    assert validate_ok == planner_ok, (fields, validate_ok, planner_ok)


# -- 5. messages that carry control characters ---------------------------------------------------

CONTROLS = st.text(alphabet=st.characters(categories=["Cc", "Cf", "Zl", "Zp"]), min_size=1, max_size=4)


@MANY
@given(before=st.text(alphabet="abc", max_size=3), bad=CONTROLS, where=st.sampled_from(["key", "host", "value"]))
def test_a_refusal_quoting_input_is_one_escaped_line(before: str, bad: str, where: str) -> None:
    doc = copy.deepcopy(_small(("hosts", "pg1")))
    text = before + bad
    if where == "key":
        doc["defaults"][text] = 1
    elif where == "host":
        doc["hosts"][text] = {"address": "10.77.0.99"}
    else:
        doc["clusters"]["pg"]["members"][0]["data_dir"] = "/x" + text
    p = _write(doc)
    try:
        with pytest.raises(InputError) as info:
            load_inventory(p)
    except yaml.YAMLError:
        return  # not a document YAML can hold
    finally:
        p.unlink()
    assert str(info.value).isprintable(), str(info.value)


@MANY
@given(text=st.text(max_size=30))
def test_escaped_is_printable_one_line_and_idempotent(text: str) -> None:
    shown = escaped(text)
    assert shown.isprintable() and "\n" not in shown
    assert escaped(shown) == shown
    if text.isprintable():
        assert shown == text


@MANY
@given(text=st.text(max_size=30))
def test_summary_and_report_print_values_escaped(text: str) -> None:
    md = markdown_env().from_string("said: {{ v }}").render(v=text)
    assert md.isprintable(), md
    html = template_env().from_string("<p>{{ v }}</p>").render(v=text)
    assert all(line.isprintable() for line in html.split("\n")), html


# -- 6. secrets that slip past the reference rule ------------------------------------------------

CREDENTIAL_FIELDS = [
    ("clusters", "pg", "password"),
    ("clusters", "pg", "ha", "api", "password"),
    ("clusters", "pgaf", "ha", "password"),
    ("clusters", "repmgr", "ha", "password"),
    ("clusters", "mha", "ha", "repl_password"),
    ("clusters", "galera", "ha", "sst_password"),  # a field a manager does not have, named as a secret
    ("clusters", "mha", "ha", "api_token"),
]


@pytest.mark.parametrize("path", CREDENTIAL_FIELDS, ids=lambda p: ".".join(map(str, p)))
@FEW
@given(secret=st.one_of(st.text(alphabet="abcXYZ0123!@#", min_size=1, max_size=12), st.integers(0, 10**6)))
def test_every_credential_takes_a_reference_only(path: tuple, secret: object) -> None:
    err = refused_in_one_line(path, secret)
    assert str(secret) not in err.detail or len(str(secret)) < 3


DSNS = {
    "pg": ["host=a sslpassword={s}", "postgresql://u:{s}@h/db", "host=a password={s}", "host=a passfile=/x{s}"],
    "mariadb": ["mysql://u:{s}@h:3306/db", "host=a password={s}", "host=a pwd={s}"],
}


@pytest.mark.parametrize("cluster,shape", [(c, s) for c, shapes in DSNS.items() for s in shapes])
@FEW
@given(secret=st.text(alphabet="abcXYZ0123", min_size=1, max_size=12))
def test_a_dsn_never_carries_a_password(cluster: str, shape: str, secret: str) -> None:
    refused_in_one_line(("clusters", cluster, "dsn"), shape.format(s=secret))


def test_the_evidence_copy_of_the_inventory_is_an_allow_list() -> None:
    doc = copy.deepcopy(LAB_DOC)
    doc["clusters"]["pg"]["password"] = {"env": "CK_PG_PASSWORD"}
    doc["clusters"]["pg"]["members"][0]["processes"]["patroni"]["start"] = "PGPASSWORD=hunter2 patroni /x.yml"
    doc["clusters"]["mha"]["ha"]["start"] = "MYSQL_PWD=hunter3 masterha_manager"
    doc["hosts"]["dcs1"]["processes"] = {"etcd": {"pid_file": "/run/etcd.pid", "start": "ETCDCTL_PASSWORD=hunter4 e"}}
    p = _write(doc)
    try:
        inv = load_inventory(p)
    finally:
        p.unlink()
    text = json.dumps(inv.evidence())
    assert "hunter2" not in text and "hunter3" not in text and "hunter4" not in text
    assert "env:CK_PG_PASSWORD" in text
    ev = inv.evidence()
    assert set(ev["hosts"]["pg1"]) == {"name", "address", "port", "user", "jump", "become", "become_user",
                                       "strict_host_keys", "tags", "processes", "logs", "metrics"}
    assert ev["hosts"]["pg1"]["metrics"] == {"source": "cgroup", "cgroup": "chaoskit-lab/pg1"}
    assert ev["hosts"]["dcs1"]["processes"]["etcd"] == {"pid_file": "/run/etcd.pid", "unit": None, "comm": None,
                                                        "exe": None, "start": "given", "stop": None}
    assert ev["clusters"]["pg"]["members"][0]["processes"]["patroni"]["start"] == "given"
    assert ev["clusters"]["mha"]["ha"]["start"] == "given" and ev["clusters"]["mha"]["ha"]["manager_host"] == "mham"


# -- 7. computed before it is checked ------------------------------------------------------------

JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=False),
                                 st.text(max_size=8)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner,
                                                                                            max_size=3)),
                       max_leaves=6)


@MANY
@given(workers=JSONISH, total=st.one_of(st.none(), JSONISH))
def test_group_workers_of_any_type_end_in_one_line(workers: object, total: object) -> None:
    doc = yaml.safe_load(PLAYBOOK)
    doc["load"] = {"groups": [{"profile": "deadline", "workers": workers}, {"profile": "pool", "workers": 2}]}
    if total is not None:
        doc["load"]["workers"] = total
    p = _write(doc)
    try:
        load_playbook(p, LAB)
    except InputError as exc:
        assert str(exc).isprintable()
    finally:
        p.unlink()


@MANY
@given(subnet=st.one_of(JSONISH, st.from_regex(r"\A[0-9.]{1,20}/[0-9]{1,2}\Z")))
def test_a_lab_subnet_of_any_shape_ends_in_one_line(subnet: object) -> None:
    try:
        inv = inventory_with(("lab", "subnet"), subnet)
    except InputError as exc:
        assert str(exc).isprintable()
    else:
        import ipaddress

        assert ipaddress.ip_network(inv.lab.subnet, strict=False).version == 4  # type: ignore[union-attr]

