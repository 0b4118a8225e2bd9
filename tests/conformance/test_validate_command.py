"""``conformant validate``: formats, output file, exit statuses, unreadable input, and bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.judge import judge_transcript
from conformance.report import render
from conformance.sse import DONE_EVENT, encode_data
from conformance.transcript import load_transcript
from tests.conformance.test_rules import chat_chunk, delta, stream

MESSAGES = [{"role": "user", "content": "Hi"}]

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
GOLDEN = DATA / "openai" / "e2aad469b71d.sse"
BROKEN = DATA / "reports" / "vllm-18412.sse"
WARNED = DATA / "seeds" / "deepseek-fim-logprobs.sse"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["validate", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_exit_0_for_golden_streams(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, str(DATA / "openai"))
    assert status == 0
    assert out.rstrip().endswith("12 checked, 0 errors, 0 warnings")


def test_exit_1_for_errors_and_strict_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, str(BROKEN))[0] == 1
    sidecar_free_warning_only = DATA / "seeds" / "llamacpp-docs-completion.json"
    assert run(capsys, str(sidecar_free_warning_only))[0] == 0
    tmp_warned = run(capsys, str(DATA / "reports" / "llamacpp-16048.sse"))
    assert tmp_warned[0] == 0
    assert run(capsys, "--strict", str(DATA / "reports" / "llamacpp-16048.sse"))[0] == 1


def test_json_report_is_the_documented_format(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--format", "json", str(GOLDEN), str(BROKEN))
    report = json.loads(out)
    assert status == 1
    # The keys of the first format are all still there (docs/validate.md); later ones are added.
    assert set(report) == {"conformant", "results", "summary", "servers"}
    keys = {"source", "endpoint", "stream", "errors", "warnings", "server", "excerpt"}
    assert [set(r) for r in report["results"]] == [keys] * 2
    finding = report["results"][1]["errors"][0]
    first_format = {"rule", "message", "event", "pointer", "quirk"}
    assert set(finding) == first_format | {"count", "pointers", "quirks"}
    assert finding["quirks"] == [finding["quirk"]]
    # vllm-18412 repeats tool-call-name-repeated: one finding, count 2.
    assert [(f["rule"], f["count"]) for f in report["results"][1]["errors"]][2] == (
        "tool-call-name-repeated",
        2,
    )
    # Its note says it is the first four events as quoted: an excerpt, not blamed for where it stops.
    assert report["results"][1]["excerpt"] is True
    rules = ["tool-call-id-missing", "tool-call-name-repeated", "tool-call-type-missing"]
    assert report["summary"] == {
        "transcripts": 2,
        "errors": 3,
        "warnings": 0,
        "responses": 2,
        "responses_with_errors": 1,
        "responses_with_warnings": 0,
        "distinct_rules": 3,
        "distinct_warning_rules": 0,
        "weight": 6,  # three rules whose deviations make a client fail, 2 each (conformance/harms.py)
        "answered": 2,
        "harm_per_answer": 1.0,  # the golden answer harms nothing, the broken one makes a client fail
        "occurrences": 4,
        "rules": dict.fromkeys(rules, 1),
    }
    # Each PATH is a server of its own when no sidecar names one.
    assert [(s["server"], s["responses"], s["responses_with_errors"]) for s in report["servers"]] == [
        (str(GOLDEN), 1, 0),
        (str(BROKEN), 1, 1),
    ]
    assert report["results"][0]["source"] == str(GOLDEN)


def test_junit_and_markdown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    status, out, _ = run(capsys, "--format", "junit", "--output", str(target), str(GOLDEN), str(BROKEN))
    assert (status, out) == (1, "")
    root = ET.fromstring(target.read_text())
    cases = root.findall("./testsuite/testcase")
    assert [c.find("failure") is not None for c in cases] == [False, True]
    _, md, _ = run(capsys, "--format", "markdown", str(BROKEN))
    assert "| error | `tool-call-id-missing` | Q63 |" in md


def test_render_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown report format"):
        render([], "yaml")


def test_sidecar_drives_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = GOLDEN.read_bytes()
    (tmp_path / "t.sse").write_bytes(body)
    request = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "stream": True},
    }
    sidecar = {
        "request": request,
        "response": {"status": 200, "headers": {"content-type": "text/event-stream"}},
    }
    (tmp_path / "t.json").write_text(json.dumps(sidecar))
    status, out, _ = run(capsys, "--format", "json", str(tmp_path / "t.json"))
    [result] = json.loads(out)["results"]
    assert status == 1
    assert {f["rule"] for f in result["errors"]} == {"usage-unrequested"}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.sse", "no such file"),
        (lambda d: d, "no .sse or .json transcripts"),
        (lambda d: (d / "junk.sse").write_bytes(bytes(range(256)) * 20) and d / "junk.sse", "binary data"),
        (lambda d: (d / "hi.sse").write_bytes("é".encode("latin-1") * 500) and d / "hi.sse", "binary data"),
        (
            lambda d: (d / "p.json").write_text('{"request": {"path": 5, "body": {}}}') and d / "p.json",
            "'request.path' must be a string",
        ),
        # Found by black-box testing: a status in a string was read as none, and the answer judged so.
        (
            lambda d: (d / "s.json").write_text('{"response": {"status": "200"}}') and d / "s.json",
            "'response.status' must be an integer",
        ),
        # Issue 32: a Markdown file was judged as an SSE stream (130 unknown fields).
        (
            lambda d: (d / "README.md").write_text("# conformant\n\nRead me.\n") and d / "README.md",
            "not a transcript: it begins '# conformant'",
        ),
    ],
    ids=[
        "missing",
        "empty-folder",
        "binary",
        "undecodable",
        "path-not-a-string",
        "status-not-a-number",
        "markdown",
    ],
)
def test_unreadable_input_exits_2_with_one_line(tmp_path: Path, make: object, message: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_file_of_another_name_that_begins_as_a_stream_or_a_body_is_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only what is neither SSE nor JSON is refused: a capture saved as .txt is still a transcript."""
    stream = tmp_path / "capture.txt"
    stream.write_text('data: {"choices": []}\n\ndata: [DONE]\n\n')
    body = tmp_path / "body.log"
    body.write_text('  {"error": {"message": "x"}}')
    for path in (stream, body):
        assert main(["validate", str(path)]) in (0, 1)
    assert "not a transcript" not in capsys.readouterr().err


