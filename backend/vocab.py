"""Tokenizer side of a loaded model: text <-> tokens, token pieces, end-of-generation and FIM tokens.

Read-only calls on the model's vocabulary, safe from the HTTP threads while the engine decodes.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import llama_cpp as ll

__all__ = ["Vocab"]


class Vocab:
    def __init__(self, model: Any) -> None:
        self.ptr = ll.llama_model_get_vocab(model)
        self.n_tokens = int(ll.llama_vocab_n_tokens(self.ptr))
        self.bos = int(ll.llama_vocab_bos(self.ptr))
        self.eos = int(ll.llama_vocab_eos(self.ptr))
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self.ptr))
        fim = (
            ll.llama_vocab_fim_pre(self.ptr),
            ll.llama_vocab_fim_suf(self.ptr),
            ll.llama_vocab_fim_mid(self.ptr),
        )
        self.fim: tuple[int, int, int] | None = None if min(fim) < 0 else (fim[0], fim[1], fim[2])

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        data = text.encode()
        size = len(data) + 8
        while True:
            buf = (ll.llama_token * size)()
            n = ll.llama_tokenize(self.ptr, data, len(data), buf, size, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one Vocab per model, lives as long as the model
    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens render as nothing, as in generated text)."""
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.ptr, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.ptr, token, buf, -n, 0, False)
        return buf.raw[:n]

    def piece_special(self, token: int) -> str:
        """A token's text with special tokens rendered (``<bos>``): what chat templates call bos_token."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_token_to_piece(self.ptr, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(ll.llama_vocab_is_eog(self.ptr, token))

    @functools.cached_property
    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token (``ignore_eos`` bans them all); one scan, on first use."""
        return [t for t in range(self.n_tokens) if ll.llama_vocab_is_eog(self.ptr, t)]

    def valid(self, token: int) -> bool:
        return 0 <= token < self.n_tokens
