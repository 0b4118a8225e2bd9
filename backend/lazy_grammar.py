"""A grammar that starts where a trigger appears in the generated text (a tool call under ``auto``), started
here rather than by llama.cpp's lazy grammar sampler.

llama.cpp's lazy sampler feeds the grammar the text from the trigger on, when the token that completes the
trigger is accepted, and throws ``std::runtime_error`` ("Unexpected empty grammar stack after accepting
piece") when that text does not fit the grammar. Through the C API that is ``std::terminate``: the whole
backend died when a scripted model wrote a Hermes call as one token that the grammar of the time did not
fit (issue 38), and a real vocabulary's token that runs past a trigger would do the same. Here the tokens
drawn from where the trigger starts are fed to a fresh grammar one by one, each checked first
(``llama_sampler_apply`` on that one candidate, which refuses what does not fit, and never throws); a
token whose text does not fit is refused, and the sampler draws another one.

The trigger patterns are the tool formats' (backend/tool_formats/): escaped markers and one anchored
pattern with a group (Llama 3.x), which read the same under Python's ``re`` as under llama.cpp's
ECMAScript regexes. As llama.cpp does, the grammar gets the text from the first group's start where the
pattern has one, else from the match's.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import llama_cpp as ll

__all__ = ["LazyGrammar", "grammar_sampler", "piece_text"]


def grammar_sampler(vocab: Any, gbnf: str) -> Any:
    """A grammar sampler over ``vocab`` from rule ``root`` (NULL where the grammar does not parse)."""
    return ll.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")


def piece_text(vocab: Any, token: int) -> bytes:
    """A token's text as llama.cpp's lazy grammar reads it: special tokens rendered (``<tool_call>``)."""
    buf = ctypes.create_string_buffer(256)
    n = ll.llama_token_to_piece(vocab, token, buf, 256, 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = ll.llama_token_to_piece(vocab, token, buf, -n, 0, True)
    return buf.raw[: max(n, 0)]


def _tokens(vocab: Any, text: str) -> list[int]:
    data = text.encode()
    size = len(data) + 8
    while True:
        buf = (ll.llama_token * size)()
        n = ll.llama_tokenize(vocab, data, len(data), buf, size, False, True)
        if n >= 0:
            return list(buf[:n])
        size = -n


def _fits(grammar: Any, token: int) -> bool:
    one = (ll.llama_token_data * 1)(ll.llama_token_data(token, 0.0, 0.0))
    ll.llama_sampler_apply(grammar, ctypes.byref(ll.llama_token_data_array(one, 1, -1, False)))
    return bool(one[0].logit != float("-inf"))


class LazyGrammar:
    """The text generated so far, until a trigger appears in it; then the grammar, started."""

    def __init__(self, vocab: Any, gbnf: str, triggers: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.gbnf = gbnf
        self.triggers = [re.compile(t) for t in triggers]
        self._text = b""
        self._tokens: list[tuple[int, int]] = []
        """The tokens drawn so far, each with the offset in ``_text`` where its text starts."""

    def start(self, token: int) -> Any | None:
        """After ``token`` is drawn: None while no trigger has appeared; the grammar sampler, advanced over
        the text from the trigger, once one has (the caller owns it then). Raises ``ValueError`` when that
        text does not fit the grammar: the token is to be drawn again, and nothing of it was kept."""
        piece = piece_text(self.vocab, token)
        text = self._text + piece
        begin = self._constrained(text.decode("utf-8", "replace"))
        if begin is None:
            self._tokens.append((token, len(self._text)))
            self._text = text
            return None
        grammar = grammar_sampler(self.vocab, self.gbnf)
        if not grammar:
            raise RuntimeError("the tool-call grammar did not parse")
        for fed in self._from(begin, [*self._tokens, (token, len(self._text))], text):
            if not _fits(grammar, fed):
                ll.llama_sampler_free(grammar)
                raise ValueError("the text from the trigger does not fit the grammar")
            ll.llama_sampler_accept(grammar, fed)
        return grammar

    def _from(self, begin: int, tokens: list[tuple[int, int]], text: bytes) -> list[int]:
        """The tokens that spell ``text`` from byte ``begin``: the drawn ones from the one where it starts;
        where that one starts before it (text before the trigger in the same token), its rest is
        tokenized again. (Tokenizing it all again would not do: a SentencePiece vocabulary puts a space
        before the text it is given.)"""
        first = max(i for i, (_, offset) in enumerate(tokens) if offset <= begin)
        token, offset = tokens[first]
        rest = [t for t, _ in tokens[first + 1 :]]
        if offset == begin:
            return [token, *rest]
        end = tokens[first + 1][1] if first + 1 < len(tokens) else len(text)
        return [*_tokens(self.vocab, text[begin:end].decode("utf-8", "replace")), *rest]

    def _constrained(self, text: str) -> int | None:
        """The byte offset where the grammar's text starts, once a trigger appears in ``text``."""
        for trigger in self.triggers:
            match = trigger.search(text)
            if match is not None:
                return len(text[: match.start(1) if trigger.groups else match.start()].encode())
        return None
