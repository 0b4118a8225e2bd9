"""``conformant check`` and ``record`` end to end, against llama-cpp-python's server as recorded.

The recording (conformance/corpus/llama-cpp-python/, made by ``conformant check --record``) is served by
the replay server, so these tests run without llama.cpp; tests/live/test_llama_cpp_python.py runs the
same checks against the real server.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.live.probes import PROBES
from conformance.transcript import load_transcript
from tests.live.expected import findings_by_probe, missing_deviations
from tests.support.servers import free_port

OVERFLOW_WORDS = "3000"  # the recording's context-overflow prompt (the recorded server had n_ctx 2048)


def _check(url: str, model: str, tmp_path: Path, fmt: str, *extra: str) -> tuple[int, Path]:
    out = tmp_path / f"report.{fmt}"
    args = [
        "check",
        url,
        "--model",
        model,
        "--overflow-words",
        OVERFLOW_WORDS,
        "--format",
        fmt,
        "-o",
        str(out),
    ]
    return main([*args, *extra]), out


def test_known_deviations_found_with_rule_ids(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    status, report = _check(replayed_llama_cpp_python, recorded_model, tmp_path, "json")
    assert status == 1
    assert missing_deviations(report) == []
    found = findings_by_probe(report)
    assert set(found) == {p.name for p in PROBES} | {"disconnect-hangup"}  # (the exchange hung up on)
    assert found["context-overflow"] == set()  # non-streamed overflow is a proper 400 there


def test_junit_has_one_testcase_per_exchange(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    _, report = _check(replayed_llama_cpp_python, recorded_model, tmp_path, "junit")
    cases = list(ET.parse(report).getroot().iter("testcase"))
    # A probe's, and before the disconnect probe's the exchange it hung up on, as validate reports them.
    exchanges = [name for p in PROBES for name in ([f"{p.name}-hangup"] if p.then else []) + [p.name]]
    assert [c.get("name") for c in cases] == exchanges
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert {"chat-stream-usage", "context-overflow-stream", "invalid-type"} <= failed
    assert "context-overflow" not in failed


def test_markdown_lists_every_probe(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    _, report = _check(replayed_llama_cpp_python, recorded_model, tmp_path, "markdown")
    text = report.read_text()
    assert all(f"`{p.name}`" in text for p in PROBES)


def test_allow_waives_rules_and_quirks(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    allowed = ("--allow", "Q09", "usage-missing", "usage-mising")
    _, report = _check(replayed_llama_cpp_python, recorded_model, tmp_path, "json", *allowed)
    rules = {rule for found in findings_by_probe(report).values() for rule, _ in found}
    assert "usage-missing" not in rules
    assert "model-is-local-path" not in rules
    assert "stream-empty" in rules
    # A misspelt id waived nothing and said nothing (found by black-box testing).
    said = capsys.readouterr().err
    assert "--allow waived nothing for: usage-mising (no finding has that rule or quirk)" in said


def test_a_request_the_replay_server_has_no_recording_of_is_no_response(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    """Its 404 ``transcript_not_found`` was judged as the replayed server's answer: "context-overflow-
    status" and "-code" for a prompt of other length than the recording's (found by black-box testing)."""
    out = tmp_path / "report.json"
    args = ["check", replayed_llama_cpp_python, "--model", recorded_model, "--only", "context-overflow"]
    assert main([*args, "--overflow-words", "10", "--format", "json", "-o", str(out)]) == 1
    (finding,) = json.loads(out.read_text())["results"][0]["errors"]
    assert finding["rule"] == "no-response"
    assert "holds no recording of this request" in finding["message"]


def test_only_and_record(replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path) -> None:
    status, report = _check(
        replayed_llama_cpp_python,
        recorded_model,
        tmp_path,
        "json",
        "--only",
        "context-overflow",
        "--record",
        str(tmp_path / "rec"),
    )
    assert status == 0
    assert list(findings_by_probe(report)) == ["context-overflow"]
    recorded = load_transcript(tmp_path / "rec" / "context-overflow.sse")
    assert recorded.status == 400
    assert json.loads(recorded.read_body())["error"]["code"] == "context_length_exceeded"


def test_unreachable_server_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"http://127.0.0.1:{free_port()}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot connect" in err
    assert len(err.splitlines()) == 1


