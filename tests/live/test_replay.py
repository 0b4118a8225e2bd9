"""The replay server against real HTTP clients: bytes, status and headers as recorded, paced as recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from conformance.cli import main
from conformance.commands.replay import parse_pace
from conformance.replay import TRANSCRIPT_HEADER, create_replay_app, load_corpus, transcript_stem
from conformance.transcript import Transcript, save_transcript
from tests.support.servers import run_asgi

CORPUS = load_corpus()


@pytest.fixture(scope="module")
def corpus_url() -> object:
    with run_asgi(create_replay_app(CORPUS, pace=None)) as url:
        yield url


def test_corpus_ships_every_report() -> None:
    reports = Path(__file__).parents[1] / "data" / "transcripts" / "reports"
    stems = {transcript_stem(t) for t in CORPUS}
    for path in reports.glob("*.sse"):
        stem = path.name[: -len(".sse")].replace(".", "-")
        assert stem in stems
    shipped = [t for t in CORPUS if Path(t.name + ".source.txt").exists()]
    assert len(shipped) == len(list(reports.glob("*.sse")))
    assert all(t.request and t.status == 200 and t.chunk_timing for t in shipped)
    assert all(t.request for t in CORPUS)


@pytest.mark.parametrize("transcript", CORPUS, ids=transcript_stem)
def test_corpus_replays_byte_identical_by_request(corpus_url: str, transcript: Transcript) -> None:
    request = transcript.request or {}
    recorded = request["body"]
    # Key order must not matter: send the body with its keys reversed. A malformed body is kept as text.
    body = recorded if isinstance(recorded, str) else json.dumps(dict(reversed(list(recorded.items()))))
    with httpx.Client(base_url=corpus_url) as client:
        response = client.post(request["path"], content=body)
    assert response.status_code == transcript.status
    assert response.content == transcript.read_body()
    assert response.headers["content-type"] == transcript.headers["content-type"]


@pytest.mark.parametrize("transcript", CORPUS, ids=transcript_stem)
def test_corpus_replays_byte_identical_by_name(corpus_url: str, transcript: Transcript) -> None:
    with httpx.Client(base_url=corpus_url) as client:
        response = client.post(
            "/v1/chat/completions",
            json={"anything": 1},
            headers={TRANSCRIPT_HEADER: transcript_stem(transcript)},
        )
    assert response.content == transcript.read_body()


def test_corpus_keeps_its_quirks() -> None:
    """The corpus is for testing clients against known bugs: the judge must still see them."""
    judge_transcript = pytest.importorskip("conformance.judge").judge_transcript
    flagged = [transcript_stem(t) for t in CORPUS if judge_transcript(t).errors]
    assert "ik_llama-767" in flagged
    assert "localai-1194" in flagged


def _error_of(response: httpx.Response) -> dict[str, object]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


def test_unmatched_request_says_how_to_record(corpus_url: str, tmp_path: Path) -> None:
    with httpx.Client(base_url=corpus_url) as client:
        response = client.post("/v1/chat/completions", json={"model": "nobody", "messages": []})
    assert response.status_code == 404
    message = str(_error_of(response)["message"])
    # The command it gives works as written once its placeholders are filled: here it records a case
    # the corpus has from the corpus server itself.
    command = message.split("`")[1]
    known = next(t for t in CORPUS if transcript_stem(t) == "ollama-4357")
    (tmp_path / "request.json").write_text(json.dumps(known.request_body))
    filled = (
        command.replace("UPSTREAM_BASE_URL", corpus_url)
        .replace("REQUEST.json", str(tmp_path / "request.json"))
        .replace("DIR", str(tmp_path / "recorded"))
        .replace("NAME", "case")
    )
    assert filled.split()[:2] == ["conformant", "record"]
    assert main(filled.split()[1:]) == 0
    assert (tmp_path / "recorded" / "case.sse").read_bytes() == b"".join(known.iter_body())


def test_unknown_transcript_name_and_bad_json(corpus_url: str) -> None:
    with httpx.Client(base_url=corpus_url) as client:
        named = client.post("/v1/completions", json={}, headers={TRANSCRIPT_HEADER: "no-such"})
        broken = client.post("/v1/completions", content=b'{"model": ')
    assert named.status_code == 404
    assert "no-such" in str(_error_of(named)["message"])
    assert broken.status_code == 400
    assert "conformant record" in str(_error_of(broken)["message"])


def test_models_lists_recorded_models(corpus_url: str) -> None:
    ids = {m["id"] for m in httpx.get(corpus_url + "/v1/models").json()["data"]}
    assert "ollama-4357" in ids


def test_status_and_headers_replayed(tmp_path: Path) -> None:
    body = b'{"error":{"message":"too long","type":"invalid_request_error","param":null,"code":"x"}}'
    transcript = save_transcript(
        tmp_path / "err",
        body,
        request={"method": "POST", "path": "/v1/completions", "body": {"prompt": "x"}},
        status=400,
        headers={"content-type": "application/json", "x-request-id": "abc", "content-length": "999"},
    )
    with run_asgi(create_replay_app([transcript])) as url:
        response = httpx.post(url + "/v1/completions", json={"prompt": "x"})
    assert (response.status_code, response.content) == (400, body)
    assert response.headers["x-request-id"] == "abc"


def _arrivals(url: str, stem: str) -> list[tuple[float, int]]:
    arrivals = []
    with httpx.Client(base_url=url) as client:
        started = time.monotonic()
        with client.stream("POST", "/v1/completions", json={}, headers={TRANSCRIPT_HEADER: stem}) as response:
            for piece in response.iter_raw():
                arrivals.append((time.monotonic() - started, len(piece)))
    return arrivals


@pytest.mark.parametrize("pace", [1.0, 0.5])
def test_pacing_keeps_the_recorded_gaps(tmp_path: Path, pace: float) -> None:
    # Lower bounds only, with a loose ceiling: a busy machine can deliver a chunk late but never early,
    # so "no chunk before its paced time" is what pacing guarantees (a 20% window failed under load).
    events = [f"data: {i}\n\n".encode() for i in range(3)]
    timing = [(0.3 * (i + 1), len(event)) for i, event in enumerate(events)]
    body = b"".join(events)
    transcript = save_transcript(tmp_path / "paced", body, status=200, chunk_timing=timing)
    with run_asgi(create_replay_app([transcript], pace=pace)) as url:
        arrivals = _arrivals(url, "paced")
    assert b"".join(b"x" * n for _, n in arrivals) == b"x" * len(body)
    assert len(arrivals) == len(timing)
    for (got, _), (recorded, _) in zip(arrivals, timing, strict=True):
        assert recorded * pace * 0.95 <= got < recorded * pace + 5


def test_pace_none_sends_at_once(tmp_path: Path) -> None:
    transcript = save_transcript(tmp_path / "slow", b"data: 1\n\n", status=200, chunk_timing=[(30.0, 9)])
    with run_asgi(create_replay_app([transcript], pace=None)) as url:
        arrivals = _arrivals(url, "slow")
    assert arrivals[-1][0] < 30


def test_replay_command_rejects_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["replay-server"]) == 2
    assert main(["replay-server", str(tmp_path)]) == 2
    assert "no transcripts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["replay-server", "--corpus", "--pace", "fast"])
    assert parse_pace("none") is None
    assert parse_pace("0.5") == 0.5


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """It said it was replaying on the port, then uvicorn's own error, exit 3 (found by black-box
    testing); as ``serve`` says it: one line, exit 2, nothing claimed."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["replay-server", "--corpus", "--port", str(port)]) == 2
    captured = capsys.readouterr()
    assert (
        captured.err.strip()
        == f"conformant replay-server: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "replaying" not in captured.out


@pytest.mark.parametrize("given", ["0", "99999"])
def test_a_port_out_of_range_is_a_usage_error(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    """99999 listened on 34463 (modulo 65536) and 0 on a port it never named (found by black-box
    testing); as serve's --port, it is refused."""
    with pytest.raises(SystemExit) as stopped:
        main(["replay-server", "--corpus", "--port", given])
    assert stopped.value.code == 2
    assert f"argument --port: '{given}' is not" in capsys.readouterr().err
