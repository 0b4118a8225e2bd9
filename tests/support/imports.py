"""The project's import graph, read from its source with ``ast``: every ``import`` and ``from ... import``
of a project module, at any depth (function-local and ``TYPE_CHECKING`` imports included: they tie
modules together as much as any other)."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["PACKAGES", "ROOT", "cycles", "import_graph", "module_path"]

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("conformance", "proxy", "backend", "schemas")


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def module_path(name: str, modules: dict[str, Path]) -> str:
    """A module's file as a path from the repository root (``proxy/app.py``)."""
    return str(modules[name].relative_to(ROOT))


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` names, or the package it is in; None outside the project."""
    while name and name not in modules:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(t for alias in node.names if (t := _resolve(alias.name, modules)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                whole = f"{source}.{alias.name}"
                target = whole if whole in modules else _resolve(source, modules)
                if target:
                    found.add(target)
    found.discard(name)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, Path]]:
    """Each project module (dotted name) with the project modules it imports, and each module's file."""
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}, modules


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of imports: each strongly connected set of two or more modules (Tarjan's algorithm,
    without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
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
                circle = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    circle.append(member)
                    if member == node:
                        break
                if len(circle) > 1:
                    found.append(sorted(circle))
    return found
