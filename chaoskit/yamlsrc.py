"""YAML with line numbers, so every input error can name the file, the line and the field.

A document is loaded into plain Python data plus a `LineMap` from key paths to 1-based lines.
Loaders that reshape the data (the Ansible inventory shape) carry the lines along, and
`raise_validation` turns the first pydantic error into one `InputError` line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from chaoskit.errors import InputError

Path_ = tuple[str | int, ...]


class LineMap:
    """Key path -> line; a missing path falls back to its nearest ancestor's line."""

    def __init__(self, lines: dict[Path_, int] | None = None) -> None:
        self.lines: dict[Path_, int] = dict(lines or {})

    def line(self, path: Sequence[str | int]) -> int | None:
        p = tuple(path)
        while True:
            if p in self.lines:
                return self.lines[p]
            if not p:
                return None
            p = p[:-1]

    def copy_subtree(self, src: Path_, dst: Path_, source: LineMap) -> None:
        for path, line in source.lines.items():
            if path[: len(src)] == src:
                self.lines[dst + path[len(src):]] = line


class SourceDoc:
    """A loaded YAML document: its data, its lines, and the file it came from."""

    def __init__(self, source: str, data: Any, lines: LineMap) -> None:
        self.source = source
        self.data = data
        self.lines = lines
        self.sha256 = ""  # of the bytes actually parsed (the evidence hashes these, not a re-read)
        self.raw = b""

    def error(self, path: Sequence[str | int], message: str) -> InputError:
        return InputError(message, source=self.source, line=self.lines.line(path),
                          field=dotted(path) or None)


def dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


MAX_BYTES = 1024 * 1024  # an inventory or playbook is a few KB; anything near this is not one
MAX_NODES = 50_000  # after alias expansion: a 320-byte "billion laughs" file must not take minutes
MAX_DEPTH = 64


class _Budget:
    """Nodes built so far, and one constructor for every scalar of the document."""

    def __init__(self) -> None:
        self.nodes = 0
        self.loader = yaml.SafeLoader("")

    def close(self) -> None:
        self.loader.dispose()


def _build(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str, budget: _Budget) -> Any:
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise InputError(f"document too large once aliases are expanded (more than {MAX_NODES:,} nodes)",
                         source=source, line=node.start_mark.line + 1)
    if len(path) > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source, line=node.start_mark.line + 1)
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError("YAML merge keys (<<) are not supported", source=source,
                                 line=key_node.start_mark.line + 1, field=dotted(path) or None)
            key = _scalar(key_node, source, budget)
            if isinstance(key, list | dict) or key is None:
                raise InputError("a mapping key must be a plain value", source=source,
                                 line=key_node.start_mark.line + 1, field=dotted(path) or None)
            if key in out:
                raise InputError(f"duplicate key {str(key)[:60]!r}", source=source,
                                 line=key_node.start_mark.line + 1, field=dotted((*path, key)))
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _build(value_node, (*path, key), lines, source, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines, source, budget) for i, item in enumerate(node.value)]
    return _scalar(node, source, budget)


_PLAIN_TAGS = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
               "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp"}


def _scalar(node: yaml.Node, source: str, budget: _Budget) -> Any:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        return [] if isinstance(node, yaml.SequenceNode) else {}  # a complex key: refused by the caller
    if node.tag not in _PLAIN_TAGS:
        tag = node.tag.rsplit(":", 1)[-1] if node.tag.startswith("tag:yaml.org") else node.tag
        hint = " (decrypt vaulted values first, or reference secrets with {env: ...} / {file: ...})" \
            if "vault" in node.tag else ""
        raise InputError(f"YAML tag {tag[:40]} is not supported{hint}", source=source, line=line)
    try:
        value = budget.loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise InputError(f"invalid value: {str(exc).splitlines()[0][:120]}", source=source, line=line) from None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        raise InputError("number too large", source=source, line=line)
    if not isinstance(value, str | int | float | bool | type(None)):
        value = str(value)  # a timestamp: keep its text
    return value


def load_yaml(path: str | Path) -> SourceDoc:
    """Load one YAML file; every error becomes an InputError naming file and line."""
    p = Path(path)
    source = str(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise InputError("file not found", source=source) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", source=source) from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"larger than {MAX_BYTES // 1024} KiB: not an inventory or playbook", source=source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError("not UTF-8 text", source=source, line=line) from None
    doc = parse_yaml(text, source)
    doc.sha256 = hashlib.sha256(raw).hexdigest()
    doc.raw = raw
    return doc


def _check_depth(text: str, source: str) -> None:
    """The composer recurses per nesting level (a line of 2,000 `[` took half a second to fail);
    the parser's event stream does not, so depth is bounded on events first."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else None
                raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source, line=line)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_yaml(text: str, source: str) -> SourceDoc:
    try:
        _check_depth(text, source)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(f"invalid YAML: {exc.problem or exc.context}", source=source,
                         line=mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise InputError(f"invalid YAML: unacceptable character #x{exc.character:04x}"
                         if isinstance(exc.character, int) else "invalid YAML: unacceptable character",
                         source=source, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {str(exc).splitlines()[0][:120]}", source=source) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source) from None
    if node is None:
        raise InputError("empty document", source=source, line=1)
    lines: dict[Path_, int] = {}
    budget = _Budget()
    try:
        data = _build(node, (), lines, source, budget)
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source) from None
    finally:
        budget.close()
    return SourceDoc(source, data, LineMap(lines))


def raise_validation(exc: ValidationError, doc: SourceDoc, prefix: Path_ = (),
                     lines: LineMap | None = None, fault_tags: frozenset[str] = frozenset()) -> InputError:
    """The first pydantic error as one line: file:line: field: message. `fault_tags` are the tags of
    the discriminated union under `fault`/`faults` (the fault kinds: the caller knows them)."""
    err = exc.errors(include_url=False)[0]
    loc = [part for part in err["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
    # a discriminated union (a fault's kind) puts its tag into the location: drop it
    loc = [part for i, part in enumerate(loc) if not (i and loc[i - 1] in ("fault", "faults") and part in fault_tags)]
    path = (*prefix, *loc)
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "field required"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    line_map = lines or doc.lines
    return InputError(msg, source=doc.source, line=line_map.line(path), field=dotted(path) or None)
