"""Tiny synthetic GGUF models that llama.cpp loads and runs: for fast tests, and for users needing a model.

Two kinds, both ``llama`` architecture with random (seeded) weights:

- ``dense``: a plain transformer.
- ``moe``: the same with a Mixtral-style mixture of experts (``ffn_{gate,up,down}_exps`` tensors, a router),
  so expert placement (``--cpu-moe``, ``--override-tensor``) can be exercised without a real MoE download.

Weights are quantized Q8_0 or Q4_0 (quantizations llama.cpp repacks on CPU); norms and the router stay F32.
The tokenizer is a small SentencePiece-style ("llama") vocabulary with byte fallback, so any text tokenizes,
plus ChatML control tokens, FIM tokens and a ChatML chat template. The text it generates is noise, but it is
deterministic for a given seed.

With ``reply`` (``--reply``), the model is scripted instead: its blocks add nothing to the residual stream,
so the last position's state is the current token's embedding, and embeddings and output rows are set so
that each reply token follows the one before it, the first follows any other token, and ``<|im_end|>``
follows the last, with a margin of 64 in the logits (any temperature draws them). It answers every prompt
with ``reply`` and ends its turn: for clients that need an answer that ends (Codex CLI fails a turn a
token limit cuts), where a random or base model would write to the limit.

With ``reply_noise`` as well, the blocks keep their random weights and the script's embeddings are made
large enough that all the blocks' writes together move the residual stream by about that fraction of it:
every kernel computes on real values, and the logits keep the script's margin. A random model's logits are
near flat, so two correct builds (GPU and CPU) part at its first token; this one's greedy answers must
match (bench/gpu_check.py).

    python -m backend.synthetic --kind moe --quant q4_0 moe-q4_0.gguf
"""

from __future__ import annotations

import argparse
import os
import string
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType
from gguf.quants import quantize

Kind = Literal["dense", "moe"]
Quant = Literal["q8_0", "q4_0"]

KINDS: tuple[Kind, ...] = ("dense", "moe")
QUANTS: tuple[Quant, ...] = ("q8_0", "q4_0")

_QTYPES: dict[Quant, tuple[GGMLQuantizationType, LlamaFileType]] = {
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
}

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

