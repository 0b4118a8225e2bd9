"""What one upstream lacks or does differently, learned once: by detection and from what its answers teach.

One record per upstream (``Upstream.traits``), read by the adapters and sources, so that what the proxy
knows of a server is in one place rather than in module caches and flags set from the route:

- ``serial``: the server runs one request at a time and breaks off a stream when another arrives
  (llama-cpp-python, one model lock): a fan-out then asks one request after another, without streaming
  (Q71, Q73). Known from its model listing (``owned_by: "me"`` with ``permissions``), or taught by a
  stream it broke off after ``[DONE]``; known not to where ``/props`` shows llama.cpp's server, whose
  HTTP threads answer a count or a listing beside a stream, or the bundled backend (``concurrent``).
- ``detokenizer``: the endpoint that turns token ids into text (Q74), probed once with an empty list.
- ``tokenizer``, ``tokenizer_unanswered``, ``tokenizer_added``: the endpoint that counts tokens for
  usage the upstream did not report (Q28), the endpoints probed without an answer, and the tokens the
  tokenizer adds to any text (llama-cpp-python's count includes the BOS token).
- ``streams_echo``, ``zero_limit_unbounded``, ``chat_logprobs_need_top``: how requests are asked so that
  llama-cpp-python answers them as OpenAI would. No detection tells these apart yet, so they hold for
  every upstream (as the proxy has always asked), each harmless where the workaround is not needed: an
  echo asked whole and streamed by the proxy, one token asked for ``max_tokens: 0`` and not sent, chat
  logprobs asked with ``top_logprobs: 0`` and the alternatives taken out again.

- ``reasoning_field``: the name the upstream reads an assistant message's reasoning under, taken to be
  the one it sends reasoning in (Q39): ``reasoning_content`` (llama.cpp's
  ``common_chat_msgs_parse_oaicompat``, DeepSeek's API) until the upstream sends ``reasoning`` (vLLM since
  PR #27752, Ollama's ``Message.Reasoning``).
- ``schema_format``: how the upstream takes a JSON Schema to enforce on a chat answer: OpenAI's
  ``response_format: {"type": "json_schema", ...}`` (llama-server, vLLM, OpenAI), or llama-cpp-python's
  ``{"type": "json_object", "schema": ...}`` (its ``ChatCompletionRequestResponseFormat`` knows only
  ``text`` and ``json_object``, and answers ``json_schema`` with a 500). Known from the model listing, as
  ``serial`` is.
- ``named_tool_choice_only``, ``assistant_content_string``: llama-cpp-python enforces only a named
  ``tool_choice`` ("required" is served as ``auto``, Q80) and refuses an assistant message's
  ``content: null`` with a 500 (Q81): proxy/adapters/tool_requests.py. Known from the model listing.
- ``ignored_tool_choices``, ``schema_enforced``: the forced ``tool_choice`` kinds (``required``, a named
  function) the upstream answered without any call, and whether the JSON Schema of a ``response_format``
  made its answer the call the proxy asked for as JSON output (False once it did not): taught by its
  answers, so that a later forced call goes straight to the way the upstream does enforce, or to the 400
  where none does (proxy/adapters/forced_choice.py).
- ``listing_read``: whether a model listing was read and learned from (the traits above then known).
- ``counting_paths``: a protocol's counting route of the upstream's own (``/v1/messages/count_tokens``:
  the bundled backend's, llama-server's), False once it answered that it has none (404, 405, 501), so
  that a Message's stream does not ask it again (proxy/sources/prompt_count.py).
- ``native_paths``: the paths of protocols the upstream serves itself (llama-server's ``/v1/responses``),
  as a probe found them where ``--responses auto`` (or the file's key) asked (proxy/routing/replica.py).

``None`` is "not known yet" throughout: asked again when next needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["NO_TOKENIZER", "SchemaFormat", "UpstreamTraits", "is_llama_cpp_python_listing"]

SchemaFormat = Literal["json_schema", "json_object_schema"]


def is_llama_cpp_python_listing(entries: Any) -> bool:
    """Whether ``/v1/models`` entries are llama-cpp-python's: ``owned_by: "me"`` with ``permissions``."""
    return isinstance(entries, list) and any(
        isinstance(e, dict) and e.get("owned_by") == "me" and "permissions" in e for e in entries
    )


