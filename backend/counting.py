"""The route that counts a request's prompt tokens without generating (``POST
/v1/messages/count_tokens``): the front-end's reading of the body, the engine's reading of the core's
request, and the prompt as the model's template writes it, tools included, tokenized by the model's own
vocabulary. The count is the prompt's whole; a prompt longer than the context is counted, not refused."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from backend.generation import PARSERS, Generation
from conformance.api_errors import APIError
from conformance.protocols.front_end import CountRoute, FrontEnd

__all__ = ["count"]


async def count(
    generation: Generation, front_end: FrontEnd, counting: CountRoute, request: Request
) -> Response:
    try:
        translation = await counting.read(await request.body())
    except APIError as refused:
        return JSONResponse(refused.body, status_code=refused.status)  # worded by the front-end
    assert translation.body is not None  # (a refusal is kept only where asked to)
    try:
        parsed = PARSERS[front_end.endpoint](translation.body)
        tokens = await asyncio.to_thread(generation.backend.prompt_tokens, parsed)  # (as generation's)
    except APIError as refused:
        return JSONResponse(front_end.error(refused.body, refused.status), status_code=refused.status)
    return JSONResponse(counting.answer(tokens))