HERMES_TOOLS_TEMPLATE = (
    # ChatML with tools as Qwen 2.5 and Hermes 2 Pro templates show them: the tool list in the system turn,
    # calls in <tool_call> tags, tool answers in <tool_response> tags.
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You may call functions. Their signatures, in <tools></tools>:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    "Answer a call as a JSON object with its name and arguments in <tool_call></tool_call> tags."
    "<|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and loop.first %}"
    "{% elif message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{{ message['content'] }}"
    "{% for call in message['tool_calls'] or [] %}"
    '<tool_call>\n{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A tool-capable template (Hermes/Qwen ``<tool_call>`` format) for end-to-end tests of tool calling."""

TEMPLATES = {"chatml": CHATML_TEMPLATE, "hermes-tools": HERMES_TOOLS_TEMPLATE}

# Token ids of the special tokens: fixed so tests and users can rely on them.
UNK, BOS, EOS, IM_START, IM_END, FIM_PRE, FIM_SUF, FIM_MID = range(8)
_SPECIAL_TOKENS = (
    "<unk>",
    "<s>",
    "</s>",
    "<|im_start|>",
    "<|im_end|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
)
_WORDS = " ".join(
    (
        "the hello world is and of to in it you that was for on are with as be at this have from or one had",
        "by word but not what all were we when your can said there use an each which she do how their",
        "up other about out many then them these so some her would make like him into time has look two more",
    )
).split()
TOOL_TAGS = ("<tool_call>", "</tool_call>")
"""Hermes' and Qwen's tool-call tags, the vocabulary's last tokens (see ``vocabulary``)."""
# A multiple of 8 keeps every weight matrix eligible for llama.cpp's CPU repacking (rows % 8 == 0).
VOCAB_SIZE = 384

EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape of a synthetic model. The defaults make a model of about 1-4 MB that decodes in milliseconds."""

    kind: Kind = "dense"
    quant: Quant = "q8_0"
    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    n_expert: int = 4
    n_expert_used: int = 2
    n_ctx_train: int = 2048
    seed: int = 0
    chat_template: str = CHATML_TEMPLATE
    reply: str | None = None
    """A scripted model's answer to every prompt (its tokens all different); None: random weights."""
    reply_noise: float = 0.0
    """With a reply: how far the random blocks move the residual stream, as a fraction of the embedding
    (0: the blocks write zeros)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.quant not in QUANTS:
            raise ValueError(f"quant must be one of {', '.join(QUANTS)}, not {self.quant!r}")
        # Q8_0/Q4_0 quantize rows in blocks of 32 values; the head split must be exact.
        for name in ("n_embd", "n_ff"):
            if getattr(self, name) % 32:
                raise ValueError(f"{name} must be a multiple of 32")
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
        if (self.n_embd // self.n_head) % 32:
            raise ValueError("the head size (n_embd / n_head) must be a multiple of 32")
        if self.kind == "moe" and not 0 < self.n_expert_used <= self.n_expert:
            raise ValueError("n_expert_used must be between 1 and n_expert")
        if self.reply is not None:
            reply_tokens(self.reply, self.n_embd)  # raises for a reply it cannot script
        if not 0 <= self.reply_noise < 1 or (self.reply_noise and self.reply is None):
            raise ValueError("reply_noise must be in [0, 1), and needs a reply")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def vocabulary(reply: str | None = None) -> tuple[list[str], list[float], list[TokenType]]:
    """The token pieces, their SentencePiece scores and types, VOCAB_SIZE long. A scripted ``reply``
    that the pieces cannot spell without repeating one (a tool call: its JSON repeats ``"``) becomes a
    piece of its own, in place of the last one: the model then answers it in one token. The vocabulary
    ends with the tool-call tags as tokens of their own (``USER_DEFINED``), as Qwen's and Hermes'
    vocabularies have them (llama.cpp's tool-call grammars keep them as single tokens)."""
    tokens = list(_SPECIAL_TOKENS)
    types = [TokenType.UNKNOWN] + [TokenType.CONTROL] * (len(_SPECIAL_TOKENS) - 1)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    pieces = list(_normal_pieces())[: -len(TOOL_TAGS)]
    if reply is not None and len(set(spelled := _spelled(reply, pieces))) != len(spelled):
        pieces[-1] = _piece(reply)
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    # SentencePiece merges the highest-scoring piece first: prefer longer pieces so words stay whole.
    scores = [0.0] * (len(_SPECIAL_TOKENS) + 256) + [float(len(p)) - i * 1e-3 for i, p in enumerate(pieces)]
    tokens += TOOL_TAGS
    types += [TokenType.USER_DEFINED] * len(TOOL_TAGS)
    scores += [0.0] * len(TOOL_TAGS)
    return tokens, scores, types


def _normal_pieces() -> Iterator[str]:
    wanted = VOCAB_SIZE - len(_SPECIAL_TOKENS) - 256
    pieces = ["\u2581", *string.ascii_lowercase, *("\u2581" + c for c in string.ascii_lowercase)]
    pieces += [*string.digits, *".,!?:;'\"-()"]
    for word in _WORDS:
        # SentencePiece only reaches "▁hello" through "▁he", "▁hel", ...: a word needs all its prefixes.
        missing = [p for k in range(2, len(word) + 1) if (p := "\u2581" + word[:k]) not in pieces]
        if len(pieces) + len(missing) <= wanted:
            pieces += missing
    pieces += [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    yield from pieces[:wanted]


def _piece(text: str) -> str:
    return text.replace(" ", "\u2581")


def _spelled(reply: str, pieces: Sequence[str]) -> list[int]:
    """Token ids that spell ``reply`` with the normal ``pieces`` (ids counted from the first of them),
    longest piece first, bytes where none fits (as ids below the first piece's)."""
    index = {p: i for i, p in enumerate(pieces)}
    first = len(_SPECIAL_TOKENS) + 256
    ids: list[int] = []
    rest = _piece(reply)
    while rest:
        piece = next((rest[:n] for n in range(len(rest), 0, -1) if rest[:n] in index), None)
        if piece is None:
            ids += [len(_SPECIAL_TOKENS) + b for b in rest[0].encode()]
            rest = rest[1:]
        else:
            ids.append(first + index[piece])
            rest = rest[len(piece) :]
    return ids


def reply_tokens(reply: str, n_embd: int) -> list[int]:
    """Token ids that spell ``reply`` in the vocabulary made for it, each used once: a scripted model
    knows where it is in its reply only by the current token."""
    tokens, _, types = vocabulary(reply)
    ids = _spelled(reply, [t for t, kind in zip(tokens, types, strict=True) if kind == TokenType.NORMAL])
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"a scripted reply needs tokens that are all different; {reply!r} repeats one")
    if len(ids) >= n_embd:
        raise ValueError(f"a scripted reply may have at most {n_embd - 1} tokens (n_embd - 1)")
    return ids


def _scripted(spec: SyntheticSpec, reply: str) -> dict[str, npt.NDArray[np.float32]]:
    """The embeddings and output rows of a model that answers ``reply`` (see the module's docstring):
    token t's embedding is the unit vector of its place in the reply (0: not in it), and the row of the
    token that comes next reads that place. RMS normalization scales a unit vector by sqrt(n_embd).
    With ``reply_noise``, each of the 2 * n_layer random writes has a norm of about sqrt(n_embd) (its
    input normalized, its weights scaled by 1/sqrt(fan_in)), so together about sqrt(2 * n_layer * n_embd)
    in random directions: the embeddings are that long over the noise asked for."""
    ids = reply_tokens(reply, spec.n_embd)
    length = np.sqrt(2 * spec.n_layer * spec.n_embd) / spec.reply_noise if spec.reply_noise else 1.0
    embeddings = np.zeros((VOCAB_SIZE, spec.n_embd), dtype=np.float32)
    embeddings[:, 0] = length
    for place, token in enumerate(ids, start=1):
        embeddings[token] = 0.0
        embeddings[token, place] = length
    output = np.zeros((VOCAB_SIZE, spec.n_embd), dtype=np.float32)
    for place, token in enumerate([*ids, IM_END]):
        output[token, place] = 64.0 / np.sqrt(spec.n_embd)
    return {"token_embd.weight": embeddings, "output.weight": output}


def expert_tensor_names(spec: SyntheticSpec) -> list[str]:
    """Names of the expert weight tensors, in file order (empty for a dense model)."""
    if spec.kind != "moe":
        return []
    return [f"blk.{i}.{t}.weight" for i in range(spec.n_layer) for t in EXPERT_TENSORS]


def _tensors(
    spec: SyntheticSpec,
) -> Iterator[tuple[str, npt.NDArray[np.float32], bool]]:
    """(name, values in numpy order = reversed ggml order, quantize?) for every tensor of the model."""
    rng = np.random.default_rng(spec.seed)

    def weight(*shape: int) -> npt.NDArray[np.float32]:
        # 1/sqrt(fan_in) keeps activations of the random network in a sane range at any width.
        values: npt.NDArray[np.float32] = rng.standard_normal(shape, dtype=np.float32)
        return values / np.float32(np.sqrt(shape[-1]))

    def norm(n: int) -> npt.NDArray[np.float32]:
        return np.ones(n, dtype=np.float32)

    scripted = _scripted(spec, spec.reply) if spec.reply is not None else {}
    for name, values, quantized in _random_tensors(spec, weight, norm):
        if spec.reply is not None and not name.endswith("norm.weight"):
            # A scripted model's blocks write zeros, or noise small beside its embeddings: each position's
            # residual stream stays (about) its token's embedding.
            values = scripted.get(name, values if spec.reply_noise else np.zeros_like(values))
        yield name, values, quantized


def _random_tensors(
    spec: SyntheticSpec,
    weight: Callable[..., npt.NDArray[np.float32]],
    norm: Callable[[int], npt.NDArray[np.float32]],
) -> Iterator[tuple[str, npt.NDArray[np.float32], bool]]:
    e, kv = spec.n_embd, spec.n_head_kv * spec.head_dim
    yield "token_embd.weight", weight(VOCAB_SIZE, e), True
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", norm(e), False
        yield p + "attn_q.weight", weight(e, e), True
        yield p + "attn_k.weight", weight(kv, e), True
        yield p + "attn_v.weight", weight(kv, e), True
        yield p + "attn_output.weight", weight(e, e), True
        yield p + "ffn_norm.weight", norm(e), False
        if spec.kind == "moe":
            x = spec.n_expert
            yield p + "ffn_gate_inp.weight", weight(x, e), False
            yield p + "ffn_gate_exps.weight", weight(x, spec.n_ff, e), True
            yield p + "ffn_up_exps.weight", weight(x, spec.n_ff, e), True
            yield p + "ffn_down_exps.weight", weight(x, e, spec.n_ff), True
        else:
            yield p + "ffn_gate.weight", weight(spec.n_ff, e), True
            yield p + "ffn_up.weight", weight(spec.n_ff, e), True
            yield p + "ffn_down.weight", weight(e, spec.n_ff), True
    yield "output_norm.weight", norm(e), False
    yield "output.weight", weight(VOCAB_SIZE, e), True


def write_synthetic(path: str | os.PathLike[str], spec: SyntheticSpec | None = None) -> Path:
    """Write a synthetic model to ``path`` (atomically: no reader sees half a file) and return the path."""
    spec = spec or SyntheticSpec()
    out = Path(path)
    qtype, ftype = _QTYPES[spec.quant]
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(str(tmp), "llama")
    try:
        _write_metadata(writer, spec, ftype)
        for name, values, quantized in _tensors(spec):
            if quantized:
                writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)
            else:
                writer.add_tensor(name, values)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, out)
    return out


def _write_metadata(writer: GGUFWriter, spec: SyntheticSpec, ftype: LlamaFileType) -> None:
    writer.add_name(f"conformant-synthetic-{spec.kind}-{spec.quant}")
    writer.add_file_type(int(ftype))
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB_SIZE)
    if spec.kind == "moe":
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)
    tokens, scores, types = vocabulary(spec.reply)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_eot_token_id(IM_END)
    writer.add_uint32("tokenizer.ggml.fim_pre_token_id", FIM_PRE)
    writer.add_uint32("tokenizer.ggml.fim_suf_token_id", FIM_SUF)
    writer.add_uint32("tokenizer.ggml.fim_mid_token_id", FIM_MID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    # No space before the text a tokenizer is given, as modern vocabularies (Qwen's, Llama 3's) have it:
    # llama-server b11434 primes a tool-call grammar with the generation prompt's tokens, and a space
    # put before "assistant" failed it ("Failed to initialize samplers" for tool_choice "required").
    writer.add_add_space_prefix(False)
    writer.add_chat_template(spec.chat_template)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m backend.synthetic",
        description="Write a tiny synthetic GGUF model (random weights) that llama.cpp can load and run.",
    )
    parser.add_argument("--kind", choices=KINDS, default="dense", help="dense, or mixture of experts")
    parser.add_argument("--quant", choices=QUANTS, default="q8_0", help="weight quantization")
    parser.add_argument("--layers", type=int, default=SyntheticSpec.n_layer, help="number of blocks")
    parser.add_argument("--experts", type=int, default=SyntheticSpec.n_expert, help="experts per layer (moe)")
    parser.add_argument(
        "--experts-used", type=int, default=SyntheticSpec.n_expert_used, help="experts per token (moe)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument(
        "--reply", help="a scripted model instead: it answers every prompt with this text, then ends its turn"
    )
    parser.add_argument(
        "--chat-template",
        choices=sorted(TEMPLATES),
        default="chatml",
        help="chatml, or hermes-tools (ChatML with tool calls in <tool_call> tags, lazily constrained)",
    )
    parser.add_argument("--ctx-train", type=int, default=SyntheticSpec.n_ctx_train, help="trained context")
    parser.add_argument("out", help="path of the .gguf file to write")
    args = parser.parse_args(argv)
    if args.layers < 1:
        parser.error("--layers must be at least 1")
    try:
        spec = SyntheticSpec(
            kind=args.kind,
            quant=args.quant,
            n_layer=args.layers,
            n_expert=args.experts,
            n_expert_used=args.experts_used,
            seed=args.seed,
            reply=args.reply,
            chat_template=TEMPLATES[args.chat_template],
            n_ctx_train=args.ctx_train,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        path = write_synthetic(args.out, spec)
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.stat().st_size} bytes, {spec.kind}, {spec.quant}, seed {spec.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
