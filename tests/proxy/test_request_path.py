"""docs/request-path.md draws the request path as one list of hops; the code keeps to it: no module of
the proxy imports a module of a hop above its own (a lower layer never calls back into a higher one)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_HOP = re.compile(r"^(\d+)\. ")
_MODULE = re.compile(r"`(proxy/[\w/]+(?:\.py|/))`")


def _hops() -> dict[str, int]:
    """Each module or package the list names, with its hop's number."""
    text = (ROOT / "docs" / "request-path.md").read_text()
    section = text.split("## Hops", 1)[1].split("\n## ", 1)[0]
    hops: dict[str, int] = {}
    number = 0
    for line in section.splitlines():
        if match := _HOP.match(line):
            number = int(match.group(1))
        elif not line.startswith("   "):  # the item ends where its indented lines do
            number = 0
        if number:
            for name in _MODULE.findall(line):
                hops[name] = number
    return hops


def _hop_of(path: str, hops: dict[str, int]) -> int | None:
    if path in hops:
        return hops[path]
    package = path.rsplit("/", 1)[0] + "/"
    return hops.get(package)


def _imports(path: Path) -> list[str]:
    """The proxy modules ``path`` imports, as paths from the repository root."""
    here = path.relative_to(ROOT).parent.parts
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = list(here[: len(here) - node.level + 1])
        elif node.module and node.module.split(".")[0] == "proxy":
            base = []
        else:
            continue
        module = [*base, *(node.module or "").split(".")] if node.module else base
        names = [module] if node.module else [[*module, alias.name] for alias in node.names]
        for parts in names:
            target = "/".join(part for part in parts if part)
            if (ROOT / f"{target}.py").exists():
                found.append(f"{target}.py")
            elif (ROOT / target).is_dir():
                found.append(f"{target}/")
    return found


def test_the_documented_hops_name_the_modules_of_the_request_path() -> None:
    hops = _hops()
    assert hops["proxy/app.py"] == 1
    assert hops["proxy/source.py"] < hops["proxy/adapters/"] < hops["proxy/upstream.py"]
    assert all((ROOT / name).exists() for name in hops)


def test_no_module_imports_one_of_a_hop_above_its_own() -> None:
    hops = _hops()
    upward = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        own = _hop_of(name, hops)  # None: the entry points and the helpers shared by every hop
        for target in _imports(path):
            other = _hop_of(target, hops) if target.endswith(".py") else hops.get(target)
            if own is not None and other is not None and other < own:
                upward.append(f"{name} (hop {own}) imports {target} (hop {other})")
    assert upward == []
