"""The package's imports against the layers the README's "Layout" section lists: no import circle
between modules (imports inside functions count: they hide a circle, they do not remove it), no
import from a room to a room of a higher layer, and every room in a layer. Read from the source
with ast, nothing imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chaoskit"

# (importing module, imported module): why this climb stays. Empty today; an entry needs its reason.
ALLOWED_CLIMBS: dict[tuple[str, str], str] = {}


def readme_layers(text: str) -> dict[str, int]:
    """Room -> layer, from the README's "- L<n> ...: `room`, ..." lines (an item may wrap onto
    indented lines; rooms are the backticked names before any parenthesis)."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    items: list[tuple[int, str]] = []
    for line in section.splitlines():
        m = re.match(r"^- L(\d+) (.*)$", line)
        if m:
            items.append((int(m.group(1)), m.group(2)))
        elif items and line.startswith("  ") and line.strip():
            items[-1] = (items[-1][0], items[-1][1] + " " + line.strip())
    layers: dict[str, int] = {}
    for level, body in items:
        depth, kept = 0, []
        for ch in body:  # drop what is said in parentheses: it may name files, not rooms
            depth += ch == "("
            if depth == 0:
                kept.append(ch)
            depth -= ch == ")" and depth > 0
        for room in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", "".join(kept)):
            assert room not in layers, f"README Layout names {room} twice"
            layers[room] = level
    return layers


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules this module imports (`from pkg import sub` is the submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "chaoskit"


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def climbs(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    out = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            a, b = room_of(module), room_of(target)
            if a != b and layers[b] > layers[a] and (module, target) not in ALLOWED_CLIMBS:
                out.append(f"{module} (L{layers[a]} {a}) imports {target} (L{layers[b]} {b})")
    return out


def test_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_every_room_is_in_a_layer_and_no_import_climbs() -> None:
    layers = readme_layers((ROOT / "README.md").read_text())
    graph = import_graph()
    rooms = {room_of(m) for m in graph}
    assert sorted(rooms - set(layers)) == [], "rooms missing from README Layout"
    assert sorted(set(layers) - rooms) == [], "README Layout names rooms that do not exist"
    assert climbs(graph, layers) == []
    for (module, target), why in ALLOWED_CLIMBS.items():  # an allowed climb still exists and says why
        assert target in graph[module] and len(why) > 20, (module, target)


def test_the_guard_sees_circles_and_climbs_and_reads_wrapped_layers() -> None:
    """The checks on a made-up graph: a circle through three modules (one of them an import inside
    a function would add just the same), a climb from a low room, and a README item that wraps."""
    graph = {"chaoskit.a.x": {"chaoskit.b.y"}, "chaoskit.b.y": {"chaoskit.c"}, "chaoskit.c": {"chaoskit.a.x"},
             "chaoskit.d": set()}
    assert circles(graph) == [["chaoskit.a.x", "chaoskit.b.y", "chaoskit.c"]]
    assert circles({"chaoskit.a.x": {"chaoskit.b.y"}, "chaoskit.b.y": set()}) == []
    text = "x\n## Layout\n\n- L0 base: `a`, `b` (files: `x.py`),\n  `c`\n- L1 top: `d`\n\n## Next\n- L2 `e`\n"
    layers = readme_layers(text)
    assert layers == {"a": 0, "b": 0, "c": 0, "d": 1}
    assert climbs({"chaoskit.a.x": {"chaoskit.d"}, "chaoskit.d": {"chaoskit.c"}}, layers) == [
        "chaoskit.a.x (L0 a) imports chaoskit.d (L1 d)"]


def test_imports_resolve_submodules_relative_imports_and_lazy_ones(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from chaoskit.inventory import tags, Inventory\nfrom . import sibling\n"
                   "def f():\n    from chaoskit.db.base import Driver\n")
    known = {"chaoskit.inventory", "chaoskit.inventory.tags", "chaoskit.db.base", "chaoskit.room.sibling",
             "chaoskit.room.m"}
    assert imports_of("chaoskit.room.m", src, known) == {
        "chaoskit.inventory.tags", "chaoskit.inventory", "chaoskit.room.sibling", "chaoskit.db.base"}
