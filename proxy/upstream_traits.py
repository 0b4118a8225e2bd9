"""What one upstream lacks or does differently, learned once: by detection and from what its answers teach.

One record per upstream (``Upstream.traits``), read by the adapters and sources, so that what the proxy
knows of a server is in one place rather than in module caches and flags set from the route:

- ``serial``: the server runs one request at a time and breaks off a stream when another arrives
  (llama-cpp-python, one model lock): a fan-out then asks one request after another, without streaming
  (Q71, Q73). Known from its model listing (``owned_by: "me"`` with ``permissions``), or taught by a
  stream it broke off after ``[DONE]``.
- ``detokenizer``: the endpoint that turns token ids into text (Q74), probed once with an empty list.
- ``tokenizer``, ``tokenizer_unanswered``, ``tokenizer_added``: the endpoint that counts tokens for
  usage the upstream did not report (Q28), the endpoints probed without an answer, and the tokens the
  tokenizer adds to any text (llama-cpp-python's count includes the BOS token).
- ``streams_echo``, ``zero_limit_unbounded``, ``chat_logprobs_need_top``: how requests are asked so that
  llama-cpp-python answers them as OpenAI would. No detection tells these apart yet, so they hold for
  every upstream (as the proxy has always asked), each harmless where the workaround is not needed: an
  echo asked whole and streamed by the proxy, one token asked for ``max_tokens: 0`` and not sent, chat
  logprobs asked with ``top_logprobs: 0`` and the alternatives taken out again.

``None`` is "not known yet" throughout: asked again when next needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NO_TOKENIZER", "UpstreamTraits"]

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

    def broke_off_stream(self) -> None:
        """A stream ended after ``[DONE]`` by a cut connection, a choice without its final chunk: the
        upstream broke it off for another request, so it serves one at a time."""
        self.serial = True
