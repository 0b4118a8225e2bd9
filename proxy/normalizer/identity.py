"""One id, one model and one ``created`` per response (quirks section A)."""

from __future__ import annotations

import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from conformance.model_names import clean_model_name
from conformance.request import Endpoint

from .repairs import Repairs

__all__ = ["Identity", "new_id"]

_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-"}
_OTHER_PREFIX = re.compile(r"^(?:chatcmpl|cmpl|chat)-")
# Ollama draws ids from rand.Intn(999) (Q05): such ids collide across requests, so mint our own.
_WEAK_ID = re.compile(r"^(?:chatcmpl|cmpl)-\d{1,4}$")
# An id longer than this is no id a server mints (theirs are under 100 characters) but memory: each of
# the 8,192 remembered ids was held whole (2 MB ids: 16 GB), and stamped on every chunk sent. The
# proxy mints its own instead.
_MAX_ID = 256


def new_id(endpoint: Endpoint) -> str:
    return _PREFIX[endpoint] + os.urandom(12).hex()


class _RecentIds:
    """The upstream ids of this process's latest responses: one seen again is no response's own."""

    def __init__(self, size: int) -> None:
        self._order: deque[str] = deque(maxlen=size)
        self._seen: set[str] = set()

    def seen_before(self, upstream_id: str) -> bool:
        """Whether ``upstream_id`` came with an earlier response; remembered from now on."""
        if upstream_id in self._seen:
            return True
        if len(self._order) == self._order.maxlen:
            self._seen.discard(self._order[0])
        self._order.append(upstream_id)
        self._seen.add(upstream_id)
        return False


# koboldcpp's fake streams answer with one hardcoded id, and LocalAI before 2.20 reused its id and
# ``created`` (Q08, Q06): a client that keys anything by id would take two answers for one.
_RECENT_IDS = _RecentIds(8192)


@dataclass(slots=True)
class Identity:
    """Fixed by the first upstream object seen; stamped on everything after it."""

    endpoint: Endpoint
    model: str | None
    """The request's model or the alias; None until an upstream object supplies one."""
    id: str | None = None
    created: int | None = None
    upstream_id: str | None = field(default=None, repr=False)
    reused: bool = False
    """The upstream's id came with an earlier response (Q08): the id and ``created`` are the proxy's."""

    def stamp(self, obj: dict[str, Any], repairs: Repairs) -> None:
        """Fix the identity from ``obj`` if not yet fixed, then write it onto ``obj``."""
        upstream_id = obj.get("id")
        if self.id is None:
            self.id = self._choose_id(upstream_id, repairs)
        elif (
            upstream_id != self.id and upstream_id not in (None, "") and not self._same_upstream(upstream_id)
        ):
            repairs.add("Q03")
        created = obj.get("created")
        if self.created is None:
            if self.reused:  # a reused id comes with its stale created (LocalAI before 2.20, Q06)
                self.created = int(time.time())
            elif isinstance(created, int) and not isinstance(created, bool) and created > 0:
                self.created = created
            else:
                repairs.add("Q06")
                self.created = int(time.time())
        elif created != self.created and not self.reused:
            repairs.add("Q13")
        upstream_model = obj.get("model")
        if self.model is None:
            if isinstance(upstream_model, str) and upstream_model:
                self.model = clean_model_name(upstream_model)
            else:
                self.model = "model"
        if upstream_model != self.model:
            repairs.add("Q02" if upstream_model == "" else "Q11" if upstream_model is None else "Q09")
        obj["id"] = self.id
        obj["created"] = self.created
        obj["model"] = self.model

    def _same_upstream(self, upstream_id: Any) -> bool:
        return bool(upstream_id == self.upstream_id)

    def _choose_id(self, upstream_id: Any, repairs: Repairs) -> str:
        prefix = _PREFIX[self.endpoint]
        if not isinstance(upstream_id, str) or not upstream_id.strip():
            repairs.add("Q01")
            return new_id(self.endpoint)
        self.upstream_id = upstream_id  # (held for this response only: its later chunks are compared)
        if len(upstream_id) > _MAX_ID:
            return new_id(self.endpoint)
        if _WEAK_ID.match(upstream_id):
            repairs.add("Q05")
            return new_id(self.endpoint)
        if _RECENT_IDS.seen_before(upstream_id):
            repairs.add("Q08")
            self.reused = True
            return new_id(self.endpoint)
        if upstream_id.startswith(prefix):
            return upstream_id
        repairs.add("Q04" if upstream_id.startswith("chatcmpl-") else "Q07")
        return prefix + _OTHER_PREFIX.sub("", upstream_id)
