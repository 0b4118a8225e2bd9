"""The packages' public API: what ``proxy`` and ``backend`` export (``__all__``) is what users and the
other packages import, and no package module imports another module's private name."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_proxy_exports_its_app_factory_and_config_types() -> None:
    import proxy
    from proxy.app import create_app
    from proxy.config import SERVE_SETTINGS, ProxyConfig

    assert sorted(proxy.__all__) == ["ProxyConfig", "SERVE_SETTINGS", "UpstreamKind", "create_app"]
    assert (proxy.create_app, proxy.ProxyConfig, proxy.SERVE_SETTINGS) == (
        create_app,
        ProxyConfig,
        SERVE_SETTINGS,
    )
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        proxy.missing  # noqa: B018


def test_the_backend_exports_its_app_factory_and_option_types() -> None:
    import backend
    from backend.config import BACKEND_SETTINGS
    from backend.context import ContextOptions
    from backend.loading import LoadOptions

    assert sorted(backend.__all__) == [
        "BACKEND_SETTINGS",
        "Backend",
        "ContextOptions",
        "LoadOptions",
        "create_app",
    ]
    assert (backend.ContextOptions, backend.LoadOptions, backend.BACKEND_SETTINGS) == (
        ContextOptions,
        LoadOptions,
        BACKEND_SETTINGS,
    )
    if importlib.util.find_spec("llama_cpp") is not None:
        from backend.app import create_app
        from backend.service import Backend

        assert (backend.create_app, backend.Backend) == (create_app, Backend)


def test_importing_the_packages_does_not_import_the_apps() -> None:
    """``conformant`` imports proxy.cli and backend.cli for every command: the servers' dependencies
    (llama-cpp-python, the proxy's app) load only when a server starts."""
    heavy = "('proxy.app', 'backend.service', 'llama_cpp')"
    code = f"import sys, proxy.cli, backend.cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
    return found


@pytest.mark.parametrize("package", ["conformance", "proxy", "backend"])
def test_no_module_imports_a_private_name_of_another(package: str) -> None:
    private = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / package).rglob("*.py"))
        if (names := _private_imports(path))
    }
    assert private == {}
