"""The normalizing proxy, for use from Python as ``conformant serve`` uses it::

    import uvicorn
    from proxy import ProxyConfig, create_app

    uvicorn.run(create_app(ProxyConfig(upstream="http://127.0.0.1:8080")), port=8000)

``create_app`` is imported on first use (PEP 562): the ``conformant`` command imports ``proxy.cli`` for
every subcommand, and the app's dependencies are only needed to serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.config import SERVE_SETTINGS, ProxyConfig, UpstreamKind

if TYPE_CHECKING:
    from proxy.app import create_app

__all__ = ["SERVE_SETTINGS", "ProxyConfig", "UpstreamKind", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from proxy.app import create_app

        return create_app
    raise AttributeError(f"module 'proxy' has no attribute {name!r}")