def test_a_base_where_nothing_answers_the_api_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A wrong base path (``/v2``) made all 49 probes 404s, reported as 16 errors and 29 warnings that read
    like missing features, exit 1 (issue 32). A server answers there, but not the API: one line, exit 2,
    before any probe."""
    from starlette.applications import Starlette

    from tests.support.servers import run_asgi

    with run_asgi(Starlette()) as url:  # 404 for every path
        assert main(["check", url + "/v2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "answers the OpenAI API" in err
    assert "GET /v1/models and POST /v1/chat/completions are both 404" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_a_server_that_refuses_the_key_exits_2_with_one_line(
    key: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without its key every probe was refused alike, and the report read the 401s as the server's
    deviations: exit 1, 20 errors and 31 unsupported features (found by black-box testing)."""
    from tests.proxy.conftest import serve_proxy

    with serve_proxy("http://127.0.0.1:9", upstream_kind="openai", api_key="sk-right") as (url, _):
        assert main(["check", url, *(["--api-key", key] if key else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert "answered HTTP 401" in err
    assert ("the key given" if key else "no key") in err
    assert "--api-key" in err
    assert len(err.splitlines()) == 1


def test_unknown_probe_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "http://127.0.0.1:9", "--only", "no-such-probe"]) == 2
    assert "no-such-probe" in capsys.readouterr().err


def test_record_keeps_bytes_and_scrubs_credentials(
    replayed_llama_cpp_python: str, recorded_model: str, tmp_path: Path
) -> None:
    original = load_transcript(
        Path(__file__).parents[2] / "conformance/corpus/llama-cpp-python/llama-cpp-python-chat-stream.sse"
    )
    requests = tmp_path / "requests.jsonl"
    line = {
        "name": "again",
        "path": original.request["path"] if original.request else "",
        "body": original.request_body,
        "headers": {"authorization": "Bearer s3cret-token", "x-trace": "t-1"},
    }
    requests.write_text(json.dumps(line) + "\n")
    out = tmp_path / "out"
    argv = ["record", replayed_llama_cpp_python, "--requests", str(requests), "-o", str(out)]
    assert main([*argv, "--api-key", "another-s3cret"]) == 0
    again = load_transcript(out / "again.sse")
    assert again.read_body() == original.read_body()
    assert again.status == 200
    assert len(again.chunk_timing) >= 1
    assert sum(n for _, n in again.chunk_timing) == len(original.read_body())
    sidecar = (out / "again.json").read_text()
    assert "s3cret" not in sidecar
    assert json.loads(sidecar)["request"]["headers"] == {"x-trace": "t-1"}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("[]", "holds no request"),
        ('[{"name": "x", "path": "/v1/models"}, {"name": "x!", "path": "/v1/models"}]', "requests 1 and 2"),
    ],
    ids=["empty", "one-name-twice"],
)
def test_a_requests_file_without_one_name_per_request_is_refused(
    given: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two requests named alike wrote one transcript over the other, and an empty file recorded
    nothing, both with exit 0 (found by black-box testing): one line and exit 2, before any request."""
    requests = tmp_path / "requests.json"
    requests.write_text(given)
    out = tmp_path / "out"
    assert (
        main(["record", f"http://127.0.0.1:{free_port()}", "--requests", str(requests), "-o", str(out)]) == 2
    )
    assert said in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_record_one_request_from_body(replayed_llama_cpp_python: str, tmp_path: Path) -> None:
    body = json.dumps({"model": "nobody", "messages": []})
    argv = ["record", replayed_llama_cpp_python, "--body", body, "--name", "miss", "-o", str(tmp_path)]
    assert main(argv) == 0
    missed = load_transcript(tmp_path / "miss.sse")
    assert missed.status == 404
    assert "conformant record" in missed.read_body().decode()


def test_list_needs_no_url_and_a_run_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [probe.name for probe in PROBES]
    assert main(["check"]) == 2
    assert "BASE_URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--only", "chat", "-o", "{file}/report.json"],
        ["check", "--only", "chat", "--record", "{file}/sub"],
        ["record", "--body", "{{}}", "-o", "{file}"],
        ["check", "--only", "chat", "-o", "{folder}"],
    ],
    ids=["check-output", "check-record", "record-output", "check-output-folder"],
)
def test_an_output_path_that_cannot_be_written_exits_2_before_any_request(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    # No server listens here: a command that sent anything first would fail with "cannot connect".
    url = f"http://127.0.0.1:{free_port()}"
    filled = [a.format(file=in_the_way, folder=tmp_path) for a in argv]
    assert main([filled[0], url, *filled[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert str(in_the_way if "{folder}" not in argv else tmp_path) in err, err
    assert "cannot" in err
    assert "connect" not in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["check", "record"])
@pytest.mark.parametrize("url", ["127.0.0.1:8080", "localhost:1", "not-a-url"])
def test_a_url_without_http_is_one_line_and_exit_2(
    command: str, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--body", "{}", "-o", str(tmp_path)] if command == "record" else []
    assert main([command, url, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an http(s) URL" in err
    assert len(err.splitlines()) == 1
