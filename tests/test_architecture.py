"""The layout docs/architecture.md draws holds in the code: no circle of imports anywhere, no import
between proxy/ and backend/ nor from conformance/ into either, and inside each of the three no module
importing one of a layer above its own. Every project module has its layer: a new module must be
placed in the list before it is imported."""

from __future__ import annotations

import re

import pytest

from tests.support.imports import ROOT, cycles, import_graph, module_path

_LAYER = re.compile(r"^(\d+)\. ")
_PATH = re.compile(r"`((?:proxy|conformance|backend)/[\w/]*(?:\.py|/))`")
_FOLDERS = ("proxy", "conformance", "backend")


def _layers() -> dict[str, int]:
    """Each module or package docs/architecture.md's "Layers" section names, with its layer's number."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for line in section.splitlines():
        if match := _LAYER.match(line):
            for path in _PATH.findall(line):
                layers[path] = int(match.group(1))
    return layers


def _layer_of(path: str, layers: dict[str, int]) -> int | None:
    """The layer of a module file: its own entry, else the nearest package that holds it."""
    if path in layers:
        return layers[path]
    parts = path.split("/")[:-1]
    while parts:
        package = "/".join(parts) + "/"
        if package in layers:
            return layers[package]
        parts.pop()
    return None


def test_no_circle_of_imports() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_backend_and_proxy_stand_beside_each_other_on_the_core() -> None:
    graph, _ = import_graph()
    crossing = [
        f"{name} imports {target}"
        for name, targets in graph.items()
        for target in targets
        if (top := name.split(".")[0]) in _FOLDERS
        and (other := target.split(".")[0]) in ("proxy", "backend")
        and other != top
    ]
    assert crossing == []


def test_every_module_has_its_layer() -> None:
    _, modules = import_graph()
    layers = _layers()
    named = [module_path(name, modules) for name in modules if name.split(".")[0] in _FOLDERS]
    assert [path for path in named if _layer_of(path, layers) is None] == []
    assert all((ROOT / path).exists() for path in layers)


@pytest.mark.parametrize("folder", _FOLDERS)
def test_no_import_climbs_a_layer(folder: str) -> None:
    graph, modules = import_graph()
    layers = _layers()
    climbing = []
    for name, targets in graph.items():
        if name.split(".")[0] != folder:
            continue
        path = module_path(name, modules)
        own = _layer_of(path, layers)
        for target in targets:
            if target.split(".")[0] != folder:
                continue
            other = _layer_of(module_path(target, modules), layers)
            if own is not None and other is not None and other < own:
                climbing.append(
                    f"{path} (layer {own}) imports {module_path(target, modules)} (layer {other})"
                )
    assert climbing == []


def test_the_layers_read_are_the_documented_ones() -> None:
    """The test reads what the page shows: the request path's first layers, the core at the bottom."""
    layers = _layers()
    assert layers["proxy/app.py"] < layers["proxy/routes.py"] < layers["proxy/generation.py"]
    assert layers["proxy/sources/"] < layers["proxy/routing/"] < layers["proxy/adapters/"]
    assert layers["proxy/normalizer/"] < layers["proxy/upstream.py"]
    assert layers["conformance/judge.py"] < layers["conformance/protocols/"] < layers["conformance/rules/"]
    assert layers["backend/app.py"] < layers["backend/routes.py"] < layers["backend/generation.py"]
