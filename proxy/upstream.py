"""The upstream client: one pooled ``httpx.AsyncClient``, transport faults mapped to OpenAI errors
(by proxy/upstream_faults.py)."""

from __future__ import annotations

import asyncio
import math
import re
import zlib
from typing import Any

import httpx

from conformance import jsoncodec
from conformance.api_errors import APIError

from .admission import Reservation
from .config import ProxyConfig
from .errors import UpstreamInvalidData, UpstreamRedirect, error_from_http, first_byte_timeout_error
from .transport import ResponseBody, UpstreamTransport, origin_of, request_bytes
from .upstream_faults import BODY, REQUEST, mapped, raise_mapped
from .upstream_traits import UpstreamTraits

__all__ = ["MAX_ERROR_BODY", "MAX_JSON_BODY", "Upstream", "UpstreamStream", "usable_retry_header"]

MAX_ERROR_BODY = 64 * 1024
_KEEPALIVE_EXPIRY = 30.0
_NO_LISTING = frozenset({200, 404, 405, 410, 501})
"""Statuses of a model listing's answer that say the upstream has no listing (200: none in the body)."""
MAX_JSON_BODY = 64 * 1024 * 1024
"""The most of an upstream's answer the proxy holds at once (a JSON body, an aggregated stream); past it
the answer is a 502 rather than memory that grows with whatever the upstream sends (issue 18)."""
_RETRY_HEADERS = (b"retry-after", b"retry-after-ms")
# What a retry header may hold: seconds (milliseconds for retry-after-ms; openai-python reads both as
# floats), or for Retry-After an HTTP date (RFC 9110 10.2.3). Anything else is no advice a client can
# follow, and an upstream was seen to put its key there (issue 18): such a header is dropped.
_RETRY_DELAY = re.compile(rb"\d{1,10}(?:\.\d{1,6})?")
_HTTP_DATE = re.compile(rb"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT")


def usable_retry_header(name: bytes, value: bytes) -> bool:
    """False for a ``Retry-After`` or ``retry-after-ms`` (``name`` lower case) that holds no delay or
    date a client could follow; True for any other header."""
    if name not in _RETRY_HEADERS:
        return True
    value = value.strip()
    return bool(_RETRY_DELAY.fullmatch(value) or (name == b"retry-after" and _HTTP_DATE.fullmatch(value)))


# zlib's window bits for each encoding an upstream may send though asked for identity; deflate as gzip
# or zlib stream, which ever its header says (32).
_WBITS = {"gzip": 16 | zlib.MAX_WBITS, "x-gzip": 16 | zlib.MAX_WBITS, "deflate": 32 | zlib.MAX_WBITS}
_INFLATE_STEP = 256 * 1024  # the most one read inflates to: a small body may stand for gigabytes


def _inflater(encoding: str) -> Any:
    wbits = _WBITS.get(encoding.strip().lower())
    return None if wbits is None else zlib.decompressobj(wbits)