def test_a_large_stream_is_judged_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """16 MB of chunks: peak Python allocations stay a small fraction of the file (streamed, never loaded)."""
    path = tmp_path / "big.sse"
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "word " * 20}, "finish_reason": None}],
    }
    first = dict(
        chunk, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    )
    line = encode_data(json.dumps(chunk))
    with path.open("wb") as fh:
        fh.write(encode_data(json.dumps(first)))
        for _ in range((16 << 20) // len(line)):
            fh.write(line)
        fh.write(
            encode_data(json.dumps(dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])))
        )
        fh.write(DONE_EVENT)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        status, out, _ = run(capsys, str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 0, out
    assert peak < size // 10


def _judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, body: bytes, request: object
) -> set[str]:
    (tmp_path / f"{name}.sse").write_bytes(body)
    if request is not None:
        (tmp_path / f"{name}.json").write_text(json.dumps({"request": request}))
    status, out, err = run(capsys, "--format", "json", str(tmp_path / f"{name}.sse"))
    assert status in (0, 1), err
    [result] = json.loads(out)["results"]
    return {f["rule"] for f in result["errors"]}


def test_json_nested_too_deeply_is_a_finding_and_the_other_files_are_still_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunk["choices"] = [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]
    deep = json.dumps(chunk)[:-1] + ', "x": ' + '{"a": ' * 600 + "1" + "}" * 600 + "}"
    (tmp_path / "a-deep.sse").write_bytes(encode_data(deep) + DONE_EVENT)
    (tmp_path / "b-deeper.sse").write_bytes(encode_data("[" * 5000 + "]" * 5000) + DONE_EVENT)
    (tmp_path / "c-golden.sse").write_bytes(GOLDEN.read_bytes())
    status, out, _ = run(capsys, "--format", "json", str(tmp_path))
    results = {Path(r["source"]).name: {f["rule"] for f in r["errors"]} for r in json.loads(out)["results"]}
    assert status == 1
    assert "json-too-deep" in results["a-deep.sse"]
    assert "json-too-deep" in results["b-deeper.sse"]
    assert results["c-golden.sse"] == set()


def test_a_bare_json_array_body_is_judged_as_llama_cpp_prompt_array_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    one["choices"] = [{"index": 0, "text": "x", "logprobs": None, "finish_reason": "stop"}]
    (tmp_path / "reply.json").write_text(json.dumps([one, one]))
    status, out, err = run(capsys, "--format", "json", str(tmp_path / "reply.json"))
    assert status == 1, err
    [result] = json.loads(out)["results"]
    assert [(f["rule"], f["quirk"]) for f in result["errors"]] == [("body-not-object", "Q73")]


