"""The bundled llama.cpp backend, for use from Python as ``conformant backend`` uses it::

    import uvicorn
    from backend import Backend, ContextOptions, create_app

    backend = Backend.open("model.gguf", context=ContextOptions(parallel=2))
    uvicorn.run(create_app(backend, on_shutdown=backend.close), port=8080)

``Backend`` and ``create_app`` are imported on first use (PEP 562): they need llama-cpp-python (the
backend extra), and without it the ``conformant backend`` command must still load to say so in one line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from backend.config import BACKEND_SETTINGS
from backend.context import ContextOptions
from backend.loading import LoadOptions

if TYPE_CHECKING:
    from backend.app import create_app
    from backend.service import Backend

__all__ = ["BACKEND_SETTINGS", "Backend", "ContextOptions", "LoadOptions", "create_app"]

_NEEDING_LLAMA_CPP = {"Backend": "backend.service", "create_app": "backend.app"}


def __getattr__(name: str) -> Any:
    if name in _NEEDING_LLAMA_CPP:
        return getattr(importlib.import_module(_NEEDING_LLAMA_CPP[name]), name)
    raise AttributeError(f"module 'backend' has no attribute {name!r}")
