"""What real clients send on ``/v1/responses`` is valid to the judge's request schema, which the proxy and
the bundled backend now apply before translating: a schema stricter than the clients is a 400 for
every such request."""

from __future__ import annotations

from conformance.schemas import request_validator

# Codex CLI clears a reasoning item's content before sending it back, and serializes the empty field
# as null (codex-rs client_common.rs): every request after a turn with reasoning carries one.
CODEX_REASONING = {
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Looking at the files."}],
    "content": None,
    "encrypted_content": None,
}


def _errors(body: dict[str, object]) -> list[str]:
    return [e.message for e in request_validator("response_request").iter_errors(body)]


def test_codex_reasoning_item_with_null_content_is_valid() -> None:
    assert _errors({"model": "m", "input": [{"role": "user", "content": "hi"}, CODEX_REASONING]}) == []


def test_a_message_with_null_content_is_not() -> None:
    assert _errors({"model": "m", "input": [{"role": "user", "content": None}]}) != []


def test_a_message_with_null_content_is_told_its_content_is_wrong() -> None:
    """Was "Missing required parameter: 'input[0].type'" (the branch null content is allowed for),
    for a message that has its role and whose content is what is wrong."""
    from conformance.api_errors import APIError
    from conformance.request_validation import validate_request

    for item in ({"role": "user", "content": None}, {"type": "message", "role": "user", "content": None}):
        try:
            validate_request(
                "response_request", {"model": "m", "input": [{"role": "user", "content": "hi"}, item]}
            )
        except APIError as refused:
            error = refused.body["error"]
        else:
            raise AssertionError("a message with null content was taken")
        assert (error["param"], error["code"]) == ("input[1].content", "invalid_type")
        assert "expected a string or an array of content parts, but got null" in error["message"]


def test_a_function_tool_whose_parameters_are_not_an_object_is_told_the_type_wanted() -> None:
    """``parameters`` is an object or null: a string was "Invalid value for 'tools[0].parameters'." with
    code ``invalid_value``, where chat's ``tools[0].function.parameters`` says the type (``invalid_type``)."""
    from conformance.api_errors import APIError
    from conformance.request_validation import validate_request

    for given, kind in (("abc", "a string"), ([1], "an array"), (3, "an integer")):
        tool = {"type": "function", "name": "f", "parameters": given}
        try:
            validate_request("response_request", {"model": "m", "input": "hi", "tools": [tool]})
        except APIError as refused:
            error = refused.body["error"]
        else:
            raise AssertionError(f"parameters {given!r} were taken")
        assert (error["param"], error["code"]) == ("tools[0].parameters", "invalid_type")
        assert error["message"] == (
            f"Invalid type for 'tools[0].parameters': expected an object, but got {kind} instead."
        )


def _refusal(body: dict[str, object]) -> dict[str, object]:
    from conformance.api_errors import APIError
    from conformance.request_validation import validate_request

    try:
        validate_request("response_request", {"model": "m", "input": "hi", **body})
    except APIError as refused:
        error = refused.body["error"]
        assert isinstance(error, dict)
        return error
    raise AssertionError(f"{body} was taken")


def test_a_namespaced_tool_is_checked_as_a_tool_is() -> None:
    """A namespace's own tools were not typed: ``parameters: 7`` inside one was served (a black-box
    test), where the same tool at the top is the 400."""
    inner = {"type": "function", "name": "h", "parameters": 7}
    tools = [{"type": "function", "name": "a"}, {"type": "namespace", "name": "n", "tools": [inner]}]
    error = _refusal({"tools": tools})
    assert (error["param"], error["code"]) == ("tools[1].tools[0].parameters", "invalid_type")
    error = _refusal({"tools": [{"type": "namespace", "name": "n", "tools": "x"}]})
    assert (
        error["message"] == "Invalid type for 'tools[0].tools': expected an array, but got a string instead."
    )


def test_a_value_of_none_of_a_unions_types_is_told_the_types_wanted() -> None:
    """ "Invalid value for 'input'." said nothing of what was wanted (a black-box test's list)."""
    for body, message in (
        (
            {"input": 5},
            "Invalid type for 'input': expected a string or an array, but got an integer instead.",
        ),
        ({"tools": {}}, "Invalid type for 'tools': expected an array, but got an object instead."),
        ({"text": "x"}, "Invalid type for 'text': expected an object, but got a string instead."),
        (
            {"tool_choice": 5},
            "Invalid type for 'tool_choice': expected a string or an object, but got an integer instead.",
        ),
        ({"metadata": "x"}, "Invalid type for 'metadata': expected an object, but got a string instead."),
    ):
        error = _refusal(body)
        assert (error["message"], error["code"]) == (message, "invalid_type"), body
    # A string where the union's only strings are an enum's: the enum's words.
    error = _refusal({"tool_choice": "bogus"})
    assert error["message"] == (
        "Invalid value for 'tool_choice': 'bogus'. Supported values are: 'none', 'auto', 'required'."
    )
