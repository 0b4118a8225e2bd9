"""Chat messages -> prompt text, with the GGUF's own Jinja chat template.

The template is rendered with jinja2 in a sandbox, as Hugging Face's ``apply_chat_template`` does
(``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``).

Fallback, for GGUF files without ``tokenizer.chat_template`` (Gemma 3 270M's is one): when the vocabulary
has Gemma's turn tokens (``<start_of_turn>``/``<end_of_turn>``) the Gemma format is used (system text
goes in front of the first user turn, as Gemma's own template does), otherwise ChatML
(``<|im_start|>role ... <|im_end|>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from backend.requests import ChatMessage, RequestError

__all__ = ["CHATML_TEMPLATE", "GEMMA_TEMPLATE", "ChatTemplate"]

GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = ns.system + m['content'] + '\\n\\n' %}{% endif %}{% endfor %}"
    "{% set ns.first = true %}"
    "{% for m in messages if m['role'] != 'system' %}"
    "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' }}"
    "{% if ns.first and role == 'user' %}{{ ns.system }}{% endif %}{% set ns.first = false %}"
    "{{ m['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

CHATML_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _raise(message: str) -> None:
    raise RequestError(f"the model's chat template refused these messages: {message}", "messages")


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str, eos_token: str, origin: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        env.globals["raise_exception"] = _raise
        self.origin = origin
        self.source = source
        """The template's Jinja text (a thinking model's markers are read from it: backend/reasoning.py)."""
        """'gguf', 'gemma fallback' or 'chatml fallback': logged at start so users know which one runs."""
        self._template = env.from_string(source)
        self._bos = bos_token
        self._eos = eos_token

    @classmethod
    def for_model(
        cls, gguf_template: str | None, *, bos_token: str, eos_token: str, has_token: Callable[[str], bool]
    ) -> ChatTemplate:
        if gguf_template:
            return cls(gguf_template, bos_token=bos_token, eos_token=eos_token, origin="gguf")
        if has_token("<start_of_turn>") and has_token("<end_of_turn>"):
            return cls(GEMMA_TEMPLATE, bos_token=bos_token, eos_token=eos_token, origin="gemma fallback")
        return cls(CHATML_TEMPLATE, bos_token=bos_token, eos_token=eos_token, origin="chatml fallback")

    def render(self, messages: list[ChatMessage]) -> str:
        payload: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in messages]
        try:
            return self._template.render(
                messages=payload,
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
            )
        except RequestError:
            raise
        except jinja2.TemplateError as exc:
            raise RequestError(
                f"the model's chat template failed on these messages: {exc}", "messages"
            ) from None
