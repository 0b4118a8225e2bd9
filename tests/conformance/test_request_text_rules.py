"""Rules that hold a response's text and counts against the request: echo (Q72), the token limit in usage,
and legacy logprobs that reach past the text (spec), in bodies and across a stream's chunks."""

from __future__ import annotations

import json
from typing import Any

from conformance.judge import judge_response
from tests.conformance.test_rules import JSON, SSE, chat_chunk, chat_request, delta, judged, stream

MESSAGES = [{"role": "user", "content": "Hi"}]

PROMPT = "The capital of France is"
GENERATED = " the most populous city"
# llama-cpp-python's recorded answer (conformance/corpus/llama-cpp-python/...-logprobs): offsets count
# from the start of the prompt, as OpenAI's do.
LOGPROBS: dict[str, list[Any]] = {
    "tokens": [" the", " most", " populous", " city"],
    "token_logprobs": [-1.7, -2.7, -1.7, -0.8],
    "top_logprobs": [{" the": -1.7}, {" most": -2.7}, {" populous": -1.7}, {" city": -0.8}],
    "text_offset": [24, 28, 33, 42],
}


def completions_request(**body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/completions", "body": {"model": "m", "prompt": PROMPT, **body}}


def choice(text: str, index: int = 0, logprobs: Any = None, finish: str | None = "length") -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def text_completion(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": list(choices),
        **extra,
    }


def body(*choices: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps(text_completion(*choices, **extra)).encode()


def usage(completion: int, prompt: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **extra,
    }


def findings(raw: bytes, request: dict[str, Any] | None, headers: dict[str, str] = JSON) -> list[Any]:
    verdict = judge_response(raw, request=request, status=200, headers=headers)
    return [(f.rule, f.event, f.pointer, f.quirk) for f in verdict.errors]


# --- echo (Q72) ---


def test_echoed_body_begins_with_the_prompt() -> None:
    asked = completions_request(echo=True)
    assert judged(body(choice(PROMPT + GENERATED)), asked, headers=JSON) == (set(), set())
    assert findings(body(choice(GENERATED)), asked) == [("echo-ignored", None, "/choices/0/text", "Q72")]
    # The prompt mangled on the way back (a space lost) is not the prompt.
    assert judged(body(choice(PROMPT.replace(" of", "of"))), asked, headers=JSON)[0] == {"echo-ignored"}
    # A text that stops inside the prompt did not echo it whole.
    assert findings(body(choice(PROMPT[:10])), asked) == [("echo-ignored", None, "/choices/0/text", "Q72")]


def test_echo_is_judged_only_for_text_prompts_that_asked_for_it() -> None:
    assert judged(body(choice(GENERATED)), completions_request(), headers=JSON) == (set(), set())
    tokens = completions_request(echo=True, prompt=[464, 3139, 286, 4881, 318])
    assert judged(body(choice("anything")), tokens, headers=JSON) == (set(), set())
    assert judged(body(choice(GENERATED)), None, headers=JSON) == (set(), set())
    chat = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "echo": True},
    }
    message = {"role": "assistant", "content": GENERATED, "refusal": None}
    answer = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
    chat_body = dict(text_completion(answer), object="chat.completion", id="chatcmpl-1")
    assert judged(json.dumps(chat_body).encode(), chat, headers=JSON) == (set(), set())
    text = completions_request(echo=True, prompt=[PROMPT])  # an array of one text prompt is judged
    assert judged(body(choice("anything")), text, headers=JSON)[0] == {"echo-ignored"}


def test_echo_per_prompt_of_an_array_with_n() -> None:
    asked = completions_request(echo=True, prompt=["Sky:", "Grass:"], n=2)
    texts = ["Sky: blue", "Sky: grey", "Grass: green", "Grass: wet"]
    good = body(*(choice(t, i) for i, t in enumerate(texts)))
    assert judged(good, asked, headers=JSON) == (set(), set())
    swapped = body(*(choice(t, i) for i, t in enumerate(texts[2:] + texts[:2])))
    [wrong] = judge_response(swapped, request=asked, status=200, headers=JSON).errors
    assert [wrong.pointer, *wrong.pointers] == [f"/choices/{i}/text" for i in range(4)]
    assert wrong.count == 4