@pytest.mark.parametrize(
    ("n", "prompts", "choices", "rules"),
    [
        (2, 2, 4, set()),  # index = prompt * n + sample, up to 3
        (1, 2, 2, set()),  # n=1 written out: still one per prompt
        (None, 2, 1, {"choice-count"}),  # a choice missing: the second prompt's
        (None, 1, 0, {"stream-empty"}),  # no chunk at all is an empty stream, its own cause (Q52)
    ],
)
def test_choices_are_counted_per_prompt_and_n_defaults_to_one(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    n: int | None,
    prompts: int,
    choices: int,
    rules: set[str],
) -> None:
    events = b""
    for index in range(choices):
        chunk = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
        chunk["choices"] = [{"index": index, "text": "x", "logprobs": None, "finish_reason": "stop"}]
        events += encode_data(json.dumps(chunk))
    body: dict[str, object] = {
        "model": "m",
        "stream": True,
        "prompt": ["p"] * prompts if prompts > 1 else "p",
    }
    if n is not None:
        body["n"] = n
    request = {"method": "POST", "path": "/v1/completions", "body": body}
    assert _judged(tmp_path, capsys, "t", events + DONE_EVENT, request) == rules


def test_each_missing_required_key_is_one_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chunk = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}],
    }
    request = {
        "method": "POST",
        "path": "/v1/chat/completions",
        "body": {"model": "m", "messages": MESSAGES, "stream": True},
    }
    (tmp_path / "t.sse").write_bytes(encode_data(json.dumps(chunk)) + DONE_EVENT)
    (tmp_path / "t.json").write_text(json.dumps({"request": request}))
    _, out, _ = run(capsys, "--format", "json", str(tmp_path / "t.sse"))
    [result] = json.loads(out)["results"]
    missing = [f for f in result["errors"] if f["rule"] == "required-key"]
    # One finding per rule (and quirk cited), each missing key named once.
    assert sorted(p for f in missing for p in [f["pointer"], *f["pointers"]]) == [
        "/created",
        "/model",
        "/object",
    ]
    assert sum(f["count"] for f in missing) == 3


def test_junit_is_well_formed_when_a_message_holds_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {"error": {"message": "bad \u0000 byte \u001b[31m", "type": "server_error", "code": 500}}
    (tmp_path / "t.sse").write_bytes(encode_data(json.dumps(error)))
    _, out, _ = run(capsys, "--format", "junit", str(tmp_path / "t.sse"))
    failure = ET.fromstring(out).find(".//failure")
    assert failure is not None
    assert "bad" in (failure.text or "")


def test_a_tool_call_fragment_without_index_is_q64_not_a_choice_quirk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chunk["choices"] = [
        {"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": None}
    ]
    (tmp_path / "t.sse").write_bytes(encode_data(json.dumps(chunk)) + DONE_EVENT)
    _, out, _ = run(capsys, "--format", "json", str(tmp_path / "t.sse"))
    [result] = json.loads(out)["results"]
    [finding] = [f for f in result["errors"] if f["rule"] == "required-key"]
    assert (finding["pointer"], finding["quirk"]) == ("/choices/0/delta/tool_calls/0/index", "Q64")


