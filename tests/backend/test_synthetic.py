"""The synthetic GGUF writer: files that read back as written, and that llama.cpp loads and tokenizes."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.backend

gguf = pytest.importorskip("gguf")

from backend.synthetic import (  # noqa: E402 - after the importorskip that guards the backend extra
    BOS,
    CHATML_TEMPLATE,
    EOS,
    EXPERT_TENSORS,
    IM_END,
    VOCAB_SIZE,
    SyntheticSpec,
    expert_tensor_names,
    main,
    reply_tokens,
    vocabulary,
    write_synthetic,
)

QTYPE = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}


def field_value(reader: Any, key: str) -> object:
    return reader.get_field(key).contents()


@pytest.mark.parametrize("kind", ["dense", "moe"])
@pytest.mark.parametrize("quant", ["q8_0", "q4_0"])
def test_written_model_reads_back_with_the_declared_shape(tmp_path: Path, kind: str, quant: str) -> None:
    spec = SyntheticSpec(kind=kind, quant=quant)  # type: ignore[arg-type]
    reader = gguf.GGUFReader(write_synthetic(tmp_path / "m.gguf", spec))

    assert field_value(reader, "general.architecture") == "llama"
    assert field_value(reader, "llama.block_count") == spec.n_layer
    assert field_value(reader, "llama.embedding_length") == spec.n_embd
    assert field_value(reader, "tokenizer.ggml.model") == "llama"
    assert len(field_value(reader, "tokenizer.ggml.tokens")) == VOCAB_SIZE  # type: ignore[arg-type]
    assert field_value(reader, "tokenizer.chat_template") == CHATML_TEMPLATE
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["token_embd.weight"].tensor_type == QTYPE[quant]
    assert list(tensors["token_embd.weight"].shape) == [spec.n_embd, VOCAB_SIZE]  # ggml order
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    if kind == "moe":
        assert field_value(reader, "llama.expert_count") == spec.n_expert
        assert field_value(reader, "llama.expert_used_count") == spec.n_expert_used
        gate = tensors["blk.1.ffn_gate_exps.weight"]
        assert gate.tensor_type == QTYPE[quant]
        assert list(gate.shape) == [spec.n_embd, spec.n_ff, spec.n_expert]
        assert list(tensors["blk.0.ffn_down_exps.weight"].shape) == [spec.n_ff, spec.n_embd, spec.n_expert]
        assert tensors["blk.0.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
        assert [n for n in tensors if "_exps" in n] == expert_tensor_names(spec)
    else:
        assert "llama.expert_count" not in reader.fields
        assert not [n for n in tensors if "_exps" in n or "gate_inp" in n]
        assert expert_tensor_names(spec) == []


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path) -> None:
    a = write_synthetic(tmp_path / "a.gguf", SyntheticSpec(kind="moe", quant="q4_0", seed=7)).read_bytes()
    b = write_synthetic(tmp_path / "b.gguf", SyntheticSpec(kind="moe", quant="q4_0", seed=7)).read_bytes()
    c = write_synthetic(tmp_path / "c.gguf", SyntheticSpec(kind="moe", quant="q4_0", seed=8)).read_bytes()
    assert a == b
    assert len(a) == len(c)
    assert a != c


def test_vocabulary_has_specials_bytes_and_unique_pieces() -> None:
    tokens, scores, types = vocabulary()
    assert len(tokens) == len(scores) == len(types) == VOCAB_SIZE
    assert len(set(tokens)) == VOCAB_SIZE
    assert (tokens[BOS], tokens[EOS], tokens[IM_END]) == ("<s>", "</s>", "<|im_end|>")
    assert sum(t == gguf.TokenType.BYTE for t in types) == 256
    assert "<0x0A>" in tokens


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "sparse"}, "kind must be one of"),
        ({"quant": "q5_k"}, "quant must be one of"),
        ({"n_embd": 100}, "multiple of 32"),
        ({"n_head": 3}, "n_embd must divide by n_head"),
        ({"kind": "moe", "n_expert_used": 5}, "n_expert_used"),
    ],
)
def test_spec_rejects_shapes_llama_cpp_cannot_quantize_or_split(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SyntheticSpec(**kwargs)  # type: ignore[arg-type]


def test_cli_writes_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "moe.gguf"
    assert main(["--kind", "moe", "--quant", "q4_0", "--layers", "3", "--seed", "5", str(out)]) == 0
    assert "moe, q4_0, seed 5" in capsys.readouterr().out
    reader = gguf.GGUFReader(out)
    assert field_value(reader, "llama.block_count") == 3
    assert not list(tmp_path.glob("*.partial"))


def test_cli_rejects_bad_arguments_with_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--kind", "moe", "--experts", "2", "--experts-used", "3", str(tmp_path / "x.gguf")])
    assert exited.value.code == 2
    assert not (tmp_path / "x.gguf").exists()


def test_llama_cpp_tokenizes_and_detokenizes_text(tmp_path: Path) -> None:
    llama = pytest.importorskip("llama_cpp")
    from backend.loading import LoadOptions, load_model

    path = write_synthetic(tmp_path / "dense.gguf", SyntheticSpec())
    with load_model(str(path), LoadOptions()) as loaded:
        vocab = llama.llama_model_get_vocab(loaded.model)
        text = "hello world, the time is 10:42!\n"
        tokens = (llama.llama_token * 128)()
        n = llama.llama_tokenize(vocab, text.encode(), len(text.encode()), tokens, 128, True, False)
        assert n > 1
        assert tokens[0] == BOS
        # Whole words come out as single pieces: the scores make SentencePiece prefer them. No space is
        # put before the text (as in Qwen's and Llama 3's vocabularies): a word is whole after a space.
        hello = (llama.llama_token * 8)()
        assert llama.llama_tokenize(vocab, b" hello", 6, hello, 8, False, False) == 1
        text_out = ctypes.create_string_buffer(256)
        # Without the BOS: llama.cpp strips the SentencePiece space prefix only when no BOS is removed.
        after_bos = (llama.llama_token * (n - 1))(*tokens[1:n])
        size = llama.llama_detokenize(vocab, after_bos, n - 1, text_out, 256, False, False)
        assert text_out.raw[:size].decode() == text
        assert llama.llama_vocab_is_eog(vocab, EOS)
        assert llama.llama_vocab_is_eog(vocab, IM_END)


def test_expert_tensor_names_follow_llama_cpp_names() -> None:
    names = expert_tensor_names(SyntheticSpec(kind="moe", n_layer=2))
    assert len(names) == 2 * len(EXPERT_TENSORS)
    assert "blk.1.ffn_down_exps.weight" in names


def test_a_scripted_model_answers_its_reply_and_ends_at_any_temperature(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    import httpx

    from backend.app import create_app
    from backend.context import ContextOptions
    from backend.service import Backend
    from backend.synthetic import HERMES_TOOLS_TEMPLATE
    from tests.support.servers import run_asgi

    spec = SyntheticSpec(reply="Hi there.", chat_template=HERMES_TOOLS_TEMPLATE, n_ctx_train=8192)
    path = write_synthetic(tmp_path / "scripted.gguf", spec)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    backend = Backend.open(str(path), context=ContextOptions(ctx_size=8192, parallel=1, threads=2))
    try:
        with run_asgi(create_app(backend)) as url:
            for temperature in (0, 0.8, 1.5):
                body = {
                    "model": "scripted",
                    "messages": [{"role": "user", "content": "Write at length about anything. " * 300}],
                    "tools": [tool],
                    "temperature": temperature,
                }
                answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
                assert answer["choices"][0]["message"]["content"] == "Hi there."
                assert answer["choices"][0]["finish_reason"] == "stop"
                assert answer["usage"]["prompt_tokens"] > 2000  # a long prompt, answered all the same
            # The end-of-turn token drawn as the last the limit allows: not counted (the client got the
            # reply's tokens), so usage does not read as an answer cut at the limit and called "stop".
            spelled = len(reply_tokens("Hi there.", spec.n_embd))
            body = {
                "model": "scripted",
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": spelled + 1,
            }
            answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
            assert answer["choices"][0]["finish_reason"] == "stop"
            assert answer["usage"]["completion_tokens"] == spelled
    finally:
        backend.close()


def test_a_scripted_reply_that_would_repeat_a_token_is_a_token_of_its_own() -> None:
    """ "Hello" spelled with the vocabulary's pieces repeats "l": the model would not know which "l" it
    is at. Such a reply becomes one piece, in place of the vocabulary's last; others are spelled."""
    tokens, _, types = vocabulary("Hello")
    assert tokens[-3:] == ["Hello", "<tool_call>", "</tool_call>"]
    assert types[-2:] == [gguf.TokenType.USER_DEFINED] * 2  # (the tags: single tokens, as in Qwen's)
    assert reply_tokens("Hello", 128) == [len(tokens) - 3]
    assert len(reply_tokens("Hi there.", 128)) > 1
    assert vocabulary("Hi there.")[0] == vocabulary()[0]