class UpstreamStream:
    """An open upstream response read chunk by chunk, each read bounded by a deadline.

    A success body the upstream compressed though the proxy asked for identity (gzip or deflate) is
    read decompressed, a bounded step at a time (``decoded``); an error body is decompressed by
    ``error_from``, where one that is not what it says it is leaves the status to speak.
    """

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        body = response.stream
        assert isinstance(body, ResponseBody)
        self._body = body
        encoding = str(response.headers.get("content-encoding", ""))
        self._inflate = _inflater(encoding) if response.status_code < 400 else None
        self._inflated_end = False

    @property
    def decoded(self) -> bool:
        """Whether ``read`` decompresses the body (its Content-Encoding no longer holds)."""
        return self._inflate is not None

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
        if self._inflate is not None:
            return await self._read_inflated(timeout)
        return await self._read_raw(timeout)

    async def _read_inflated(self, timeout: float | None) -> bytes | None:  # noqa: ASYNC109
        inflate = self._inflate
        assert inflate is not None
        while not self._inflated_end:
            data = inflate.unconsumed_tail or await self._read_raw(timeout)
            with mapped(BODY):
                if data is None:
                    self._inflated_end = True
                    return inflate.flush() or None
                out: bytes = inflate.decompress(data, _INFLATE_STEP)
            if out:
                return out
        return None

    async def _read_raw(self, timeout: float | None) -> bytes | None:  # noqa: ASYNC109
        # ``mapped(BODY)`` written out: a context manager made for every read cost a stream's hot path
        # more than a microsecond a chunk (issue 35).
        try:
            if timeout is None:
                return await self._body.read()
            async with asyncio.timeout(timeout):
                return await self._body.read()
        except Exception as exc:
            raise_mapped(exc, BODY)

    async def read_all(self, limit: int) -> bytes:
        body, complete = await self.read_upto(limit)
        if not complete:
            # Let go of what was read first: the error's traceback keeps this frame while the error lives
            # on (the request's log entry), and 64 MiB per refused answer stayed until a collection ran
            # (found by black-box testing: 189 -> 640 MB over 7 requests).
            del body
            raise UpstreamInvalidData.of("the upstream response is too large")
        return body

    async def read_upto(self, limit: int) -> tuple[bytes, bool]:
        """The body if it ends within ``limit`` bytes, and True; else its first reads past it, and False
        (the rest is still to read)."""
        parts: list[bytes] = []
        size = 0
        while (part := await self.read()) is not None:
            size += len(part)
            parts.append(part)
            if size > limit:
                return b"".join(parts), False
        return b"".join(parts), True

    async def error(self) -> APIError:
        body = await self.read_all(MAX_ERROR_BODY) if self.status >= 400 else b""
        return self.error_from(body)

    def error_from(self, body: bytes) -> APIError:
        """The OpenAI error of this error response, whose body (or its first ``MAX_ERROR_BODY`` bytes)
        is ``body``: decompressed first if an upstream sent it compressed though asked not to. A
        redirect (the proxy follows none) is reported as one."""
        if self.status < 400:
            return UpstreamRedirect.of(
                f"the upstream server redirected the request (HTTP {self.status}), and the proxy follows "
                "no redirects: point the proxy at the address the upstream redirects to"
            )
        inflate = _inflater(str(self.response.headers.get("content-encoding", "")))
        if inflate is not None:
            try:
                body = inflate.decompress(body, MAX_ERROR_BODY)
            except zlib.error:
                body = b""  # not what it said it is: the status alone speaks
        error = error_from_http(self.status, self.content_type, body)
        # A 429 or 503's advice on when to ask again, which openai-python's retries follow.
        error.headers = [
            (name, value)
            for name, value in ((k.lower(), v) for k, v in self.response.headers.raw)
            if name in _RETRY_HEADERS and usable_retry_header(name, value)
        ]
        return error

    async def aclose(self) -> None:
        await self.response.aclose()


