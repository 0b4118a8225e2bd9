"""Each named repair of proxy/normalizer/field_repairs.py alone, on one small upstream choice (no
sockets, no normalizer): what it sends, what it counts, and when it drops the choice or fails.

The scenario files (test_normalizer.py, test_hostile_upstreams.py) keep the end-to-end behaviour; these
pin each repair's own contract and the orders the tuples run them in.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.api_errors import APIError
from conformance.request_info import RequestInfo
from proxy.normalizer.choices import ChoiceState
from proxy.normalizer.field_repairs import (
    CHAT_DELTA_REPAIRS,
    CHAT_MESSAGE_REPAIRS,
    FINISH_REPAIRS,
    TEXT_DELTA_REPAIRS,
    TEXT_MESSAGE_REPAIRS,
    Delta,
    Finish,
    Message,
    chat_choice_logprobs,
    choice_index,
    delta_content,
    delta_finish,
    delta_logprobs,
    delta_reasoning,
    delta_refusal,
    delta_role,
    delta_text,
    delta_text_logprobs,
    delta_tool_calls,
    empty_delta,
    empty_text,
    final_reason,
    first_delta,
    limit_finish,
    message_content,
    message_finish,
    message_logprobs,
    message_reasoning,
    message_refusal,
    message_text,
    message_tool_calls,
    missing_finish,
    stop_sequence_finish,
    text_choice_logprobs,
    tool_call_list,
    tool_calls_finish,
    upstream_finish,
    zero_limit_finish,
)
from proxy.normalizer.repairs import Repairs

CHAT = RequestInfo(endpoint="chat", stream=True)
TEXT = RequestInfo(endpoint="completions", stream=True)


def _delta(
    raw: dict[str, Any], request: RequestInfo = CHAT, state: ChoiceState | None = None
) -> tuple[Delta, Repairs]:
    repairs = Repairs()
    state = state or ChoiceState(0, request.stop, False, request.echoed)
    return Delta(request, repairs).start(raw, state), repairs


def _run_delta(raw: dict[str, Any], request: RequestInfo = CHAT, state: ChoiceState | None = None) -> Delta:
    d, _ = _delta(raw, request, state)
    d.delta = d.raw.get("delta") or {}
    return d


def _sent_before(request: RequestInfo = CHAT) -> ChoiceState:
    state = ChoiceState(0, request.stop, False, request.echoed)
    state.role_sent = True
    return state


def _finish(reason: str | None, request: RequestInfo = CHAT, **kw: Any) -> tuple[Finish, Repairs]:
    repairs = Repairs()
    args: dict[str, Any] = {"stopped": False, "tokens": None, "had_tools": False, **kw}
    return Finish(reason, request, repairs, **args), repairs


def _message(
    raw: dict[str, Any], request: RequestInfo = CHAT, tokens: int | None = None
) -> tuple[Message, Repairs]:
    repairs = Repairs()
    return Message(raw, request, repairs, tokens), repairs


def _in_order(repairs: tuple[Any, ...], *expected: Any) -> None:
    """``expected`` all run, in this order (others may run between them)."""
    positions = [repairs.index(repair) for repair in expected]
    assert positions == sorted(positions)


# -- shared by streams and bodies -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "index", "counted"),
    [({"index": 2}, 2, {}), ({}, 5, {"Q06": 1}), ({"index": True}, 5, {"Q06": 1})],
)
def test_choice_index_falls_back_to_the_position_q06(
    raw: dict[str, Any], index: int, counted: dict[str, int]
) -> None:
    repairs = Repairs()
    assert choice_index(raw, 5, repairs) == index
    assert repairs == counted


def test_tool_call_list_wraps_one_call_q65_and_keeps_the_rest() -> None:
    repairs = Repairs()
    call = {"id": "0", "function": {"name": "f"}}
    assert tool_call_list(call, repairs) == [call]
    assert repairs == {"Q65": 1}
    assert tool_call_list([call], repairs) == [call]
    assert tool_call_list(None, repairs) is None
    assert repairs == {"Q65": 1}


def test_upstream_finish_maps_counts_and_raises_failures() -> None:
    repairs = Repairs()
    assert upstream_finish("eos_token", CHAT, repairs) == "stop"
    assert upstream_finish(None, CHAT, repairs) is None
    assert repairs == {"Q18": 1}
    with pytest.raises(APIError) as caught:
        upstream_finish("abort", CHAT, repairs)
    assert caught.value.status == 503
    assert caught.value.quirk == "Q20"


def test_chat_choice_logprobs_completes_the_shape_q61() -> None:
    repairs = Repairs()
    assert chat_choice_logprobs({"content": []}, CHAT, repairs) == {"content": [], "refusal": None}
    assert repairs == {"Q61": 1}
    whole: dict[str, Any] = {"content": [], "refusal": None}
    assert chat_choice_logprobs(whole, CHAT, repairs) is whole
    assert repairs == {"Q61": 1}


def test_text_choice_logprobs_converts_the_chat_shape_q67_at_the_offset() -> None:
    repairs = Repairs()
    chat_shaped = {"content": [{"token": "ab", "logprob": -0.5, "top_logprobs": []}]}
    logprobs, covered = text_choice_logprobs(chat_shaped, 7, repairs)
    assert repairs == {"Q67": 1}
    assert covered == 2
    assert logprobs is not None
    assert logprobs["tokens"] == ["ab"]
    assert logprobs["text_offset"] == [7]


# -- finish ----------------------------------------------------------------------------------------


def test_a_stop_sequence_hit_finishes_stop() -> None:
    f, _ = _finish("length", stopped=True)
    stop_sequence_finish(f)
    assert f.reason == "stop"


def test_max_tokens_zero_finishes_length() -> None:
    f, _ = _finish("stop", RequestInfo(endpoint="completions", generates=False))
    zero_limit_finish(f)
    assert f.reason == "length"


def test_a_missing_reason_after_done_is_stop_q16() -> None:
    f, repairs = _finish(None)
    missing_finish(f)
    assert (f.reason, repairs) == ("stop", {"Q16": 1})


def test_a_missing_reason_before_done_is_a_broken_stream_q56() -> None:
    f, _ = _finish(None, upstream_done=False)
    with pytest.raises(APIError) as caught:
        missing_finish(f)
    assert (caught.value.status, caught.value.quirk) == (502, "Q56")


def test_a_missing_reason_on_an_interrupted_stream_says_so() -> None:
    f, _ = _finish(None, interrupted=True)
    with pytest.raises(APIError) as caught:
        missing_finish(f)
    assert "interrupted" in caught.value.body["error"]["message"]


@pytest.mark.parametrize(
    ("tokens", "stopped", "reason"),
    [(8, False, "length"), (7, False, "stop"), (8, True, "stop"), (None, False, "stop")],
)
def test_the_token_limit_turns_stop_into_length_q21(tokens: int | None, stopped: bool, reason: str) -> None:
    f, repairs = _finish("stop", RequestInfo(endpoint="chat", max_tokens=8), tokens=tokens, stopped=stopped)
    limit_finish(f)
    assert f.reason == reason
    assert repairs == ({"Q21": 1} if reason == "length" else {})


@pytest.mark.parametrize(
    ("tokens", "cut", "reason"),
    [(8, True, "length"), (8, False, "tool_calls"), (7, True, "tool_calls"), (None, True, "length")],
)
def test_a_call_the_token_limit_cut_finishes_length_q84(tokens: int | None, cut: bool, reason: str) -> None:
    f, repairs = _finish(
        "tool_calls", RequestInfo(endpoint="chat", max_tokens=8), tokens=tokens, had_tools=True, call_cut=cut
    )
    limit_finish(f)
    assert f.reason == reason
    assert repairs == ({"Q84": 1} if reason == "length" else {})


def test_a_cut_call_said_stopped_without_a_count_finishes_length_as_one_said_tool_calls() -> None:
    # (a read-only review: with "stop", Q64 made it tool_calls and the broken call a 502)
    f, repairs = _finish(
        "stop", RequestInfo(endpoint="chat", max_tokens=8), tokens=None, had_tools=True, call_cut=True
    )
    assert final_reason(f) == "length"
    assert repairs == {"Q84": 1}


def test_tool_calls_turn_a_chat_stop_into_tool_calls_q64() -> None:
    f, repairs = _finish("stop", had_tools=True)
    tool_calls_finish(f)
    assert (f.reason, repairs) == ("tool_calls", {"Q64": 1})
    text, _ = _finish("stop", TEXT, had_tools=True)
    tool_calls_finish(text)
    assert text.reason == "stop"


def test_the_finish_order_max_tokens_zero_wins_and_limit_before_tool_calls() -> None:
    # a stop sequence, then max_tokens 0; the missing reason after both; the limit before tool calls
    _in_order(
        FINISH_REPAIRS,
        stop_sequence_finish,
        zero_limit_finish,
        missing_finish,
        limit_finish,
        tool_calls_finish,
    )
    f, _ = _finish(
        None, RequestInfo(endpoint="completions", generates=False), stopped=True, upstream_done=False
    )
    assert final_reason(f) == "length"  # not a broken stream: nothing was to be generated
    limited, _ = _finish("stop", RequestInfo(endpoint="chat", max_tokens=2), tokens=2, had_tools=True)
    assert final_reason(limited) == "length"  # a tool call cut by the limit


# -- streamed deltas -------------------------------------------------------------------------------


def test_the_first_delta_gets_the_role_q59_a_later_one_loses_it_q58() -> None:
    d, repairs = _delta({"delta": {"content": "x"}})
    delta_role(d)
    assert d.out == {"role": "assistant"}
    assert repairs == {"Q59": 1}
    later, repairs = _delta({"delta": {"role": "assistant"}}, state=_sent_before())
    delta_role(later)
    assert later.out == {}
    assert repairs == {"Q58": 1}


def test_a_chunk_with_a_message_not_a_delta_is_read_the_same() -> None:
    d, _ = _delta({"message": {"role": "assistant", "content": "hi"}})
    delta_role(d)
    assert d.delta == {"role": "assistant", "content": "hi"}


def test_content_goes_out_as_far_as_the_stop_sequence_q76() -> None:
    request = RequestInfo(endpoint="chat", stream=True, stop=("END",))
    d = _run_delta({"delta": {"content": "done END more"}}, request)
    delta_content(d)
    assert d.out == {"content": "done "}
    assert (d.had_text, d.has_output, d.state.stopped) == (True, True, True)


def test_refusal_and_reasoning_go_out_vllm_reasoning_renamed_q39() -> None:
    d = _run_delta({"delta": {"refusal": "no", "reasoning": "think"}})
    delta_refusal(d)
    delta_reasoning(d)
    assert d.out == {"refusal": "no", "reasoning_content": "think"}
    assert d.repairs == {"Q39": 1}
    assert d.state.tokens == 1  # reasoning counts as output


def test_tool_call_deltas_fixed_and_an_empty_list_dropped_q17() -> None:
    d = _run_delta(
        {
            "delta": {
                "tool_calls": {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            }
        }
    )
    delta_tool_calls(d)
    assert d.out["tool_calls"][0]["index"] == 0
    assert d.out["tool_calls"][0]["id"] == "c1"
    assert d.repairs == {"Q65": 1}
    empty = _run_delta({"delta": {"tool_calls": []}})
    delta_tool_calls(empty)
    assert empty.out == {}
    assert empty.repairs == {"Q17": 1}


def test_the_first_delta_without_content_gets_an_empty_one_q60() -> None:
    d = _run_delta({"delta": {"role": "assistant"}})
    first_delta(d)
    assert d.out == {"content": ""}
    assert d.repairs == {"Q60": 1}
    assert d.state.role_sent


def test_the_first_delta_with_tool_calls_gets_null_content() -> None:
    d = _run_delta({"delta": {}})
    d.out["tool_calls"] = [{"index": 0}]
    first_delta(d)
    assert d.out["content"] is None
    assert d.repairs == {}


def test_the_finish_reason_is_held_and_counted_q23_q22_q17() -> None:
    d = _run_delta({"delta": {"content": "x"}, "finish_reason": "stop"}, state=_sent_before())
    d.has_output = True
    assert delta_finish(d)
    assert d.state.finish == "stop"
    assert d.repairs == {"Q23": 1}
    again = _run_delta({"delta": {}, "finish_reason": "stop"}, state=d.state)
    delta_finish(again)
    assert again.repairs == {"Q22": 1}
    missing = _run_delta({"delta": {}})
    delta_finish(missing)
    assert missing.repairs == {"Q17": 1}


def test_a_failure_finish_reason_raises() -> None:
    d = _run_delta({"delta": {}, "finish_reason": "error"})
    with pytest.raises(APIError) as caught:
        delta_finish(d)
    assert caught.value.status == 500


def test_delta_logprobs_repaired_q61() -> None:
    d = _run_delta({"delta": {"content": "x"}, "logprobs": {"content": []}})
    delta_logprobs(d)
    assert d.logprobs == {"content": [], "refusal": None}
    assert d.repairs == {"Q61": 1}


def test_an_empty_later_delta_is_dropped_q62_unless_it_finishes() -> None:
    d = _run_delta({"delta": {}, "finish_reason": None}, state=_sent_before())
    assert not empty_delta(d)
    assert d.repairs == {"Q62": 1}
    finishing = _run_delta({"delta": {}, "finish_reason": "stop"}, state=_sent_before())
    assert not empty_delta(finishing)
    assert finishing.repairs == {}
    first = _run_delta({"delta": {}})
    assert empty_delta(first)


def test_the_whole_chat_delta_order() -> None:
    # the output fields before first_delta needs them, the finish after the output (Q23), the
    # logprobs after the content the scan let through, the empty check last
    _in_order(
        CHAT_DELTA_REPAIRS, delta_role, delta_content, first_delta, delta_finish, delta_logprobs, empty_delta
    )
    _in_order(CHAT_DELTA_REPAIRS, delta_refusal, first_delta)
    _in_order(CHAT_DELTA_REPAIRS, delta_reasoning, first_delta)
    _in_order(CHAT_DELTA_REPAIRS, delta_tool_calls, first_delta)
    d, repairs = _delta({"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop", "logprobs": None})
    assert all(repair(d) for repair in CHAT_DELTA_REPAIRS)
    assert d.out == {"role": "assistant", "content": "hi"}
    assert d.state.finish == "stop"
    assert repairs == {"Q59": 1, "Q23": 1}


def test_text_deltas_stop_scan_offsets_and_drop_empty_ones() -> None:
    _in_order(TEXT_DELTA_REPAIRS, delta_text, delta_text_logprobs, delta_finish, empty_text)
    request = RequestInfo(endpoint="completions", stream=True, stop=("\n",))
    d, _ = _delta({"text": "ab\ncd", "logprobs": None}, request)
    assert all(repair(d) for repair in TEXT_DELTA_REPAIRS)
    assert (d.text, d.has_output, d.state.stopped, d.state.shown) == ("ab", True, True, True)
    empty, repairs = _delta({"text": "", "finish_reason": None}, TEXT)
    assert not all(repair(empty) for repair in TEXT_DELTA_REPAIRS)
    assert repairs == {"Q62": 1}


# -- whole messages --------------------------------------------------------------------------------


def test_message_content_cut_at_a_stop_sequence_q76() -> None:
    m, repairs = _message({"message": {"content": "a STOP b"}}, RequestInfo(endpoint="chat", stop=("STOP",)))
    message_content(m)
    assert m.out == {"role": "assistant", "content": "a "}
    assert m.stopped
    assert repairs == {"Q76": 1}
    odd, _ = _message({"message": {"content": 5}})
    message_content(odd)
    assert odd.out["content"] is None


def test_message_refusal_always_present_q61() -> None:
    m, repairs = _message({"message": {}})
    message_refusal(m)
    assert m.out == {"refusal": None}
    assert repairs == {"Q61": 1}


def test_message_tool_calls_and_reasoning() -> None:
    m, repairs = _message(
        {"message": {"tool_calls": {"id": "0", "function": {"name": "f", "arguments": {}}}, "reasoning": "r"}}
    )
    message_tool_calls(m)
    message_reasoning(m)
    call = m.out["tool_calls"][0]
    assert call["id"].startswith("call_")
    assert call["function"] == {"name": "f", "arguments": "{}"}
    assert m.out["reasoning_content"] == "r"
    assert repairs["Q65"] == 3  # one call not a list, id "0", arguments an object


def test_message_finish_runs_the_finish_repairs() -> None:
    m, repairs = _message({"finish_reason": "stop"}, RequestInfo(endpoint="chat", max_tokens=4), tokens=4)
    message_finish(m)
    assert (m.reason, repairs) == ("length", {"Q21": 1})
    tools, repairs = _message({"finish_reason": None})
    tools.out["tool_calls"] = [{"id": "c"}]
    message_finish(tools)
    assert (tools.reason, repairs) == ("tool_calls", {"Q16": 1, "Q64": 1})


def test_message_logprobs_always_present_q61() -> None:
    m, repairs = _message({})
    message_logprobs(m)
    assert m.logprobs is None
    assert repairs == {"Q61": 1}


def test_message_text_keeps_only_the_echoed_prompt_for_max_tokens_zero() -> None:
    request = RequestInfo(endpoint="completions", generates=False, echoed_tokens=2, stop=("",))
    logprobs = {
        "tokens": ["a", "b", "c"],
        "token_logprobs": [None, -1.0, -2.0],
        "top_logprobs": None,
        "text_offset": [0, 1, 2],
    }
    m, _ = _message({"text": "abc", "logprobs": logprobs}, request)
    message_text(m)
    assert m.text == "ab"
    assert m.stopped
    assert m.logprobs["tokens"] == ["a", "b"]


def test_the_message_orders() -> None:
    # the content (a stop sequence) and the tool calls (Q64) before the finish; the logprobs cut last
    _in_order(CHAT_MESSAGE_REPAIRS, message_content, message_tool_calls, message_finish, message_logprobs)
    _in_order(TEXT_MESSAGE_REPAIRS, message_text, message_finish)
    m, repairs = _message(
        {"text": "x. y", "finish_reason": "length"}, RequestInfo(endpoint="completions", stop=(".",))
    )
    for repair in TEXT_MESSAGE_REPAIRS:
        repair(m)
    assert (m.text, m.reason) == ("x", "stop")  # the stop sequence the proxy enforced wins
    assert repairs == {"Q76": 1}