def test_a_scripted_tool_call_is_one_token_and_a_call_that_misfits_the_grammar_is_drawn_again(
    tmp_path: Path,
) -> None:
    """A reply the vocabulary cannot spell with distinct pieces (a Hermes call repeats ``"``) is one piece
    of its own, so a scripted model can call a tool (issue 38: the Open Responses suite's tool tests).
    The same call to a function the request did not offer does not fit the lazy grammar that starts at
    ``<tool_call>``: llama.cpp's own lazy sampler threw there, through its C API, and the backend
    process died (``std::terminate``); the backend now draws another token and answers."""
    pytest.importorskip("llama_cpp")
    import httpx

    from backend.app import create_app
    from backend.context import ContextOptions
    from backend.service import Backend
    from backend.synthetic import HERMES_TOOLS_TEMPLATE
    from tests.support.servers import run_asgi

    call = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    assert len(reply_tokens(call, 128)) == 1
    spec = SyntheticSpec(reply=call, chat_template=HERMES_TOOLS_TEMPLATE, n_ctx_train=4096)
    path = write_synthetic(tmp_path / "caller.gguf", spec)
    parameters = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
    backend = Backend.open(str(path), context=ContextOptions(ctx_size=4096, parallel=1, threads=2))
    try:
        with run_asgi(create_app(backend)) as url:
            ask = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 8}
            offered = {
                **ask,
                "tools": [
                    {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
                ],
            }
            answer = httpx.post(url + "/v1/chat/completions", json=offered, timeout=60).json()
            (called,) = answer["choices"][0]["message"]["tool_calls"]
            assert called["function"]["name"] == "get_weather"
            assert json.loads(called["function"]["arguments"]) == {"location": "Paris"}
            other = {
                **ask,
                "tools": [{"type": "function", "function": {"name": "get_time", "parameters": parameters}}],
            }
            answer = httpx.post(url + "/v1/chat/completions", json=other, timeout=60).json()
            assert (
                "tool_calls" not in answer["choices"][0]["message"]
                or not answer["choices"][0]["message"]["tool_calls"]
            )
            assert httpx.get(url + "/health", timeout=10).status_code == 200  # (the process lives)
    finally:
        backend.close()


def test_a_scripted_model_with_noise_computes_with_its_blocks_and_still_answers_its_reply(
    tmp_path: Path,
) -> None:
    """``reply_noise``: the blocks keep random weights (every kernel computes on real values, as the GPU
    check's comparison of GPU and CPU needs) and the script's margin survives them: the greedy answer, and
    one drawn at a high temperature, are the reply, while the logits differ from a noise-free model's."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import numpy as np

    reply = "the hello world is and of to in it you"
    shape: dict[str, Any] = {
        "kind": "dense",
        "quant": "q4_0",
        "n_layer": 3,
        "n_ctx_train": 1024,
        "reply": reply,
    }
    noisy = write_synthetic(tmp_path / "noisy.gguf", SyntheticSpec(**shape, reply_noise=0.3))
    quiet = write_synthetic(tmp_path / "quiet.gguf", SyntheticSpec(**shape))
    block = next(t for t in gguf.GGUFReader(noisy).tensors if t.name == "blk.1.ffn_down.weight")
    assert np.any(block.data != 0)
    last_logits = []
    for path in (noisy, quiet):
        model = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, verbose=False)
        try:
            for temperature in (0.0, 1.5):
                answer = model.create_completion("x", max_tokens=40, temperature=temperature, seed=1)
                assert answer["choices"][0]["text"] == reply
                assert answer["choices"][0]["finish_reason"] == "stop"
            model.reset()
            model.eval(model.tokenize(b"the hello"))
            last_logits.append(np.array(model.scores[model.n_tokens - 1]))
        finally:
            model.close()
    noisy_logits, quiet_logits = last_logits
    assert np.argmax(noisy_logits) == np.argmax(quiet_logits)
    assert not np.allclose(noisy_logits, quiet_logits, atol=1e-3)
    top, second = np.sort(noisy_logits)[::-1][:2]
    assert top - second > 40


@pytest.mark.parametrize("noise", [-0.1, 1.0])
def test_reply_noise_needs_a_reply_and_a_fraction(noise: float) -> None:
    with pytest.raises(ValueError, match="reply_noise"):
        SyntheticSpec(reply="hi", reply_noise=noise)
    with pytest.raises(ValueError, match="reply_noise"):
        SyntheticSpec(reply_noise=0.3)
