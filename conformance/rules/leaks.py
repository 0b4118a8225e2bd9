"""What a response must never show its client: traceback frames and local file paths in an error, an
empty error message, a local path as ``model`` (Q09).

Judged in every error body and every error event of a stream, so ``validate`` of a recording finds what
``check`` finds live. Evidence: llama-cpp-python's 500s for an invalid parameter or a token prompt carry
the Python traceback's frames and site-packages paths (COMPATIBILITY.md, ``token-prompt``,
``invalid-type``); TabbyAPI sends its traceback in a ``trace`` key (Q49); llama.cpp and the lemonade
server name the model by its ``.gguf`` path (Q09).
"""

from __future__ import annotations

import re
from typing import Any

from conformance.rules.context import Context, clipped

__all__ = ["error_leaks", "leaked_path", "model_path", "traceback_frame"]

# A Python, Java or .NET stack frame: a client learns the server's code layout from it.
_FRAME = re.compile(
    r'Traceback \(most recent call last\)|File "[^"\n]+", line \d+'
    r"|^\s*at [\w.$<>]+\([\w.]+:\d+\)|^\s*at [\w.`<>]+\(.*\) in .+:line \d+",
    re.MULTILINE,
)
# A local path: a model file anywhere, a POSIX path under a usual filesystem root (not the path of a URL:
# the lookbehind skips ``host/app/...``), a Windows drive or UNC path, a ``file://`` URL. A bare file name
# such as ``model.gguf`` is a name, not a leak.
_LOCAL_PATH = re.compile(
    r"[\w.~-]*/[\w./~-]*\.gguf\b"
    r"|(?<![\w/.:])/(?:home|root|Users|usr|opt|tmp|var|mnt|srv|app|models|data|work)/[\w./@~+-]*"
    # Anywhere else (a CI checkout under /check, a build under /builds): a path to source code or to an
    # installed package is a local path whatever the root; a route such as /v1/chat/completions is not.
    r"|(?<![\w/.:])(?:/[\w.@~+-]+)+/(?:site-packages|dist-packages)\b[\w./@~+-]*"
    r"|(?<![\w/.:])(?:/[\w.@~+-]+){2,}\.(?:py|pyc|so|dylib|dll|c|cc|cpp|h|hpp|js|mjs|ts|go|rs|java)\b"
    r"|\b[A-Za-z]:\\[\w\\. -]*\w|(?<![\w\\])\\\\[\w.$-]+\\[\w.$ -]+|\bfile://[^\s\"']+",
    re.IGNORECASE,
)
_MAX_STRINGS = 32
"""Strings of an error object looked at: every key of a real error, never a hostile one's thousands."""


def traceback_frame(text: str) -> str | None:
    """The first stack frame in ``text``, if any."""
    match = _FRAME.search(text)
    return match.group(0).strip() if match else None


def leaked_path(text: str) -> str | None:
    """The first local path in ``text``, if any."""
    match = _LOCAL_PATH.search(text)
    return match.group(0).strip(" \"'(=") if match else None


def _strings(value: Any, out: list[str]) -> None:
    """Every string in an error payload (``message``, Tabby's ``trace``, TGI's string ``error``)."""
    if len(out) >= _MAX_STRINGS:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def error_leaks(ctx: Context, event: int | None, payload: Any, pointer: str | None = "/error") -> None:
    """An error body or event that shows a stack frame, a local path or no message at all."""
    texts: list[str] = []
    _strings(payload, texts)
    err = payload.get("error") if isinstance(payload, dict) else None
    frame = next((f for f in map(traceback_frame, texts) if f), None)
    if frame:
        ctx.error(
            "error-leaks-traceback",
            f"the error shows a stack frame ({clipped(frame, 80)}); a client must get a message, not the"
            " server's code",
            event=event,
            pointer=pointer,
            # TabbyAPI's ``trace`` key is the catalogued case; a frame in a message is the spec's.
            quirk="Q49" if isinstance(err, dict) and "trace" in err else "spec",
        )
    path = next((p for p in map(leaked_path, texts) if p), None)
    if path:
        ctx.error(
            "error-leaks-path",
            f"the error shows a local path ({clipped(path, 80)})",
            event=event,
            pointer=pointer,
            quirk="spec",
        )
    message = err.get("message") if isinstance(err, dict) else err
    if isinstance(message, str) and not message.strip():
        ctx.error(
            "error-message-empty",
            "the error's message is empty; the client can tell its user nothing about what failed",
            event=event,
            pointer=f"{pointer or ''}/message" if isinstance(err, dict) else pointer,
            quirk="spec",
        )


def model_path(ctx: Context, event: int | None, model: Any, pointer: str = "/model") -> None:
    """``model`` names the served model, never the file it was loaded from (Q09). A warning: no client
    fails on it (openai-python, openai-node, the AI SDK and Codex pass ``model`` on as a string), while it
    tells whoever reads the answer where the server keeps its files; as an error on every successful
    llama-server answer it ranked that server below ones that fail requests (issue 33)."""
    if isinstance(model, str) and model:
        path = leaked_path(model)
        if path:
            ctx.warn(
                "model-is-local-path",
                f"`model` is a local file path: {clipped(model, 120)}",
                event=event,
                pointer=pointer,
                quirk="Q09",
            )
