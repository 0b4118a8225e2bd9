"""The upstream client: one pooled ``httpx.AsyncClient``, transport faults mapped to OpenAI errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from . import jsoncodec
from .config import ProxyConfig
from .errors import ProxyError, error_from_http
from .transport import ResponseBody, UpstreamTransport

__all__ = ["Upstream", "UpstreamStream"]

_MAX_ERROR_BODY = 64 * 1024
_KEEPALIVE_EXPIRY = 30.0


class UpstreamStream:
    """An open upstream response read chunk by chunk, each read bounded by a deadline."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        body = response.stream
        self._next: Callable[[], Awaitable[bytes | None]]
        if isinstance(body, ResponseBody):
            self._next = body.read
        else:  # a body another transport made (tests only)
            reads = response.aiter_raw()
            self._next = lambda: anext(reads, None)

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def content_type(self) -> str:
        return str(self.response.headers.get("content-type", "")).lower()

    async def read(self, timeout: float | None = None) -> bytes | None:  # noqa: ASYNC109
        """The next bytes, or None at the end; a silent upstream is a 504 (Q25).

        The idle timeout is the transport's read timeout (one timer per connection, proxy/transport.py);
        ``timeout`` sets a shorter bound for this read alone.
        """
        try:
            if timeout is None:
                return await self._next()
            async with asyncio.timeout(timeout):
                return await self._next()
        except (TimeoutError, httpx.ReadTimeout):
            raise ProxyError.make(
                "the upstream server stopped sending data (idle timeout)", 504, code="upstream_timeout"
            ) from None
        except httpx.HTTPError as exc:
            raise ProxyError.make(f"the upstream connection failed: {type(exc).__name__}", 502) from None

    async def read_all(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while (part := await self.read()) is not None:
            size += len(part)
            if size > limit:
                raise ProxyError.make("the upstream response is too large", 502)
            parts.append(part)
        return b"".join(parts)

    async def error(self) -> ProxyError:
        body = await self.read_all(_MAX_ERROR_BODY) if self.status >= 400 else b""
        return error_from_http(self.status, self.content_type, body)

    async def aclose(self) -> None:
        await self.response.aclose()


class Upstream:
    def __init__(self, config: ProxyConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        headers = {"accept-encoding": "identity", "user-agent": "conformant-proxy"}
        if config.upstream_api_key:
            headers["authorization"] = f"Bearer {config.upstream_api_key}"
        self._transport = transport or UpstreamTransport(keepalive_expiry=_KEEPALIVE_EXPIRY)
        self.client = httpx.AsyncClient(
            base_url=config.upstream_base,
            headers=headers,
            timeout=httpx.Timeout(connect=config.connect_timeout, read=None, write=60.0, pool=60.0),
            transport=self._transport,
        )
        self._urls: dict[str, httpx.URL] = {}
        # Streams read with the idle timeout between reads; other calls bound themselves.
        self._timeouts = {**self.client.timeout.as_dict(), "read": config.idle_timeout}

    def _url(self, path: str) -> httpx.URL:
        """The absolute URL of ``path``, parsed once (httpx joins URLs slowly, on every request)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(str(self.client.base_url).rstrip("/") + "/" + path.lstrip("/"))
        return url

    def _request(
        self,
        method: str,
        path: str,
        json_body: Any,
        content: bytes | None,
        headers: list[tuple[str, str]] | None,
    ) -> httpx.Request:
        """The upstream request, built directly: ``client.build_request`` merges cookies, parameters
        and URLs on every call and encodes JSON with the standard library, which costs more than the
        rest of the request's way out."""
        merged = self.client.headers.copy()
        if json_body is not None:
            content = jsoncodec.dumps(json_body)
            merged["content-type"] = "application/json"
        if headers:
            merged.update(headers)
        return httpx.Request(
            method, self._url(path), headers=merged, content=content, extensions={"timeout": self._timeouts}
        )

    async def open(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> UpstreamStream:
        """Send the request and return once response headers arrive; faults become ProxyError."""
        request = self._request(method, path, json_body, content, headers)
        for attempt in (1, 2):
            try:
                # Straight to the transport: the client's send would add cookie-jar bookkeeping, auth
                # and redirect handling to every request, none of which an upstream call uses.
                response = await self._transport.handle_async_request(request)
                return UpstreamStream(response)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # A pooled keep-alive connection the upstream closed before any response byte
                # (llama-server does this): once more, on a fresh connection.
                if attempt == 2:
                    raise ProxyError.make(
                        "the upstream server closed the connection without a response", 502
                    ) from None
            except httpx.ConnectTimeout:
                raise ProxyError.make(
                    "timed out connecting to the upstream server", 504, code="upstream_timeout"
                ) from None
            except httpx.TimeoutException:
                raise ProxyError.make("the upstream server timed out", 504, code="upstream_timeout") from None
            except httpx.ConnectError:
                raise ProxyError.make("could not connect to the upstream server", 502) from None
            except httpx.HTTPError as exc:
                raise ProxyError.make(f"the upstream request failed: {type(exc).__name__}", 502) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def json(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
        """A small request whose JSON answer is wanted (models, tokenize, probes); None on any failure."""
        try:
            async with asyncio.timeout(timeout):
                response = await self.client.request(method, path, json=body)
            if response.status_code != 200:
                return None
            return response.json()
        except (httpx.HTTPError, ValueError, TimeoutError):
            return None

    def connections_in_use(self) -> int:
        transport = self._transport
        return transport.connections_in_use() if isinstance(transport, UpstreamTransport) else 0

    async def aclose(self) -> None:
        await self.client.aclose()
