"""``POST /v1/responses`` in the proxy: the chat route's pipeline with its output translated
(``output.py``), or the upstream's own endpoint normalized (``native.py``). The translation itself is
shared with the backend: conformance/responses_translation/."""

from .native import NativeResponses, StoredAs, serve_native
from .output import ResponsesOutput, encode_events

__all__ = ["NativeResponses", "ResponsesOutput", "StoredAs", "encode_events", "serve_native"]