def text_chunk(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return text_completion(*choices, **extra)


def test_echo_joined_over_a_stream() -> None:
    asked = completions_request(echo=True, stream=True)
    pieces = ["The capi", "tal of France", " is the most", " populous"]
    chunks = [text_chunk(choice(p, finish=None)) for p in pieces]
    end = text_chunk(choice("", finish="length"))
    assert judged(stream(*chunks, end), asked) == (set(), set())
    # The prompt is left in the third chunk: the finding points there.
    wrong = [*chunks[:2], text_chunk(choice(" was the", finish=None)), end]
    assert findings(stream(*wrong), asked, SSE) == [("echo-ignored", 2, "/choices/0/text", "Q72")]
    # The stream finishes before the prompt has all come: the finding is at the finish.
    short = stream(chunks[0], end)
    assert findings(short, asked, SSE) == [("echo-ignored", 1, None, "Q72")]
    # Cut off inside the prompt, without a finish: nothing is certain.
    assert judged(stream(chunks[0], done=False), asked)[0] == {"done-missing"}


# --- usage against the token limit (spec) ---


def test_completion_tokens_within_max_tokens_times_sequences() -> None:
    asked = completions_request(max_tokens=4)
    assert judged(body(choice(GENERATED), usage=usage(4)), asked, headers=JSON) == (set(), set())
    assert findings(body(choice(GENERATED), usage=usage(5)), asked) == [
        ("usage-over-max-tokens", None, "/usage/completion_tokens", "spec")
    ]
    two = completions_request(max_tokens=4, n=2)
    pair = (choice("a"), choice("b", 1))
    assert judged(body(*pair, usage=usage(8)), two, headers=JSON)[0] == set()
    assert judged(body(*pair, usage=usage(9)), two, headers=JSON)[0] == {"usage-over-max-tokens"}
    # best_of sequences are all generated (and billed), though only n come back.
    best = completions_request(max_tokens=4, best_of=3)
    assert judged(body(choice("a"), usage=usage(12)), best, headers=JSON)[0] == set()
    assert judged(body(choice("a"), usage=usage(13)), best, headers=JSON)[0] == {"usage-over-max-tokens"}
    # Each prompt of an array gets n sequences.
    prompts = completions_request(max_tokens=4, prompt=["a", "b"])
    assert judged(body(*pair, usage=usage(8)), prompts, headers=JSON)[0] == set()
    assert judged(body(*pair, usage=usage(9)), prompts, headers=JSON)[0] == {"usage-over-max-tokens"}


def test_max_tokens_zero_generates_nothing() -> None:
    scoring = completions_request(max_tokens=0, echo=True)
    assert judged(body(choice(PROMPT), usage=usage(0)), scoring, headers=JSON) == (set(), set())
    verdict = judge_response(
        body(choice(PROMPT + " Paris"), usage=usage(1)), request=scoring, status=200, headers=JSON
    )
    # The text generated is the deviation; usage that counts it truly is not a second one (issue 33).
    [generated] = verdict.errors
    assert (generated.rule, generated.quirk) == ("max-tokens-zero-generated", "spec")
    # Usage that counts tokens where no text came past the prompt is the count's own deviation.
    verdict = judge_response(body(choice(PROMPT), usage=usage(1)), request=scoring, status=200, headers=JSON)
    [over] = verdict.errors
    assert (over.rule, over.quirk) == ("usage-over-max-tokens", "spec")
    assert "max_tokens 0" in over.message


def test_max_completion_tokens_counts_reasoning_once() -> None:
    asked = chat_request(max_completion_tokens=3, stream_options={"include_usage": True})
    first = chat_chunk([delta("", role="assistant")])
    text = chat_chunk([delta("Hi")])
    end = chat_chunk([delta(finish="length")])
    # Two of the three tokens were reasoning: completion_tokens already includes them.
    details: dict[str, Any] = {"completion_tokens_details": {"reasoning_tokens": 2}}
    within = chat_chunk([], usage=usage(3, **details))
    assert judged(stream(first, text, end, within), asked) == (set(), set())
    over = chat_chunk([], usage=usage(4, **details))
    assert findings(stream(first, text, end, over), asked, SSE) == [
        ("usage-over-max-tokens", 3, "/usage/completion_tokens", "spec")
    ]
    # With both limits set, max_completion_tokens is the limit (as OpenAI reads them), and OpenAI refuses
    # the request (invalid_parameter_combination), which a 200 then shows.
    both = chat_request(max_tokens=2, max_completion_tokens=3, stream_options={"include_usage": True})
    assert judged(stream(first, text, end, within), both) == ({"invalid-request-accepted"}, set())
    assert judged(stream(first, text, end, over), both)[0] == {
        "invalid-request-accepted",
        "usage-over-max-tokens",
    }
    assert judged(stream(first, text, end, within), None)[0] == set()


# --- legacy logprobs against the text (spec) ---


def test_offsets_count_from_the_start_of_the_prompt() -> None:
    asked = completions_request(logprobs=1, max_tokens=4)
    assert judged(body(choice(GENERATED, logprobs=LOGPROBS)), asked, headers=JSON) == (set(), set())
    # 47 is the end of prompt and text: an empty closing token may start there; 48 is past it.
    closing = {k: [*v, v[-1]] for k, v in LOGPROBS.items()}
    at_end = {**closing, "tokens": [*LOGPROBS["tokens"], ""], "text_offset": [24, 28, 33, 42, 47]}
    assert judged(body(choice(GENERATED, logprobs=at_end)), asked, headers=JSON) == (set(), set())
    past = {**at_end, "text_offset": [24, 28, 33, 42, 48]}
    assert findings(body(choice(GENERATED, logprobs=past)), asked) == [
        ("text-offset-past-end", None, "/choices/0/logprobs/text_offset", "spec")
    ]


def test_offsets_spread_further_than_the_text_without_a_known_prompt() -> None:
    spread = {**LOGPROBS, "text_offset": [0, 4, 9, 24]}  # 24 - 0 > 23 characters of text
    assert judged(body(choice(GENERATED, logprobs=spread)), None, headers=JSON)[0] == {"text-offset-past-end"}
    assert judged(body(choice(GENERATED, logprobs=LOGPROBS)), None, headers=JSON) == (set(), set())
    # A token prompt's length is unknown: offsets far along are fine while they fit the text's length.
    tokens = completions_request(logprobs=1, prompt=[1, 2, 3])
    far = {**LOGPROBS, "text_offset": [900, 904, 909, 918]}
    assert judged(body(choice(GENERATED, logprobs=far)), tokens, headers=JSON) == (set(), set())


def test_offsets_with_echo_end_with_the_text() -> None:
    asked = completions_request(logprobs=1, echo=True, max_tokens=1)
    text = "café au lait"  # 12 characters, 13 UTF-8 bytes: a server counting bytes is not wrong
    scored = {
        "tokens": ["caf", "é", " au", " lait"],
        "token_logprobs": [None, -1.0, -1.0, -1.0],
        "top_logprobs": [None, {"é": -1.0}, {" au": -1.0}, {" lait": -1.0}],
        "text_offset": [0, 3, 5, 13],
    }
    request = {**asked, "body": {**asked["body"], "prompt": "café au"}}
    assert judged(body(choice(text, logprobs=scored)), request, headers=JSON) == (set(), set())
    past = {**scored, "text_offset": [0, 3, 5, 14]}
    assert judged(body(choice(text, logprobs=past)), request, headers=JSON)[0] == {"text-offset-past-end"}


def test_more_tokens_than_the_text_holds() -> None:
    asked = completions_request(logprobs=1, max_tokens=6)
    extra = {k: [*v, v[0], v[0]] for k, v in LOGPROBS.items() if k != "tokens"}
    extra["tokens"] = [*LOGPROBS["tokens"], " of", " France"]
    extra["text_offset"] = [24, 28, 33, 42, 47, 47]
    verdict = judge_response(body(choice(GENERATED, logprobs=extra)), request=asked, status=200, headers=JSON)
    assert [(f.rule, f.pointer) for f in verdict.errors] == [
        ("logprobs-tokens-past-end", "/choices/0/logprobs/tokens")
    ]
    # One token too many is no certainty: a detokenizer drops a first token's space, a special token
    # closes the text.
    one = {k: v[:5] for k, v in extra.items()}
    assert judged(body(choice(GENERATED, logprobs=one)), asked, headers=JSON) == (set(), set())
    first_space = {k: v[:2] for k, v in LOGPROBS.items()}
    first_space.update(tokens=[" The", " capital"], text_offset=[0, 3])
    assert judged(body(choice("The capital", logprobs=first_space)), None, headers=JSON) == (set(), set())


def test_byte_level_tokens_count_for_no_more_than_they_can_stand_for() -> None:
    pieces = [
        ["bytes:\\xc3", "bytes:\\xa9", "bytes:\\xc3", "bytes:\\xa9"],  # OpenAI's form of partial bytes
        ["\ufffd", "\ufffd", "\ufffd", "\ufffd"],  # a detokenizer's replacement characters
        ["<0xC3>", "<0xA9>", "<0xC3>", "<0xA9>"],  # SentencePiece byte fallback
        ["token_id:1", "token_id:2", "token_id:3", "token_id:4"],  # vLLM's return_tokens_as_token_ids
        ["Ã", "©", "Ã", "©"],  # raw byte-level BPE: one character per byte
        ["é", "é", "<|endoftext|>", "</s>"],
    ]
    for tokens in pieces:
        logprobs = {
            "tokens": tokens,
            "token_logprobs": [-1.0] * 4,
            "top_logprobs": [None] * 4,
            "text_offset": [0, 0, 2, 2],
        }
        raw = body(choice("éé", logprobs=logprobs))
        assert judged(raw, None, headers=JSON) == (set(), set()), tokens
    # Whole characters count: four tokens of text where the text holds one (of two bytes).
    logprobs = {"tokens": ["é"] * 4, "token_logprobs": [-1.0] * 4, "top_logprobs": [None] * 4}
    assert judged(body(choice("é", logprobs=logprobs)), None, headers=JSON)[0] == {"logprobs-tokens-past-end"}


def test_a_stop_sequence_may_be_scored_past_the_text() -> None:
    asked = completions_request(logprobs=1, stop=["\n"])
    # The stop matched inside a token that goes on: "\nParis is" is scored past the text's end.
    extra = {k: [*v, v[0], v[0], v[0]] for k, v in LOGPROBS.items()}
    extra.update(tokens=[*LOGPROBS["tokens"], "\nParis is", " the", " capital"])
    extra.update(text_offset=[24, 28, 33, 42, 47, 57, 61])
    assert judged(body(choice(GENERATED, logprobs=extra, finish="stop")), asked, headers=JSON) == (
        set(),
        set(),
    )
    errors, _ = judged(body(choice(GENERATED, logprobs=extra, finish="length")), asked, headers=JSON)
    assert errors == {"text-offset-past-end", "logprobs-tokens-past-end"}


def test_logprobs_judged_over_a_whole_stream() -> None:
    asked = completions_request(logprobs=1, stream=True, max_tokens=4)
    chunks = [
        text_chunk(choice(token, logprobs={k: [v[i]] for k, v in LOGPROBS.items()}, finish=None))
        for i, token in enumerate(LOGPROBS["tokens"])
    ]
    end = text_chunk(choice("", finish="length"))
    assert judged(stream(*chunks, end), asked) == (set(), set())
    # The last token's offset past the end: found at the end, pointing at the chunk that carried it.
    last = {k: [v[-1]] for k, v in LOGPROBS.items()}
    late = text_chunk(choice(" city", logprobs={**last, "text_offset": [60]}, finish=None))
    assert findings(stream(*chunks[:3], late, end), asked, SSE) == [
        ("text-offset-past-end", 3, "/choices/0/logprobs/text_offset", "spec")
    ]
