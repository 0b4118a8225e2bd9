"""Model names as clients are shown them: never a local path (Q09).

llama-server and llama-cpp-python name a model by the file they loaded (``/models/gemma-3-270m.gguf``);
OpenAI's answers and listings name it by an id. Every answer, listing and stored Response of the proxy
and the backend names the model through ``clean_model_name``.
"""

from __future__ import annotations

import re

__all__ = ["clean_model_name"]


def clean_model_name(name: str) -> str:
    """A served model name without a local path or a ``.gguf`` suffix (Q09 path leak)."""
    if ("/" in name and (name.startswith(("/", "./", "~")) or name.endswith(".gguf"))) or "\\" in name:
        name = re.split(r"[\\/]", name)[-1]
    return name.removesuffix(".gguf") or "model"
