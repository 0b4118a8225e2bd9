"""``truncation: "auto"`` cuts the oldest turns of a conversation, whole, by the overflow's own counts."""

from __future__ import annotations

from typing import Any

from conformance.context_overflow import overflow_counts
from conformance.protocols.messages.errors import overflow_message
from conformance.protocols.responses.truncation import shortened_messages

SYSTEM = {"role": "system", "content": "Be brief."}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _call(call_id: str) -> list[dict[str, Any]]:
    function = {"name": "read", "arguments": "{}"}
    called = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }
    return [called, {"role": "tool", "tool_call_id": call_id, "content": "x" * 400}]


def _overflow(prompt: int, limit: int, completion: int) -> str:
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). Please "
        "reduce the length of the messages or completion."
    )


def test_the_counts_are_read_from_the_cores_words_and_llama_servers() -> None:
    counts = overflow_counts(_overflow(3000, 2048, 100))
    assert counts is not None
    assert (counts.prompt, counts.limit, counts.completion) == (3000, 2048, 100)
    counts = overflow_counts(
        "request (4210 tokens) exceeds the available context size (2048 tokens), try increasing it"
    )
    assert counts is not None
    assert (counts.prompt, counts.limit, counts.completion) == (4210, 2048, 0)
    assert overflow_counts("the prompt is too long") is None
    # Anthropic's words of llama-server's overflow carry its numbers (Claude Code compacts by them).
    llama = "request (4210 tokens) exceeds the available context size (2048 tokens), try increasing it"
    assert overflow_message(llama) == "prompt is too long: 4210 tokens > 2048 maximum"


def test_the_oldest_turns_go_and_the_instructions_and_the_turn_being_answered_stay() -> None:
    old = [_user("a" * 1000), _assistant("b" * 1000), _user("c" * 1000), _assistant("d" * 1000)]
    now = [_user("the question"), *_call("call_now")]
    messages = [SYSTEM, *old, *now]
    # A third of the text over the room (and a tenth more): the oldest exchange goes.
    shorter = shortened_messages(messages, _overflow(2000, 1500, 100))
    assert shorter == [SYSTEM, _user("c" * 1000), _assistant("d" * 1000), *now]
    # Past half: both go, never a user message alone with its answer left.
    assert shortened_messages(messages, _overflow(2000, 1100, 100)) == [SYSTEM, *now]
    # Without counts, half of what may go.
    assert shortened_messages(messages, "too long") == [
        SYSTEM,
        _user("c" * 1000),
        _assistant("d" * 1000),
        *now,
    ]
    # Counts that say it all but fits: still one exchange, the overflow said it does not.
    assert shortened_messages(messages, _overflow(2000, 4000, 0)) == [SYSTEM, *old[2:], *now]


def test_a_call_goes_with_its_answers_and_what_is_left_begins_with_a_user_message() -> None:
    messages = [
        SYSTEM,
        _assistant("Hello. " * 20),
        _user("first"),
        *_call("call_1"),
        _user("second"),
        *_call("call_2"),
    ]
    messages += [_user("now")]
    # The greeting before the first question goes first, alone: what is left begins with a question.
    shorter = shortened_messages(messages, _overflow(1000, 990, 0))
    assert shorter == [SYSTEM, *messages[2:]]
    shorter = shortened_messages(messages, _overflow(1000, 700, 0))
    assert shorter == [SYSTEM, _user("second"), *_call("call_2"), _user("now")]
    assert shortened_messages(messages, _overflow(10_000, 100, 0)) == [SYSTEM, _user("now")]


def test_nothing_goes_where_nothing_may_or_it_would_not_help() -> None:
    assert shortened_messages([SYSTEM, _user("only")], _overflow(5000, 2048, 0)) is None
    assert shortened_messages([_user("a"), _assistant("b"), _user("c")], _overflow(100, 2048, 4096)) is None


def test_an_agents_one_long_turn_loses_its_oldest_rounds_and_keeps_its_newest() -> None:
    """Codex CLI works a task as one user message and then round after round of calls and outputs: with
    only whole exchanges allowed to go, such a turn could not be shortened at all (the 400 came back)."""
    task = _user("fix the bug")
    rounds = [_call(f"call_{i}") for i in range(6)]
    messages = [SYSTEM, task, *(m for r in rounds for m in r)]
    # A fifth over the room (and a tenth more; a round is about a sixth of the text): the two oldest
    # rounds go, each with its output.
    shorter = shortened_messages(messages, _overflow(3000, 2400, 0))
    assert shorter == [SYSTEM, task, *(m for r in rounds[2:] for m in r)]
    assert shortened_messages(messages, _overflow(100_000, 100, 0)) == [SYSTEM, task, *rounds[-1]]
    # Earlier exchanges go before any round of the turn being answered.
    earlier = [_user("a" * 400), _assistant("b" * 400)]
    shorter = shortened_messages([SYSTEM, *earlier, *messages[1:]], _overflow(3000, 2600, 0))
    assert shorter == messages
    # One round alone is the newest: nothing may go.
    assert shortened_messages([SYSTEM, task, *rounds[0]], _overflow(3000, 2000, 0)) is None


def test_a_long_turn_before_the_last_question_loses_rounds_not_its_task() -> None:
    """A task worked in rounds, then a short question: the whole turn went as one exchange, task and all
    (a black-box test found the upstream given only the instructions and the question)."""
    task, question = _user("fix the bug"), _user("Now summarize please.")
    rounds = [_call(f"call_{i}") for i in range(6)]
    messages = [SYSTEM, task, *(m for r in rounds for m in r), question]
    shorter = shortened_messages(messages, _overflow(3000, 2700, 0))
    assert shorter == [SYSTEM, task, *(m for r in rounds[1:] for m in r), question]
    # All its rounds but the last may go before the task does; then the task with its last round.
    assert shortened_messages(messages, _overflow(3000, 600, 0)) == [SYSTEM, task, *rounds[-1], question]
    assert shortened_messages(messages, _overflow(100_000, 100, 0)) == [SYSTEM, question]


def test_what_is_kept_is_the_rooms_share_far_past_the_context_too() -> None:
    """The share dropped was the overflow's and a tenth more: 40 rounds far past the context kept 2 where
    5 fit (a black-box test: 861 of 2,032 tokens). Kept now: the room's share, less a twentieth."""
    task = _user("fix the bug")
    rounds = [_call(f"call_{i}") for i in range(40)]
    messages = [SYSTEM, task, *(m for r in rounds for m in r)]
    round_share = 1 / 40  # (the system message and the task are a few dozen characters of some 22,000)
    shorter = shortened_messages(messages, _overflow(40_000, int(40_000 * 5.5 * round_share), 0))
    assert shorter is not None
    assert len(shorter) == 2 + 2 * 5  # five rounds kept (5.5 fit; a twentieth less is 5.2)