def _repeated(tmp_path: Path, name: str, server: str) -> Path:
    """A chat stream whose 9 chunks each change ``id``: one finding, count 8 (the first sets it)."""
    chunks = [
        {"id": f"chatcmpl-{i}", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
        for i in range(9)
    ]
    body = b"".join(encode_data(json.dumps(c)) for c in chunks) + DONE_EVENT
    (tmp_path / f"{name}.sse").write_bytes(body)
    (tmp_path / f"{name}.json").write_text(json.dumps({"server": server, "response": {"status": 200}}))
    return tmp_path / f"{name}.sse"


def test_every_format_carries_the_counts_and_the_per_server_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repeated = _repeated(tmp_path, "a", "server-a")
    text = run(capsys, str(repeated), str(GOLDEN))[1]
    assert "error   id-changed (x8) [Q03] at event 1" in text
    assert "server-a: 1 responses judged, 1 with errors, " in text
    assert f"{GOLDEN}: 1 responses judged, 0 with errors, 0 distinct rules broken" in text
    report = json.loads(run(capsys, "--format", "json", str(repeated))[1])
    [finding] = [f for f in report["results"][0]["errors"] if f["rule"] == "id-changed"]
    assert (finding["count"], finding["event"]) == (8, 1)
    assert report["results"][0]["server"] == "server-a"
    assert [s["server"] for s in report["servers"]] == ["server-a"]
    markdown = run(capsys, "--format", "markdown", str(repeated))[1]
    assert "| server | responses judged | responses with errors | distinct rules |" in markdown
    assert "| server-a | 1 | 1 |" in markdown
    assert "| error | `id-changed` | Q03 | 8 | 1 |" in markdown
    junit = ET.fromstring(run(capsys, "--format", "junit", str(repeated))[1])
    suite = junit.find("testsuite")
    assert suite is not None
    assert suite[0].tag == "properties"
    properties = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert properties["server-a.responses"] == "1"
    assert properties["server-a.responses_with_errors"] == "1"
    failure = next(junit.iter("failure"))
    assert "id-changed (x8)" in (failure.text or "")


def test_every_format_lists_each_quirk_a_rule_cited_in_one_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Usage on the finish chunk (Q26), then on a second finish chunk (usage on every chunk, Q27).
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    finish = chat_chunk([delta(finish="stop")], usage=usage)
    path = tmp_path / "usage-twice.sse"
    path.write_bytes(stream(chat_chunk([delta("Hi", role="assistant")]), finish, finish))
    text = run(capsys, str(path))[1]
    assert "error   usage-in-choice-chunk (x2) [Q26, Q27] at event 1 /usage" in text
    [finding] = [
        f
        for f in json.loads(run(capsys, "--format", "json", str(path))[1])["results"][0]["errors"]
        if f["rule"] == "usage-in-choice-chunk"
    ]
    assert (finding["quirk"], finding["quirks"], finding["count"], finding["event"]) == (
        "Q26",
        ["Q26", "Q27"],
        2,
        1,
    )
    markdown = run(capsys, "--format", "markdown", str(path))[1]
    assert "| error | `usage-in-choice-chunk` | Q26, Q27 | 2 | 1 |" in markdown
    junit = ET.fromstring(run(capsys, "--format", "junit", str(path))[1])
    assert "usage-in-choice-chunk (x2) [Q26, Q27]" in (next(junit.iter("failure")).text or "")


CUT = DATA / "reports" / "vllm-18412.sse"
"""Ends without a blank line after its last block and without [DONE]: sse-cut-off and done-missing."""


def _rules(out: str) -> set[str]:
    return {f["rule"] for r in json.loads(out)["results"] for f in r["errors"] + r["warnings"]}


def test_excerpt_flag_quiets_the_end_of_stream_rules_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = tmp_path / CUT.name  # without the note that says it is a quote
    bare.write_bytes(CUT.read_bytes())
    whole = _rules(run(capsys, "--format", "json", str(bare))[1])
    assert {"sse-cut-off", "done-missing"} <= whole
    status, out, _ = run(capsys, "--format", "json", "--excerpt", str(bare))
    assert _rules(out) == whole - {"sse-cut-off", "done-missing"}
    assert json.loads(out)["results"][0]["excerpt"] is True
    assert status == 1  # the tool-call errors in the excerpt still count


def test_excerpt_sidecar_key_quiets_the_end_of_stream_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
    (tmp_path / "cut.sse").write_bytes(encode_data(json.dumps(chunk)) + b'data: {"id": "c", "obj')
    (tmp_path / "cut.json").write_text(json.dumps({"excerpt": True, "response": {"status": 200}}))
    assert (
        _rules(run(capsys, "--format", "json", str(tmp_path))[1]) & {"sse-cut-off", "done-missing"} == set()
    )
    (tmp_path / "cut.json").write_text(json.dumps({"response": {"status": 200}}))
    assert {"sse-cut-off", "done-missing"} <= _rules(run(capsys, "--format", "json", str(tmp_path))[1])
    (tmp_path / "cut.json").write_text(json.dumps({"excerpt": "yes", "response": {"status": 200}}))
    status, _, err = run(capsys, str(tmp_path))
    assert status == 2
    assert "'excerpt' must be true or false" in err


def test_brief_is_one_line_per_distinct_rule_per_server_the_worst_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 33: a 56-transcript report was 219 lines; --brief gives each server its ranking line and
    # one line per rule it broke, however many responses broke it.
    for i in range(3):
        _repeated(tmp_path, f"a{i}", "server-a")
    (tmp_path / "golden.sse").write_bytes(GOLDEN.read_bytes())
    (tmp_path / "golden.json").write_text(json.dumps({"server": "openai", "response": {"status": 200}}))
    broken = tmp_path / "vllm.sse"
    broken.write_bytes(BROKEN.read_bytes())
    (tmp_path / "vllm.json").write_text(json.dumps({"server": "vllm", "response": {"status": 200}}))
    status, out, _ = run(capsys, "--brief", str(tmp_path))
    assert status == 1
    lines = out.splitlines()
    servers = [line.split(":")[0] for line in lines if not line.startswith(" ")][:-2]  # totals, quirk ids
    assert servers == ["vllm", "server-a", "openai"]  # by the weight of their error rules, worst first
    a = lines.index(next(line for line in lines if line.startswith("server-a:")))
    assert lines[a] == (
        "server-a: 3 responses judged, 3 with errors, 1 distinct rules broken (weight 2), harm 2.00 an answer"
    )
    assert lines[a + 1] == (
        "  id-changed (client fails) [Q03] in 3 of 3: 'id' changed from 'chatcmpl-0' to 'chatcmpl-1';"
        " every chunk has the same id"
    )
    rules_of_vllm = len({f.rule for f in judge_transcript(load_transcript(broken)).findings})
    assert len(lines) == 3 + rules_of_vllm + 1 + 0 + 2  # three servers, their rules, the totals


def test_a_folded_finding_names_every_place_it_stands_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 33: "required-key (x84)" named one of the keys it folded.
    body = {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "x"}}]}
    (tmp_path / "bare.json").write_text(json.dumps(body))
    out = run(capsys, str(tmp_path / "bare.json"))[1]
    [line] = [line for line in out.splitlines() if "error   required-key" in line]
    for key in ("/created", "/model", "/choices/0/index", "/choices/0/finish_reason"):
        assert key in line


