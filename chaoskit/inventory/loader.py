"""Load an inventory file in chaoskit's own shape or in Ansible's YAML inventory shape.

Own shape::

    defaults: {user: ops, key_file: ~/.ssh/id_ed25519, become: true}
    hosts:   {pg1: {address: 10.0.0.11}, ...}
    clusters: {pg: {engine: postgres, ha: {kind: patroni}, members: [pg1, pg2], user: postgres,
                    password: {env: PGPASSWORD}}}

Ansible shape: ``all: {vars, hosts, children}``; ``ansible_host/port/user``,
``ansible_ssh_private_key_file``, ``ansible_become*`` and ``ProxyJump`` in
``ansible_ssh_common_args`` are understood; a group whose vars hold ``chaoskit_cluster``
becomes a cluster whose members are that group's hosts. Other variables are the user's own
and are ignored.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from chaoskit.errors import InputError
from chaoskit.inventory import tags as tag_rules
from chaoskit.inventory.models import Inventory
from chaoskit.yamlsrc import LineMap, SourceDoc, load_yaml, raise_validation

_OWN_TOP = {"defaults", "hosts", "clusters", "lab", "loaders"}
_PATH_FIELDS = ("key_file", "known_hosts")


def load_inventory(path: str | Path) -> Inventory:
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "an inventory is a mapping (hosts/clusters, or Ansible's all:)")
    if "all" in doc.data:
        data, lines = _from_ansible(doc)
    else:
        unknown = sorted(set(doc.data) - _OWN_TOP)
        if unknown:
            raise doc.error((unknown[0],), "unknown field (expected defaults, hosts, clusters, lab, loaders or all)")
        data, lines = _from_own(doc)
        for key in ("lab", "loaders"):
            if key in doc.data:
                data[key] = doc.data[key]
    base = Path(path).resolve().parent
    for host in data.get("hosts", {}).values():
        for key in _PATH_FIELDS:
            if isinstance(host.get(key), str):
                host[key] = _resolve_path(host[key], base)
    try:
        inv = Inventory.model_validate({"source": str(path), "sha256": doc.sha256, **data})
    except ValidationError as exc:
        raise raise_validation(exc, doc, lines=lines) from None
    _check_references(inv, doc, lines)
    return inv


def _merged_tags(doc: SourceDoc, levels: list[tuple[object, tuple]]) -> dict[Any, Any]:
    try:
        return tag_rules.merge(levels)
    except tag_rules.TagError as exc:
        raise doc.error(exc.path, str(exc)) from None


def _resolve_path(value: str, base: Path) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)


def _from_own(doc: SourceDoc) -> tuple[dict[str, Any], LineMap]:
    data = doc.data
    lines = LineMap(doc.lines.lines)
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise doc.error(("defaults",), "expected a mapping of host fields")
    hosts_in = data.get("hosts")
    if not isinstance(hosts_in, dict) or not hosts_in:
        raise doc.error(("hosts",), "expected a non-empty mapping of host name -> host")
    hosts: dict[str, Any] = {}
    for name, fields in hosts_in.items():
        fields = fields or {}
        if not isinstance(fields, dict):
            raise doc.error(("hosts", name), "expected a mapping of host fields")
        for key in defaults:
            if key not in fields:
                lines.lines[("hosts", name, key)] = doc.lines.line(("defaults", key)) or 1
        hosts[name] = {**defaults, **fields, "name": name}
        if "tags" in defaults or "tags" in fields:
            hosts[name]["tags"] = _merged_tags(doc, [(defaults.get("tags"), ("defaults", "tags")),
                                                     (fields.get("tags"), ("hosts", name, "tags"))])
    clusters: dict[str, Any] = {}
    clusters_in = data.get("clusters") or {}
    if not isinstance(clusters_in, dict):
        raise doc.error(("clusters",), "expected a mapping of cluster name -> cluster")
    for name, fields in clusters_in.items():
        if not isinstance(fields, dict):
            raise doc.error(("clusters", name), "expected a mapping of cluster fields")
        clusters[name] = {**fields, "name": name}
    return {"hosts": hosts, "clusters": clusters}, lines


_ANSIBLE_HOST_VARS = {
    "ansible_host": "address",
    "ansible_port": "port",
    "ansible_user": "user",
    "ansible_ssh_private_key_file": "key_file",
    "ansible_become": "become",
    "ansible_become_method": "become_method",
    "ansible_become_user": "become_user",
    "chaoskit_tags": "tags",
    "chaoskit_known_hosts": "known_hosts",
    "chaoskit_processes": "processes",  # a host's own services (etcd, HAProxy, a monitor)
    "chaoskit_logs": "logs",
    "chaoskit_metrics": "metrics",  # where the host metrics are read (proc, a cgroup, none)
}


def _from_ansible(doc: SourceDoc) -> tuple[dict[str, Any], LineMap]:
    """Flatten groups into hosts with merged vars (all < parent group < child group < host)."""
    lines = LineMap()
    host_group_vars: dict[str, dict[str, tuple[Any, tuple]]] = {}
    host_own_vars: dict[str, dict[str, tuple[Any, tuple]]] = {}
    host_tag_levels: dict[str, tuple[list[tuple[object, tuple]], list[tuple[object, tuple]]]] = {}
    group_members: dict[str, list[str]] = {}
    cluster_defs: dict[str, tuple[Any, tuple]] = {}

    def walk(group: str, node: Any, path: tuple, inherited: dict[str, tuple[Any, tuple]],
             tag_levels: list[tuple[object, tuple]]) -> list[str]:
        if node is None:
            node = {}
        if not isinstance(node, dict):
            raise doc.error(path, "expected a group mapping (hosts, children, vars)")
        extra = sorted(set(node) - {"hosts", "children", "vars"})
        if extra:
            raise doc.error((*path, extra[0]), "unknown group key (expected hosts, children or vars)")
        gvars = node.get("vars") or {}
        if not isinstance(gvars, dict):
            raise doc.error((*path, "vars"), "expected a mapping")
        merged = {**inherited, **{k: (v, (*path, "vars", k)) for k, v in gvars.items()}}
        if "chaoskit_tags" in gvars:
            tag_levels = [*tag_levels, (gvars["chaoskit_tags"], (*path, "vars", "chaoskit_tags"))]
        members: list[str] = []
        hosts = node.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise doc.error((*path, "hosts"), "expected a mapping of host name -> vars")
        for hname, hv in hosts.items():
            hv = hv or {}
            if not isinstance(hv, dict):
                raise doc.error((*path, "hosts", hname), "expected a mapping of host vars")
            host_group_vars.setdefault(hname, {}).update(merged)
            host_own_vars.setdefault(hname, {}).update(
                {k: (v, (*path, "hosts", hname, k)) for k, v in hv.items()})
            levels = host_tag_levels.setdefault(hname, ([], []))  # (group levels, the host's own)
            levels[0].extend(lv for lv in tag_levels if lv not in levels[0])
            if "chaoskit_tags" in hv:
                levels[1].append((hv["chaoskit_tags"], (*path, "hosts", hname, "chaoskit_tags")))
            lines.lines.setdefault(("hosts", hname), doc.lines.line((*path, "hosts", hname)) or 1)
            members.append(hname)
        children = node.get("children") or {}
        if not isinstance(children, dict):
            raise doc.error((*path, "children"), "expected a mapping of group name -> group")
        for cname, cnode in children.items():
            members.extend(walk(cname, cnode, (*path, "children", cname), merged, tag_levels))
        unique = list(dict.fromkeys(members))
        group_members[group] = unique
        if "chaoskit_cluster" in gvars:
            cluster_defs[group] = (gvars["chaoskit_cluster"], (*path, "vars", "chaoskit_cluster"))
        return unique

    walk("all", doc.data["all"], ("all",), {}, [])
    extra_top = sorted(set(doc.data) - {"all"})
    if extra_top:
        raise doc.error((extra_top[0],), "Ansible shape: put every group under all.children")

    hosts: dict[str, Any] = {}
    for hname, gvars in host_group_vars.items():
        hvars = {**gvars, **host_own_vars[hname]}
        out: dict[str, Any] = {"name": hname, "address": hname}
        for var, (value, src) in hvars.items():
            if var in _ANSIBLE_HOST_VARS:
                field = _ANSIBLE_HOST_VARS[var]
                out[field] = value
                lines.lines[("hosts", hname, field)] = doc.lines.line(src) or 1
            elif var == "ansible_ssh_common_args":
                for field, parsed in _parse_ssh_args(str(value), doc, src).items():
                    out[field] = parsed
                    lines.lines[("hosts", hname, field)] = doc.lines.line(src) or 1
        group_levels, own_levels = host_tag_levels.get(hname, ([], []))
        if group_levels or own_levels:
            out["tags"] = _merged_tags(doc, group_levels + own_levels)
        hosts[hname] = out

    clusters: dict[str, Any] = {}
    for group, (value, src) in cluster_defs.items():
        if not isinstance(value, dict):
            raise doc.error(src, "chaoskit_cluster must be a mapping of cluster fields")
        name = str(value.get("name", group))
        fields = {k: v for k, v in value.items() if k != "name"}
        fields.setdefault("members", group_members[group])
        clusters[name] = {**fields, "name": name}
        lines.copy_subtree(src, ("clusters", name), doc.lines)
    return {"hosts": hosts, "clusters": clusters}, lines


def _parse_ssh_args(args: str, doc: SourceDoc, src: tuple) -> dict[str, Any]:
    """The ssh options chaoskit honours from ansible_ssh_common_args."""
    out: dict[str, Any] = {}
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise doc.error(src, f"cannot parse ssh args: {exc}") from None
    options: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-J", "-o") and i + 1 < len(words):
            options.append(("ProxyJump=" + words[i + 1]) if w == "-J" else words[i + 1])
            i += 2
            continue
        if w.startswith("-o") and len(w) > 2:
            options.append(w[2:])
        i += 1
    for opt in options:
        key, _, value = opt.replace(" ", "=", 1).partition("=")
        key = key.strip().lower()
        if key == "proxyjump":
            out["jump"] = value.strip()
        elif key == "userknownhostsfile":
            out["known_hosts"] = value.strip()
        elif key == "stricthostkeychecking":
            out["strict_host_keys"] = value.strip().lower() not in ("no", "off", "accept-new")
    return out


def _check_references(inv: Inventory, doc: SourceDoc, lines: LineMap) -> None:
    for i, name in enumerate(inv.loaders.hosts if inv.loaders else ()):
        if name not in inv.hosts:
            raise InputError(f"loader host {name!r} is not in the inventory's hosts", source=doc.source,
                             line=lines.line(("loaders", "hosts", i)) or lines.line(("loaders", "hosts")),
                             field=f"loaders.hosts[{i}]")
    for hname, host in inv.hosts.items():
        if host.jump and "@" not in host.jump and ":" not in host.jump and host.jump not in inv.hosts:
            raise InputError(f"jump host {host.jump!r} is not in the inventory", source=doc.source,
                             line=lines.line(("hosts", hname, "jump")), field=f"hosts.{hname}.jump")
        if host.jump == hname:
            raise InputError("a host cannot be its own jump host", source=doc.source,
                             line=lines.line(("hosts", hname, "jump")), field=f"hosts.{hname}.jump")
    # (host, process) -> where it was declared first, and how; the same process may be listed by
    # two clusters of the same members (a route), but never declared two ways
    declared = {(h, p): (f"hosts.{h}.processes", ref) for h, host in inv.hosts.items()
                for p, ref in host.processes.items()}
    for cname, cluster in inv.clusters.items():
        for i, member in enumerate(cluster.members):
            if member.host not in inv.hosts:
                raise InputError(f"member host {member.host!r} is not in the inventory",
                                 source=doc.source, line=lines.line(("clusters", cname, "members", i)),
                                 field=f"clusters.{cname}.members[{i}]")
            for pname, ref in member.processes.items():
                here = f"clusters.{cname}.members[{i}].processes"
                first, first_ref = declared.setdefault((member.host, pname), (here, ref))
                if first_ref != ref or first.startswith("hosts."):  # a fault naming it could not say which
                    raise InputError(f"process {pname!r} of host {member.host} is already declared in {first}; "
                                     "declare each process of a host once", source=doc.source,
                                     line=lines.line(("clusters", cname, "members", i, "processes", pname)),
                                     field=f"{here}.{pname}")
    members = {m.host: cname for cname, cluster in inv.clusters.items() for m in cluster.members}
    for cname, cluster in inv.clusters.items():
        if cluster.backup is None:
            continue
        b = cluster.backup
        where = ("clusters", cname, "backup")
        if b.repository.host not in inv.hosts:
            raise InputError(f"backup repository host {b.repository.host!r} is not in the inventory", source=doc.source,
                             line=lines.line((*where, "repository", "host")) or lines.line(where),
                             field=f"clusters.{cname}.backup.repository.host")
        if b.restore_to is None:
            continue
        target = b.restore_to.host
        line = lines.line((*where, "restore_to", "host")) or lines.line(where)
        field = f"clusters.{cname}.backup.restore_to.host"
        if target not in inv.hosts:
            raise InputError(f"restore target host {target!r} is not in the inventory", source=doc.source, line=line,
                             field=field)
        if target in members:
            raise InputError(f"restore target {target} is a member of cluster {members[target]}: a restore "
                             "overwrites its data directory; name a host of no cluster", source=doc.source, line=line,
                             field=field)
        if b.restore_to.process not in inv.processes_on(target) or \
                not inv.processes_on(target)[b.restore_to.process].start:
            raise InputError(f"restore target {target} needs processes.{b.restore_to.process} with a start command "
                             "(what starts the restored server)", source=doc.source, line=line, field=field)
