"""YAML with line numbers, so every input error can name the file, the line and the field.

A document is loaded into plain Python data plus a `LineMap` from key paths to 1-based lines.
Loaders that reshape the data (the Ansible inventory shape) carry the lines along, and
`raise_validation` turns the first pydantic error into one `InputError` line.
"""

from __future__ import annotations

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

    def error(self, path: Sequence[str | int], message: str) -> InputError:
        return InputError(message, source=self.source, line=self.lines.line(path),
                          field=dotted(path) or None)


def dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _build(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError("YAML merge keys (<<) are not supported", source=source,
                                 line=key_node.start_mark.line + 1, field=dotted(path) or None)
            key = _scalar(key_node)
            if key in out:
                raise InputError(f"duplicate key {key!r}", source=source,
                                 line=key_node.start_mark.line + 1, field=dotted((*path, key)))
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _build(value_node, (*path, key), lines, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines, source) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> SourceDoc:
    """Load one YAML file; syntax errors become an InputError naming file and line."""
    p = Path(path)
    source = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", source=source) from None
    return parse_yaml(text, source)


def parse_yaml(text: str, source: str) -> SourceDoc:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(f"invalid YAML: {exc.problem or exc.context}", source=source,
                         line=mark.line + 1 if mark else None) from None
    if node is None:
        raise InputError("empty document", source=source, line=1)
    lines: dict[Path_, int] = {}
    data = _build(node, (), lines, source)
    return SourceDoc(source, data, LineMap(lines))


def raise_validation(exc: ValidationError, doc: SourceDoc, prefix: Path_ = (),
                     lines: LineMap | None = None) -> InputError:
    """The first pydantic error as one line: file:line: field: message."""
    err = exc.errors(include_url=False)[0]
    loc = [part for part in err["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
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
