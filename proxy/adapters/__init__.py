"""Upstream adapters, one per server family, chosen by ``--upstream-kind`` or detected."""

from .base import Adapter, UpstreamCall
from .llamacpp import LlamaCppAdapter, is_llamacpp_props
from .openai import OpenAIAdapter

__all__ = ["Adapter", "LlamaCppAdapter", "OpenAIAdapter", "UpstreamCall", "is_llamacpp_props"]
