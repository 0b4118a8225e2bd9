"""The sampling a response was generated with, as a protocol that echoes it states it.

The Open Responses spec (2026-04-24) requires every Response to carry ``temperature``, ``top_p``,
``presence_penalty``, ``frequency_penalty`` (numbers) and ``top_logprobs`` (an integer): "the values that
were used". Echoing null where the client sent nothing failed every test of its compliance suite (issue
38: 0 of 9 passed). A value is stated only where it is known to be the one used:

- the client's own value, sent on to the upstream as it is;
- else the core's default where the core knows it (the bundled backend's sampler defaults; a llama.cpp
  server's ``/props`` ``default_generation_settings``, which its ``--temp`` and the like set);
- else the API's documented default, and then the core sends it to the upstream explicitly
  (:func:`with_stated_sampling`), so that what the Response says is what the model was sampled with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["API_SAMPLING", "SAMPLING_FIELDS", "sampling_defaults", "sampling_used", "with_stated_sampling"]

API_SAMPLING: dict[str, float] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""The OpenAI API's documented defaults of the sampling fields a Response echoes (same names in a chat
request)."""

SAMPLING_FIELDS = tuple(API_SAMPLING)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _stated(value: float) -> float:
    """A default as its server was given it: llama.cpp keeps ``--temp 0.8`` as a C float, which its
    ``/props`` writes as 0.800000011920929 (7 significant digits are what a float holds)."""
    return float(f"{value:.7g}")


def sampling_defaults(settings: Any) -> dict[str, float] | None:
    """The sampling defaults found in ``settings`` (a mapping with the fields, or llama.cpp's
    ``default_generation_settings`` whose ``params`` has them); None where any is missing."""
    if not isinstance(settings, Mapping):
        return None
    params = settings.get("params")
    source = params if isinstance(params, Mapping) else settings
    found = {name: _number(source.get(name)) for name in SAMPLING_FIELDS}
    if any(value is None for value in found.values()):
        return None
    return {name: _stated(value) for name, value in found.items() if value is not None}


def sampling_used(asked: Mapping[str, Any], defaults: Mapping[str, float] | None) -> dict[str, float]:
    """Each sampling field's value: the request's, else ``defaults``' (the core's), else the API's."""
    used: dict[str, float] = {}
    for name, api_default in API_SAMPLING.items():
        value = _number(asked.get(name))
        if value is None and defaults is not None:
            value = _number(defaults.get(name))
        used[name] = api_default if value is None else value
    return used


def with_stated_sampling(body: dict[str, Any]) -> dict[str, Any]:
    """A core request that names every sampling field: the API's default where the client sent none
    (for an upstream whose own defaults are not known, so that the echo is true)."""
    missing = {name: value for name, value in API_SAMPLING.items() if body.get(name) is None}
    return {**body, **missing} if missing else body
