"""Chat messages -> prompt text, with the GGUF's own Jinja chat template.

The template is rendered with jinja2 in a sandbox, as Hugging Face's ``apply_chat_template`` does
(``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``, ``tools``
as the request's OpenAI tool entries, and ``reasoning_effort`` when the request sets it, which
gpt-oss's template reads). Messages are passed as HF's templates read them: an assistant turn
with ``tool_calls`` (``arguments`` as an object), a ``tool`` turn with ``tool_call_id``. A template that
knows no tool calls (no ``tool_calls`` in its source, like both fallbacks below) gets them as text the
way llama.cpp's minja polyfills do: an assistant's calls as the generic format's
``{"tool_calls": [...]}`` JSON, a tool's answer as a user turn holding ``{"tool_response": ...}``.

Fallback, for GGUF files without ``tokenizer.chat_template`` (Gemma 3 270M's is one): when the vocabulary
has Gemma's turn tokens (``<start_of_turn>``/``<end_of_turn>``) the Gemma format is used (system text
goes in front of the first user turn, as Gemma's own template does), otherwise ChatML
(``<|im_start|>role ... <|im_end|>``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from backend.request_errors import RequestError
from backend.requests import ChatMessage

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


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Hugging Face's ``tojson`` filter: plain ``json.dumps``, not jinja2's HTML-escaping one (templates
    write tool schemas with it; jinja2's would turn ``<`` into ``\\u003c``)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    """Hugging Face's ``strftime_now`` global (Llama 3.x templates date their system prompt with it)."""
    return datetime.datetime.now().strftime(fmt)


def _raise(message: str) -> None:
    raise RequestError(f"the model's chat template refused these messages: {message}", "messages")


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str, eos_token: str, origin: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        env.filters["tojson"] = _tojson
        self.origin = origin
        self.source = source
        """The template's Jinja text (a thinking model's markers are read from it: backend/reasoning.py)."""
        """'gguf', 'gemma fallback' or 'chatml fallback': logged at start so users know which one runs."""
        self._template = env.from_string(source)
        self.source = source
        self.knows_tool_calls = "tool_calls" in source
        """Whether the template renders assistant ``tool_calls`` and ``tool`` turns itself."""
        self.knows_tools = "tools" in source
        """Whether the template shows the ``tools`` list to the model itself."""
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

    def render(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        system: str | None = None,
        reasoning_effort: str | None = None,
    ) -> str:
        """The prompt; ``tools`` as the template's ``tools`` variable, ``system`` added to the system
        message (or as one in front), as llama.cpp adds its generic format's instruction;
        ``reasoning_effort``, when given, as that variable (left undefined otherwise, so that a
        template's own default holds)."""
        payload = [self._message(m) for m in messages]
        if system:
            if payload and payload[0]["role"] == "system":
                payload[0] = {**payload[0], "content": f"{payload[0]['content']}\n\n{system}"}
            else:
                payload.insert(0, {"role": "system", "content": system})
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if reasoning_effort is not None:
            extra["reasoning_effort"] = reasoning_effort
        try:
            return self._template.render(
                messages=payload,
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
                **extra,
            )
        except RequestError:
            raise
        except jinja2.TemplateError as exc:
            raise RequestError(
                f"the model's chat template failed on these messages: {exc}", "messages"
            ) from None

    def _message(self, m: ChatMessage) -> dict[str, Any]:
        if self.knows_tool_calls:
            out: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                out["tool_calls"] = m.tool_calls
            if m.tool_call_id is not None:
                out["tool_call_id"] = m.tool_call_id
            if m.name is not None:
                out["name"] = m.name
            return out
        if m.tool_calls:
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"], "id": c["id"]}
                for c in m.tool_calls
            ]
            text = json.dumps({"tool_calls": calls}, ensure_ascii=False)
            return {"role": m.role, "content": f"{m.content}\n{text}" if m.content else text}
        if m.role == "tool":
            answer = {"tool_call_id": m.tool_call_id, "content": m.content}
            return {"role": "user", "content": json.dumps({"tool_response": answer}, ensure_ascii=False)}
        return {"role": m.role, "content": m.content}
