"""A small OpenAI-style upstream process for routing tests: ``python -m tests.support.model_server``.

It serves the models it is given, says in each answer which server wrote it (``--name``), streams
``--chunks`` chunks ``--delay`` seconds apart (time to kill it mid-stream), and answers ``/health`` with
503 for its first ``--loading`` seconds, as llama-server does while it loads its model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def create_app(name: str, models: list[str], chunks: int, delay: float, loading: float) -> Starlette:
    ready_at = time.monotonic() + loading
    served = {"count": 0}

    def answer(model: str, text: str) -> dict[str, object]:
        return {
            "id": "chatcmpl-" + name,
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": chunks, "total_tokens": 3 + chunks},
        }

    async def chat(request: Request) -> Response:
        if time.monotonic() < ready_at:
            return JSONResponse({"error": {"message": "Loading model", "code": 503}}, status_code=503)
        body = await request.json()
        model = body.get("model")
        if model not in models:
            return JSONResponse({"error": {"message": f"model {model} not served here"}}, status_code=404)
        served["count"] += 1
        if not body.get("stream"):
            return JSONResponse(answer(model, name))

        async def events() -> AsyncIterator[bytes]:
            for i in range(chunks):
                delta = {"role": "assistant", "content": name if i == 0 else "."}
                choice = {"index": 0, "delta": delta, "finish_reason": "stop" if i == chunks - 1 else None}
                chunk = {"id": "chatcmpl-" + name, "object": "chat.completion.chunk", "created": 1}
                chunk.update({"model": model, "choices": [choice]})
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                await asyncio.sleep(delay)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def listing(_: Request) -> Response:
        data = [{"id": m, "object": "model", "created": 1, "owned_by": name} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def health(_: Request) -> Response:
        if time.monotonic() < ready_at:
            return JSONResponse({"error": {"message": "Loading model", "code": 503}}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def count(_: Request) -> Response:
        return JSONResponse(served)

    async def embeddings(request: Request) -> Response:
        # A passed-through route: the answer says which model name this server was asked for, upper-cased
        # (the proxy writes the client's name back over the served name wherever the answer holds it).
        asked = (await request.json()).get("model")
        data = [{"object": "embedding", "index": 0, "embedding": [0.0]}]
        return JSONResponse(
            {"object": "list", "data": data, "model": asked, "asked_here": str(asked).upper()}
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", listing, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/served", count, methods=["GET"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--loading", type=float, default=0.0)
    args = parser.parse_args()
    app = create_app(args.name, args.model, args.chunks, args.delay, args.loading)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