class Upstream:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.traits = UpstreamTraits()  # what this upstream lacks or does differently, as learned
        headers = {"accept-encoding": "identity", "user-agent": "conformant-proxy"}
        if config.upstream_api_key:
            headers["authorization"] = f"Bearer {config.upstream_api_key}"
        self._transport = UpstreamTransport(
            keepalive_expiry=_KEEPALIVE_EXPIRY, max_connections=config.max_upstream_connections
        )
        self.client = httpx.AsyncClient(
            base_url=config.upstream_base,
            headers=headers,
            timeout=httpx.Timeout(connect=config.connect_timeout, read=None, write=60.0, pool=60.0),
            transport=self._transport,
        )
        base = self.client.base_url
        self._origin = origin_of(base)
        self._base_path = base.raw_path.rstrip(b"/")
        # What httpx would send on every request: the host, then the client's headers (names lowered
        # once here: a request's own headers replace them by name).
        defaults = [(b"host", base.netloc), *self.client.headers.raw]
        self._headers = [(name.lower(), value) for name, value in defaults]
        self._targets: dict[str, bytes] = {}

    def _target(self, path: str) -> bytes:
        """The request target of ``path`` under the upstream's base URL, joined once."""
        target = self._targets.get(path)
        if target is None:
            url = httpx.URL(str(self.client.base_url).rstrip("/") + "/" + path.lstrip("/"))
            target = self._targets[path] = url.raw_path
        return target

    def _message(self, method: str, target: bytes, body: bytes, given: list[tuple[bytes, bytes]]) -> bytes:
        """The request as bytes, built directly: ``client.build_request`` and ``httpx.Request`` merge
        cookies, URLs and headers on every call, which costs more than the rest of the way out."""
        replaced = {name.lower() for name, _ in given}
        defaults = [(name, value) for name, value in self._headers if name not in replaced]
        return request_bytes(method, target, defaults + given, body)

    async def open(
        self,
        path: str,
        json_body: Any,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        reservation: Reservation | None = None,
    ) -> UpstreamStream:
        """POST ``json_body`` and return once response headers arrive; faults become APIError.

        ``headers`` replace the upstream client's own headers of the same names; ``reservation``: the
        places of a fan-out this request is part of (``reserve``).
        """
        given = [(b"content-type", b"application/json"), *(headers or ())]
        message = self._message("POST", self._target(path), jsoncodec.dumps(json_body), given)
        return await self._send(message, reservation)

    async def reserve(self, count: int) -> Reservation:
        """Places for ``count`` requests in flight at once, taken together in turn (a fan-out's)."""
        return await self._transport.admission.reserve(count)

    async def forward(
        self,
        method: str,
        target: bytes,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> UpstreamStream:
        """A client's request for another path (``target``: its path and query) sent on as it came.

        Faults become APIError as in ``open``, and so does a response head that takes longer than the
        first-byte timeout (or ``timeout``, when shorter). ``target`` is not cached like ``open``'s
        paths: clients choose it.
        """
        message = self._message(method, self._base_path + target, body, headers)
        try:
            async with asyncio.timeout(min(self.config.first_byte_timeout, timeout or math.inf)):
                return await self._send(message)
        except TimeoutError:
            raise first_byte_timeout_error() from None

    def client_location(self, location: bytes) -> bytes:
        """A ``Location`` the upstream sent, as the client must follow it: one that points into the
        upstream becomes a path on the proxy, so a client that follows a redirect does not go around
        the proxy (nor learn the upstream's address); any other is left as it is. A scheme-relative
        ``//host:port/path`` is read with the upstream's scheme, as a client resolves it."""
        base = self.client.base_url
        origin = str(base.copy_with(raw_path=b"/")).rstrip("/").encode()
        absolute = base.raw_scheme + b":" + location if location.startswith(b"//") else location
        if not absolute.lower().startswith(origin.lower()):
            return location
        path = absolute[len(origin) :] or b"/"
        if path[:1] not in (b"/", b"?", b"#"):
            return location  # http://host:80 against http://host:8080: another origin
        if self._base_path and path.startswith(self._base_path + b"/"):
            path = path[len(self._base_path) :]
        return path

    async def _send(self, message: bytes, reservation: Reservation | None = None) -> UpstreamStream:
        with mapped(REQUEST):
            response = await self._transport.send(
                self._origin,
                message,
                connect_timeout=self.config.connect_timeout,
                read_timeout=self.config.idle_timeout,  # between the body's reads (Q25)
                # Until its first body byte an upstream may be processing the prompt (it may send its
                # head before it runs the model): the first-byte timeout bounds that wait too.
                first_read_timeout=self.config.first_byte_timeout,
                reservation=reservation,
            )
        return UpstreamStream(response)

    async def listing(self, timeout: float) -> list[Any] | None:  # noqa: ASYNC109
        """The upstream's ``/v1/models`` entries now (None when it lists none), and what a listing tells
        of it learned (``UpstreamTraits.learn_listing``: llama-cpp-python's or another's). An answer
        about the route without a list (a 404, a body with none) tells it is no llama-cpp-python, which
        lists its models: asked again on each request that needs to know, such an upstream cost every one
        a round trip more (issue 35's profile). A refusal that may pass (a 5xx, 429, 401) or no answer
        leaves it unknown, asked again next time."""
        status, answer = await self.answer("GET", "/v1/models", timeout=timeout)
        entries = answer.get("data") if isinstance(answer, dict) else None
        if isinstance(entries, list):
            self.traits.learn_listing(entries)
            return entries
        if status in _NO_LISTING:
            self.traits.learn_listing([])
        return None

    async def json(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:  # noqa: ASYNC109
        """A small request whose JSON answer is wanted (models, tokenize, probes); None on any failure,
        an answer over ``MAX_JSON_BODY`` or one that is no JSON included (nested too deeply, too): the
        capability it asks about is then absent."""
        return (await self.answer(method, path, body, timeout))[1]

    async def answer(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 10.0,  # noqa: ASYNC109
        *,
        refusals: bool = False,
    ) -> tuple[int | None, Any]:
        """``json``'s request, with the status it was answered with: None when no answer came (refused,
        timed out, broken off), which says nothing of what the upstream has, unlike a 404. The JSON of a
        4xx answer too where ``refusals`` asks for it (the request's refusal, to pass on)."""
        given = [(b"content-type", b"application/json")] if body is not None else []
        content = jsoncodec.dumps(body) if body is not None else b""
        try:
            async with asyncio.timeout(timeout):
                stream = await self._send(self._message(method, self._target(path), content, given))
                status = stream.status
                try:
                    if status != 200 and not (refusals and 400 <= status < 500):
                        return status, None
                    raw = await stream.read_all(MAX_JSON_BODY)
                finally:
                    await stream.aclose()
        except (APIError, TimeoutError):
            return None, None
        try:
            return status, jsoncodec.loads(raw)
        except ValueError:
            return status, None

    def connections_in_use(self) -> int:
        return self._transport.connections_in_use()

    async def aclose(self) -> None:
        await self.client.aclose()
