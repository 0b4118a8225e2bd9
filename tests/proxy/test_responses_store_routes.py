"""GET / DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items on the proxy, answered from
its response store as OpenAI answers them, read with openai-python."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from conformance.api_errors import APIError
from conformance.protocols.responses import store as store_module
from conformance.protocols.responses.store import ResponseStore, owner_of
from conformance.protocols.responses.stored import previous_items, remember
from tests.proxy.conftest import run_proxy

NOWHERE = "http://127.0.0.1:9"  # no upstream is asked: these routes answer from the store

STORED = {
    "id": "resp_stored1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "m",
    "output": [
        {
            "type": "message",
            "id": "msg_out",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
        }
    ],
    "store": True,
}
INPUT: list[Any] = [
    {"role": "user", "content": "Capital of France?"},
    {
        "type": "message",
        "id": "msg_given",
        "role": "user",
        "content": [{"type": "input_text", "text": "Brief."}],
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "42"},
]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "responses.sqlite3"
    # Stored by a server with the key the proxy below serves with: each key sees its own responses.
    store = ResponseStore(path, max_bytes=1 << 20, max_age=3600.0, owner=owner_of("sk-t"))

    async def fill() -> None:
        await store.save(STORED, INPUT)
        await store.aclose()

    asyncio.run(fill())
    return path


@pytest.fixture
def url(store_path: Path) -> Iterator[str]:
    with run_proxy(NOWHERE, upstream_kind="openai", responses_store=str(store_path), api_key="sk-t") as url:
        yield url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-t", max_retries=0)


def test_a_stored_response_is_retrieved_listed_and_deleted(url: str) -> None:
    client = _client(url)
    response = client.responses.retrieve("resp_stored1")
    assert response.id == "resp_stored1"
    assert response.output_text == "Paris."
    items = client.responses.input_items.list("resp_stored1", order="asc")
    assert [item.id for item in items.data] == ["msg_stored1_0", "msg_given", "fco_stored1_2"]
    assert items.data[0].type == "message"
    assert items.data[0].content[0].text == "Capital of France?"
    newest = client.responses.input_items.list("resp_stored1", limit=1)  # desc by default
    assert [item.id for item in newest.data] == ["fco_stored1_2"]
    assert newest.has_more
    after = httpx.get(
        url + "/v1/responses/resp_stored1/input_items",
        params={"order": "asc", "after": "msg_stored1_0"},
        headers={"authorization": "Bearer sk-t"},
    ).json()
    assert [item["id"] for item in after["data"]] == ["msg_given", "fco_stored1_2"]
    assert (after["first_id"], after["last_id"], after["has_more"]) == ("msg_given", "fco_stored1_2", False)
    deleted = httpx.delete(url + "/v1/responses/resp_stored1", headers={"authorization": "Bearer sk-t"})
    assert deleted.status_code == 200
    assert deleted.json() == {"id": "resp_stored1", "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_stored1")


def test_cancel_says_a_foreground_response_cannot_be_cancelled(url: str) -> None:
    """openai-python's ``responses.cancel``: OpenAI cancels only background responses, which this server
    does not run; the stored response is left as it was."""
    with pytest.raises(openai.BadRequestError) as refused:
        _client(url).responses.cancel("resp_stored1")
    assert "background" in refused.value.message
    assert _client(url).responses.retrieve("resp_stored1").status == "completed"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/responses/resp_unknown"),
        ("DELETE", "/v1/responses/resp_unknown"),
        ("GET", "/v1/responses/resp_unknown/input_items"),
        ("POST", "/v1/responses/resp_unknown/cancel"),
    ],
)
def test_an_unknown_id_is_openais_404(url: str, method: str, path: str) -> None:
    answer = httpx.request(method, url + path, headers={"authorization": "Bearer sk-t"})
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {
            "message": "Response with id 'resp_unknown' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_the_routes_need_the_key_and_refuse_other_methods(url: str) -> None:
    assert httpx.get(url + "/v1/responses/resp_stored1").status_code == 401
    refused = httpx.put(url + "/v1/responses/resp_stored1", headers={"authorization": "Bearer sk-t"})
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, HEAD, DELETE"
    assert refused.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"order": "up"}, "order"),
        ({"after": "no"}, "after"),
    ],
)
def test_bad_listing_parameters_are_400s_that_name_them(url: str, query: dict[str, str], param: str) -> None:
    answer = httpx.get(
        url + "/v1/responses/resp_stored1/input_items", params=query, headers={"authorization": "Bearer sk-t"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


def test_previous_response_id_resolves_to_the_conversation_or_openais_400(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=1 << 20, max_age=3600.0)

    async def main() -> tuple[Any, Any, Any]:
        await store.save(STORED, INPUT)
        found = await previous_items(store, {"previous_response_id": "resp_stored1", "input": "And Italy?"})
        try:
            await previous_items(store, {"previous_response_id": "resp_gone"})
        except APIError as refused:
            missing = refused
        none = await previous_items(store, {"input": "hi"})
        await store.aclose()
        return found, missing, none

    found, missing, none = asyncio.run(main())
    assert found == [*INPUT, STORED["output"][0]]
    assert none == []
    assert missing.status == 400
    assert missing.body == {
        "error": {
            "message": "Previous response with id 'resp_gone' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


def test_a_continuation_is_bounded_with_its_conversation_as_a_fresh_request_is(tmp_path: Path) -> None:
    """12 continuations of 15 MB built a 180 MB conversation under a 16 MiB --max-body, and 120-byte
    continuations of it sent 180 MB upstream each (issue 32): the conversation and the new body together
    are held to the bound a fresh body has, a 413 in OpenAI's words; under it, the conversation comes."""
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=1 << 20, max_age=3600.0)
    long_input = [{"role": "user", "content": "x" * 5000}]

    async def main() -> tuple[list[Any], APIError]:
        await store.save(STORED, long_input)
        asked = {"previous_response_id": "resp_stored1", "input": "And Italy?"}
        fits = await previous_items(store, asked, body_size=100, max_bytes=10_000)
        try:
            await previous_items(store, asked, body_size=6_000, max_bytes=10_000)
        except APIError as refused:
            return fits, refused
        finally:
            await store.aclose()
        raise AssertionError("a conversation past the bound was continued")

    fits, refused = asyncio.run(main())
    assert fits == [*long_input, STORED["output"][0]]
    assert refused.status == 413
    assert refused.body["error"]["code"] == "request_too_large"
    assert refused.body["error"]["param"] == "previous_response_id"


