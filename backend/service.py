"""The engine's front half: validated requests -> tokenized prompts -> jobs, checked before any byte is sent.

Everything that can make a request fail (prompt too long, unknown token ids, a grammar llama.cpp cannot
parse, a suffix on a model without fill-in-the-middle tokens) fails here, so the app can still answer
with a real HTTP status instead of an error inside a started stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as ll

from backend.chat_template import ChatTemplate
from backend.config import QUEUE_SIZE
from backend.context import ContextOptions
from backend.engine import Engine, Event, Job
from backend.kv_size import default_context, startup_line
from backend.loading import LoadedModel, LoadOptions, load_model
from backend.request_errors import RequestError
from backend.requests import GenerationRequest, PromptPart
from backend.sampling import Sampler
from backend.tool_formats import Generic, ToolFormat, detect_format

__all__ = ["Backend", "Prompt", "quiet_llama_log"]

log = logging.getLogger("conformant.backend")
_GGML_WARN, _GGML_ERROR = 3, 4


@dataclass(slots=True)
class Prompt:
    tokens: list[int]
    text: str
    """What ``echo`` sends back: the prompt as text."""


class Backend:
    """One loaded model served by one engine, plus what the HTTP side needs to know about it."""

    def __init__(self, loaded: LoadedModel, engine: Engine, *, model_id: str | None = None) -> None:
        self.loaded = loaded
        model = loaded.model
        self.engine = engine
        self.vocab = engine.vocab
        self.model_id = model_id or Path(loaded.path).stem or "model"
        self.created = int(time.time())
        raw = ll.llama_model_chat_template(model, None)
        self.template = ChatTemplate.for_model(
            raw.decode() if raw else None,
            bos_token=self.vocab.piece_special(self.vocab.bos),
            eos_token=self.vocab.piece_special(self.vocab.eos),
            has_token=lambda text: len(self.vocab.tokenize(text, add_special=False)) == 1,
        )
        self.tool_format: ToolFormat = detect_format(self.template.source)

    # ---- prompts -----------------------------------------------------------------------------------

    def prompt_tokens(self, req: GenerationRequest) -> int:
        """The tokens of a chat request's prompt as the model reads it (its template, its tools), the
        context aside: what ``/v1/messages/count_tokens`` answers."""
        return len(self._templated(req).tokens)

    def _templated(self, req: GenerationRequest) -> Prompt:
        text = self._chat_prompt(req)
        # Most templates write the BOS themselves; adding another would double it.
        bos_text = self.vocab.piece_special(self.vocab.bos) if self.vocab.add_bos else ""
        return Prompt(
            self.vocab.tokenize(text, add_special=not bos_text or not text.startswith(bos_text)), text
        )

    def prompts(self, req: GenerationRequest) -> list[Prompt]:
        if req.endpoint == "chat":
            prompts = [self._templated(req)]
        else:
            prompts = [self._completion_prompt(parts, req.suffix) for parts in req.prompts]
        limit = self.engine.n_ctx_seq
        param = "messages" if req.endpoint == "chat" else "prompt"
        for prompt in prompts:
            if not prompt.tokens:
                raise RequestError("the prompt is empty", param)
            if len(prompt.tokens) >= limit:
                raise RequestError(
                    f"This model's maximum context length is {limit} tokens. However, your prompt is "
                    f"{len(prompt.tokens)} tokens long.",
                    param,
                    code="context_length_exceeded",
                )
            if req.max_tokens is not None and len(prompt.tokens) + req.max_tokens > limit:
                raise RequestError(
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{len(prompt.tokens) + req.max_tokens} tokens ({len(prompt.tokens)} in the prompt, "
                    f"{req.max_tokens} for the completion).",
                    "max_tokens",
                    code="context_length_exceeded",
                )
        return prompts

    def _chat_prompt(self, req: GenerationRequest) -> str:
        """The prompt, and for a request with tools the format that reads the answer and its grammar."""
        if not req.tools or req.tool_choice.mode == "none":
            # 'none': the model is not shown the tools at all
            return self.template.render(req.messages, reasoning_effort=req.reasoning_effort)
        fmt = self.tool_format
        if req.sampling.grammar is not None and not (isinstance(fmt, Generic) and req.response_schema):
            raise RequestError(
                "'tools' cannot be combined with 'grammar', 'json_schema' or (with this model's "
                f"{fmt.name} tool-call format) 'response_format'",
                "tools",
            )
        plan = fmt.grammar(req.tools, req.tool_choice, req.parallel_tool_calls, req.response_schema)
        if plan is not None:
            req.sampling.grammar = plan.gbnf
            req.sampling.grammar_from = "tools"
            req.sampling.grammar_triggers = plan.triggers
        req.tool_format = fmt.bound(req.tools, req.tool_choice)
        system = None
        if isinstance(fmt, Generic):
            system = fmt.system_prompt(
                req.tools,
                req.tool_choice,
                req.parallel_tool_calls,
                req.response_schema,
                template_knows_tools=self.template.knows_tools,
            )
        tools = [t.to_openai() for t in req.tools]
        return self.template.render(
            req.messages, tools=tools, system=system, reasoning_effort=req.reasoning_effort
        )

    def _completion_prompt(self, parts: list[PromptPart], suffix: str | None) -> Prompt:
        tokens: list[int] = []
        if self.vocab.add_bos and isinstance(parts[0], str):
            tokens.append(self.vocab.bos)  # llama.cpp's rule for mixed prompts: BOS only before text
        for part in parts:
            if isinstance(part, str):
                tokens += self.vocab.tokenize(part, add_special=False)
            elif not self.vocab.valid(part):
                raise RequestError(
                    f"'prompt' holds token id {part}, outside the vocabulary (0..{self.vocab.n_tokens - 1})",
                    "prompt",
                )
            else:
                tokens.append(part)
        text = parts[0] if len(parts) == 1 and isinstance(parts[0], str) else self.vocab.detokenize(tokens)
        if suffix is not None:
            if self.vocab.fim is None:
                raise RequestError(
                    "'suffix' needs a model with fill-in-the-middle tokens; this model has none", "suffix"
                )
            pre, suf, mid = self.vocab.fim
            body = [t for t in tokens if t != self.vocab.bos]
            head = [self.vocab.bos] if self.vocab.add_bos else []
            tokens = [*head, pre, *body, suf, *self.vocab.tokenize(suffix, add_special=False), mid]
        return Prompt(tokens, text)

    # ---- jobs --------------------------------------------------------------------------------------

    def jobs(self, req: GenerationRequest, prompts: list[Prompt], emit: Callable[[Event], None]) -> list[Job]:
        """One job per (prompt, choice), indexed as OpenAI does: prompt-major. Builds every sampler now so a
        bad grammar is a 400; on failure the samplers already built are freed."""
        capacity = self.engine.n_parallel + self.engine.queue_size
        if len(prompts) * req.n > capacity:
            raise RequestError(
                f"this request asks for {len(prompts) * req.n} sequences (prompts x n); the server holds at "
                f"most {capacity} at once",
                "n" if req.n > 1 else "prompt",  # (the one the client sent: 2,000 prompts named n)
            )
        outside = next((t for t in req.sampling.logit_bias if not self.vocab.valid(t)), None)
        if outside is not None:  # (dropped unsaid, as a token id of a prompt is not)
            last = self.vocab.n_tokens - 1
            raise RequestError(
                f"'logit_bias' holds token id {outside}, outside the vocabulary (0..{last})", "logit_bias"
            )
        jobs: list[Job] = []
        try:
            for p, prompt in enumerate(prompts):
                for c in range(req.n):
                    index = p * req.n + c
                    sampler = Sampler(
                        self.vocab.ptr,
                        req.sampling,
                        eog_tokens=self.vocab.eog_tokens if req.sampling.ignore_eos else [],
                        seed_offset=c,
                    )
                    jobs.append(
                        Job(
                            index=index,
                            prompt=prompt.tokens,
                            sampler=sampler,
                            emit=emit,
                            max_tokens=req.max_tokens,
                            stop=req.stop,
                            logprobs=req.logprobs,
                            prompt_logprobs=req.echo and req.logprobs is not None,
                            cache_prompt=req.cache_prompt,
                            ignore_eos=req.sampling.ignore_eos,
                        )
                    )
        except BaseException:
            for job in jobs:
                job.sampler.close()
            raise
        return jobs

    @classmethod
    def open(
        cls,
        path: str,
        load: LoadOptions | None = None,
        context: ContextOptions | None = None,
        *,
        queue_size: int = QUEUE_SIZE.default,
        model_id: str | None = None,
    ) -> Backend:
        """Load the model and start the engine; raises ModelLoadError or ContextOptionError."""
        loaded = load_model(path, load or LoadOptions())
        try:
            quiet_llama_log()
            options = context or ContextOptions()
            size, per_token = default_context(loaded, options)
            engine = Engine(
                loaded.model,
                options.to_params(size.tokens),
                queue_size=queue_size,
                batch_invariant=options.batch_invariant,
            )
        except BaseException:
            loaded.close()
            raise
        backend = cls(loaded, engine, model_id=model_id)
        log.info("serving %s as %r, chat template: %s", path, backend.model_id, backend.template.origin)
        split_by = "--batch-invariant" if options.batch_invariant else "--no-kv-unified"
        log.info(
            "%s",
            startup_line(
                size,
                per_token,
                n_ctx=engine.n_cells,
                n_ctx_seq=engine.n_ctx_seq,
                slots=engine.n_parallel,
                split_by=None if engine.unified else split_by,
            ),
        )
        return backend

    def close(self) -> None:
        self.engine.close()
        self.loaded.close()


_LOG_CALLBACK: Any = None


def quiet_llama_log() -> None:
    """Route llama.cpp's log into ``logging``: warnings and errors show, its per-context chatter does not."""
    global _LOG_CALLBACK
    llama_log = logging.getLogger("conformant.backend.llama")

    def on_log(level: int, text: bytes | None, _: Any) -> None:
        if text and level in (_GGML_WARN, _GGML_ERROR) and text.strip():
            llama_log.warning("%s", text.decode("utf-8", "replace").rstrip())

    _LOG_CALLBACK = ll.llama_log_callback(on_log)  # kept: llama.cpp calls it from any thread, any time
    ll.llama_log_set(_LOG_CALLBACK, None)
