"""Tiny llama-architecture GGUF models, written with the `gguf` package, that real llama.cpp loads.

They decode in microseconds, so the engine's logic can be tested exhaustively
on real llama.cpp without the real pair's minutes. The tokenizer is byte-level
BPE (GPT-2 style) with a few merges and ChatML control tokens; the weights are
random but seeded, with a wide logit spread so that near-ties are rare.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.gguf_files import finish

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_LAYER = 2
CONTEXT = 4096

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
FIM_SPECIALS = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>"}  # the "fim" vocabulary's, at its end
MERGES = [("h", "e"), ("l", "l"), ("Ġ", "t"), ("i", "n"), ("o", "n"), ("e", "r"), ("Ġ", "a"), ("r", "e")]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_symbols() -> list[str]:
    """GPT-2's reversible byte-to-unicode table: the spelling of each byte token."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(printable, codes))
    return [chr(table[b]) for b in range(256)]


def merges(variant: str = "base") -> list[tuple[str, str]]:
    """The BPE merges: the "reordered" vocabulary has one the others lack ("th")."""
    return [*MERGES, ("t", "h")] if variant == "reordered" else MERGES


def vocabulary(variant: str = "base") -> list[str]:
    if variant == "reordered":  # another tokenizer of the same text: every id moved, and a token the base lacks
        return SPECIALS + byte_symbols()[::-1] + [a + b for a, b in merges(variant)]
    tokens = SPECIALS + byte_symbols() + [a + b for a, b in MERGES]
    if variant == "other":  # a different tokenizer: two ordinary tokens trade places
        tokens[100], tokens[101] = tokens[101], tokens[100]
    if variant == "fim":  # a code model's: fill-in-the-middle tokens too
        tokens += list(FIM_SPECIALS.values())
    return tokens


@dataclass(frozen=True)
class TinySpec:
    seed: int
    vocab: str = "base"
    # Draft-like models: the weights of `base_seed` plus this much noise (0 = an exact copy).
    base_seed: int | None = None
    noise: float = 0.0
    chat_template: bool = True
    eos: int = 2
    bos: int | None = 0  # None: the file has no BOS id, as Qwen3.5-0.8B's has none (llama.cpp then takes its own default)


def _weights(seed: int, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    head_dim = N_EMBD // N_HEAD
    tensors = {"token_embd.weight": normal(n_vocab, N_EMBD, std=1.0)}
    for i in range(N_LAYER):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.attn_q.weight": normal(N_EMBD, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.attn_k.weight": normal(N_HEAD_KV * head_dim, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.attn_v.weight": normal(N_HEAD_KV * head_dim, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.attn_output.weight": normal(N_EMBD, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": normal(N_FF, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.ffn_up.weight": normal(N_FF, N_EMBD, std=N_EMBD**-0.5),
            f"blk.{i}.ffn_down.weight": normal(N_EMBD, N_FF, std=N_FF**-0.5),
        }
    tensors["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    # Logit std ~4: the best two logits are rarely within llama.cpp's batch-size noise of each other.
    tensors["output.weight"] = normal(n_vocab, N_EMBD, std=0.5)
    return tensors


def _reordered_rows(tensors: dict[str, np.ndarray], tokens: list[str], seed: int) -> None:
    """Give each token of another vocabulary the base vocabulary's rows for the same text (a fresh row where the base has
    none): the same model, spelled in other ids."""
    base = {text: i for i, text in enumerate(vocabulary())}
    rng = np.random.default_rng(seed)
    for name in ("token_embd.weight", "output.weight"):
        rows = tensors[name]
        fresh = (rng.standard_normal(rows.shape[1]) * rows.std()).astype(np.float32)
        tensors[name] = np.stack([rows[base[text]] if text in base else fresh for text in tokens])


def write_tiny_model(path: Path, spec: TinySpec) -> Path:
    tokens = vocabulary(spec.vocab)
    if spec.base_seed is None:
        tensors = _weights(spec.seed, len(tokens))
    else:
        tensors = _weights(spec.base_seed, len(vocabulary()) if spec.vocab == "reordered" else len(tokens))
        noise = np.random.default_rng(spec.seed)
        for value in tensors.values():
            if value.ndim == 2:
                value += (noise.standard_normal(value.shape) * spec.noise * value.std()).astype(np.float32)
        if spec.vocab == "reordered":
            _reordered_rows(tensors, tokens, spec.seed)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tiny-{spec.seed}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    if spec.vocab == "fim":
        for role, text in FIM_SPECIALS.items():
            types[tokens.index(text)] = gguf.TokenType.CONTROL
            writer.add_uint32(f"tokenizer.ggml.fim_{role}_token_id", tokens.index(text))
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in merges(spec.vocab)])
    if spec.bos is not None:
        writer.add_bos_token_id(spec.bos)
    writer.add_eos_token_id(spec.eos)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if spec.chat_template:
        writer.add_chat_template(CHAT_TEMPLATE)
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    return finish(writer, path)
