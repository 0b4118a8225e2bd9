"""What a Response's request asked of its calls: ``tool_choice`` and ``parallel_tool_calls``, judged by the
core's rules (rules/tool_use.py) on the Response as the one chat choice it translates to.

The Responses API reads both as chat does (openapi.yaml ``CreateResponse``: ``tool_choice`` ``none``,
``auto``, ``required``, a named function or an ``allowed_tools`` list; conformance/request.py reads the
flat form). The tool-choice rules ran for chat only, so ``tool_choice: "required"`` answered with text
alone passed on ``/v1/responses`` (issue 33). The calls' names and arguments have their own Responses
rules (``responses-function-unknown``, ``responses-function-arguments``), so only the choice rules run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.rules import tool_use
from conformance.rules.context import ChoiceState, Context, ToolCallState

__all__ = ["tool_choice_rules"]

# A Response's status as the finish of its chat choice: ``incomplete`` is the token limit's ``length``
# (a cut answer is held only to what it began), and a failed one is not judged.
_FINISH = {"completed": "stop", "incomplete": "length"}


def tool_choice_rules(ctx: Context, event: int | None, response: Mapping[str, Any], text: str) -> None:
    """``tool-choice-*`` and ``parallel-tool-calls-off`` on a finished Response whose output text is
    ``text`` (prose where a forced call should be is judged as chat's is)."""
    if not ctx.request.known or ctx.request.tool_choice_mode is None:
        return
    finish = _FINISH.get(str(response.get("status")))
    if finish is None:
        return
    state = ChoiceState(first_event=event or 0, index=0, finished_event=event)
    output = response.get("output")
    for item in output if isinstance(output, list) else ():
        if isinstance(item, Mapping) and item.get("type") == "function_call":
            name = item.get("name") if isinstance(item.get("name"), str) else None
            call = ToolCallState(first_event=state.first_event, has_name=name is not None, name=name)
            state.tool_calls[len(state.tool_calls)] = call
    state.finish_reason = "tool_calls" if state.tool_calls and finish == "stop" else finish
    state.content.append(text)
    ctx.choices = {0: state}
    tool_use.tool_choice_honoured(ctx)
    tool_use.parallel_off(ctx)
