"""An upstream held in memory, for sources tested without sockets: its answers' status, content type and
reads given in turn (tests/proxy/test_sources.py, test_plain_chunks.py)."""

from __future__ import annotations

from typing import Any

from conformance.api_errors import APIError
from proxy.config import ProxyConfig
from proxy.errors import error_from_http
from proxy.upstream_traits import UpstreamTraits

__all__ = ["HeldAnswer", "HeldUpstream"]


class HeldAnswer:
    """An upstream response held in memory: its status, content type and the reads it gives."""

    def __init__(self, content_type: str, reads: list[bytes | APIError], status: int = 200) -> None:
        self.status = status
        self.content_type = content_type
        self._reads = reads

    async def read(self, timeout: float | None = None) -> bytes | None:  # noqa: ASYNC109
        if not self._reads:
            return None
        read = self._reads.pop(0)
        if isinstance(read, APIError):
            raise read
        return read

    async def read_all(self, limit: int) -> bytes:
        return b"".join(r for r in self._reads if isinstance(r, bytes))

    async def error(self) -> APIError:
        return error_from_http(self.status, self.content_type, await self.read_all(1 << 16))

    async def aclose(self) -> None:
        pass


class HeldUpstream:
    """The upstream's side that a source uses: requests answered from a list, no tokenizer."""

    def __init__(self, answers: list[HeldAnswer]) -> None:
        self.config = ProxyConfig(upstream="http://127.0.0.1:9/v1")
        self.traits = UpstreamTraits()
        self.sent: list[dict[str, Any]] = []
        self._answers = answers

    async def open(self, path: str, body: Any, *, headers: Any = None, reservation: Any = None) -> HeldAnswer:
        self.sent.append(body)
        return self._answers.pop(0)

    async def json(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
        return None