NO_TOKENIZER = ""
"""``tokenizer`` once every endpoint was probed and none gave a count."""


@dataclass(slots=True)
class UpstreamTraits:
    serial: bool | None = None
    detokenizer: tuple[str, str] | None = None
    """(path, field of the answer holding the text), once ``detokenizer_probed``."""
    detokenizer_probed: bool = False
    tokenizer: str | None = None
    tokenizer_unanswered: set[str] = field(default_factory=set)
    tokenizer_added: int | None = None
    streams_echo: bool = False
    """Whether a streamed echo carries the prompt (and its logprobs): llama-cpp-python's leaves it out,
    its JSON answer does not, so without this an echo is asked unstreamed."""
    zero_limit_unbounded: bool = True
    """Whether ``max_tokens: 0`` means "no limit" (llama-cpp-python generates to the end of the
    context): one token is asked for instead, and not sent."""
    chat_logprobs_need_top: bool = True
    """Whether chat logprobs come only with ``top_logprobs`` set (llama-cpp-python): 0 is asked."""

    reasoning_field: str = "reasoning_content"
    schema_format: SchemaFormat | None = None
    named_tool_choice_only: bool = False
    assistant_content_string: bool = False
    counts_unshown_tokens: bool = False
    """Whether, with tools offered, its usage counts tokens it never shows (llama-cpp-python's
    function-calling handlers generate their format's prefix first): an empty answer is no lost text."""
    ignored_tool_choices: set[str] = field(default_factory=set)
    schema_enforced: bool | None = None
    listing_read: bool = False
    counting_paths: dict[str, bool] = field(default_factory=dict)
    native_paths: dict[str, bool] = field(default_factory=dict)
    chat_logprobs_unfilled: bool = False
    """Whether its chat answers leave ``logprobs`` null though they were asked (ik_llama.cpp before its
    #768: its sampler never fills them on the OpenAI routes): such a request is refused with a 400 naming
    ``logprobs`` (proxy/sources/upstream.py), never answered as if they had been given."""

    def learn_listing(self, entries: Any) -> None:
        """What a ``/v1/models`` listing read now tells: llama-cpp-python's serves one request at a time,
        takes a schema as ``json_object`` and tools as tool_requests.py sends them; any other listing,
        OpenAI's ``json_schema`` and tools as the client sent them."""
        llama_cpp_python = is_llama_cpp_python_listing(entries)
        self.serial = bool(self.serial) or llama_cpp_python  # (a broken-off stream taught it already)
        self.schema_format = "json_object_schema" if llama_cpp_python else "json_schema"
        self.named_tool_choice_only = self.assistant_content_string = llama_cpp_python
        self.counts_unshown_tokens = llama_cpp_python
        self.listing_read = True

    def sent_reasoning_as(self, name: str) -> None:
        """The upstream sent reasoning under ``name``: it reads it there in assistant messages too."""
        self.reasoning_field = name

    def ignored_tool_choice(self, kind: str) -> None:
        """A forced ``tool_choice`` of ``kind`` ("required", "named") was answered without a call."""
        self.ignored_tool_choices.add(kind)

    def enforced_schema(self, enforced: bool) -> None:
        """A call asked as JSON output came back as that JSON (True) or as anything else (False, kept)."""
        if self.schema_enforced is not False:
            self.schema_enforced = enforced

    def serves_several(self) -> None:
        """Detection found a server that answers other requests beside a stream (llama.cpp's, the
        bundled backend's): not ``serial``, unless a stream it broke off taught otherwise."""
        if self.serial is None:
            self.serial = False

    def broke_off_stream(self) -> None:
        """A stream ended after ``[DONE]`` by a cut connection, a choice without its final chunk: the
        upstream broke it off for another request, so it serves one at a time."""
        self.serial = True