def test_the_text_report_says_where_its_quirk_ids_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, str(BROKEN))[1]
    assert out.splitlines()[-1] == "quirk ids (Q63): each explained in conformant's docs/quirks.md"
    assert "quirk ids" not in run(capsys, str(GOLDEN))[1]  # nothing cited, nothing to explain
    brief = run(capsys, "--brief", str(BROKEN))[1].splitlines()
    assert brief[-1] == "[Q..] and [N..]: quirk ids, each explained in conformant's docs/quirks.md"


def test_brief_of_the_shipped_corpus_fits_one_screen(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 33: --brief on the 55-transcript corpus was 67 lines, many wider than a terminal. Past the
    # eighth, a server's error rules share one line; its warnings share one; no line wraps.
    corpus = Path(__file__).resolve().parents[2] / "conformance" / "corpus"
    status, out, _ = run(capsys, "--brief", str(corpus))
    lines = out.splitlines()
    assert status == 1
    assert len(lines) <= 50
    assert max(len(line) for line in lines) <= 120
    heaviest = next(i for i, line in enumerate(lines) if line.startswith("llama-cpp-python-0.3.36:"))
    assert lines[heaviest + 1].startswith("  error-leaks-path (exposes internals) [spec] in 5 of 42:")
    assert lines[heaviest + 9].startswith("  and ")  # the ninth rule on, named with its count
    warned = next(i for i in range(heaviest, len(lines)) if lines[i].startswith("  warnings: "))
    folded = " ".join(lines[heaviest + 9 : warned])  # wrapped, never cut: every rule is named
    for rule in ("usage-missing (2)", "error-message-empty (1)", "tool-call-name-repeated (1)"):
        assert rule in folded
    assert lines[warned].startswith("  warnings: model-is-local-path (32), required-key (12)")


def test_the_text_report_names_each_servers_worst_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 33: the ranking says what to fix first, one line each: a wrong result before a failure.
    broken = tmp_path / "vllm.sse"
    broken.write_bytes(BROKEN.read_bytes())
    sidecar = {"server": "vllm", "excerpt": True, "response": {"status": 200}}
    (tmp_path / "vllm.json").write_text(json.dumps(sidecar))
    lines = run(capsys, str(tmp_path))[1].splitlines()
    ranking = lines.index(
        "vllm: 1 responses judged, 1 with errors, 3 distinct rules broken (weight 6), harm 2.00 an answer"
    )
    assert [line.split(" [")[0] for line in lines[ranking + 1 : ranking + 4]] == [
        "  tool-call-id-missing (client fails)",
        "  tool-call-name-repeated (client fails)",
        "  tool-call-type-missing (client fails)",
    ]