def test_a_conversation_past_the_bound_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 413 came only after the whole stored conversation was read (a 235 MB one, under the store's
    bound, loaded whole to be refused): the store refuses by the size it recorded, reading nothing."""
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=1 << 20, max_age=3600.0)
    read: list[str] = []
    real = store_module.decoded_entry

    def noted(*args: Any) -> Any:
        read.append("read")
        return real(*args)

    monkeypatch.setattr(store_module, "decoded_entry", noted)
    asked = {"previous_response_id": "resp_stored1", "input": "And Italy?"}

    async def main() -> APIError:
        await store.save(STORED, [{"role": "user", "content": "x" * 5000}])
        try:
            await previous_items(store, asked, body_size=6_000, max_bytes=10_000)
        except APIError as refused:
            return refused
        finally:
            await store.aclose()
        raise AssertionError("a conversation past the bound was continued")

    refused = asyncio.run(main())
    assert refused.status == 413
    assert refused.body["error"]["code"] == "request_too_large"
    assert read == []


def test_an_unknown_id_is_quoted_short_in_the_error(tmp_path: Path) -> None:
    """A 1 MB unknown previous_response_id came back whole in the 400 (issue 32): the message quotes its
    start, enough to recognize it."""
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=1 << 20, max_age=3600.0)
    long_id = "resp_" + "x" * 1_000_000

    async def main() -> APIError:
        try:
            await previous_items(store, {"previous_response_id": long_id})
        except APIError as refused:
            return refused
        finally:
            await store.aclose()
        raise AssertionError("an unknown id was found")

    message = asyncio.run(main()).body["error"]["message"]
    assert message.startswith("Previous response with id 'resp_xxx")
    assert len(message) < 200


def test_a_response_too_large_to_store_is_answered_with_store_false(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=300, max_age=3600.0)

    async def main() -> list[Any]:
        kept = await remember(store, STORED, [{"role": "user", "content": "hi"}])
        too_big = await remember(
            store, {**STORED, "id": "resp_big"}, [{"role": "user", "content": "x" * 300}]
        )
        not_asked = await remember(store, {**STORED, "id": "resp_no", "store": False}, [])
        found = [await store.load(key) for key in ("resp_stored1", "resp_big", "resp_no")]
        await store.aclose()
        return [kept["store"], too_big["store"], not_asked["store"], [f is not None for f in found]]

    assert asyncio.run(main()) == [True, False, False, [True, False, False]]
