"""The GPU check's synthetic models: random Q4_0 weights in real shapes, with the real Qwen2 tokenizer.

Two kinds, each close to a bigram model (its blocks add little to the residual stream), so that something shallow
predicts it often but not always:
- a Qwen2 ("qwen2") target, whose first blocks with its head make the layer-skip draft;
- a Qwen3.5 ("qwen35", hybrid: gated delta net blocks and one full-attention block in four) target that carries one MTP
  block, as Qwen3.5/3.6 MTP GGUFs do. The head's eh_proj passes the token's embedding through (+I over the token half
  of [token, hidden]) and its own block adds as little as one of the target's, so it predicts the token after its input
  token about as the target will: it agrees as often as the target's blocks leave its bigram guess standing.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import gguf
import numpy as np

from tests.tiny_models import byte_symbols

FIRST_SPECIAL = 151643  # <|endoftext|>: from here on, control and padding tokens, which the synthetic heads never pick
# How much the blocks add to the residual stream, all of them together (each block's output projections are scaled
# by BLOCK_GAIN / sqrt(blocks)). Small: the target stays close to a bigram model, so that its first blocks with its
# head (the layer-skip draft) agree with it about 70-85% of the time. Tuned on the small shape.
BLOCK_GAIN = 0.1
LOGIT_STD = 12.0  # spread of the target's logits: top-2 gaps far above the rounding differences of batched passes
MODELS_FORMAT = 3  # raise when the weights written change: models in the output folder are then rewritten

Fields = list[tuple[str, object, list[gguf.GGUFValueType]]]  # GGUF key-value pairs: key, value, value type (then item type)


@dataclass(frozen=True)
class Shape:
    """A Qwen2-architecture model's dimensions (llama.cpp's "qwen2"); tied: no output head, the embeddings serve."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied: bool = False


@dataclass(frozen=True)
class HybridShape:
    """A Qwen3.5 dense model's dimensions: its gated delta net (ssm_*) sizes beside the attention's; one block in
    `full_attention_interval` attends."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    ssm_state: int  # a linear-attention head's key and value width
    ssm_groups: int  # key heads
    ssm_heads: int  # value heads
    full_attention_interval: int = 4


SHAPES = {  # target, unrelated draft, MTP target
    "7b": (Shape("qwen2.5-7b-shaped", 3584, 28, 28, 4, 18944, 152064), Shape("qwen2.5-0.5b-shaped", 896, 24, 14, 2, 4864, 151936, tied=True),
           HybridShape("qwen3.5-7b-shaped-mtp", 3584, 28, 28, 4, 128, 18944, 152064, 128, 16, 32)),
    "small": (Shape("small-target", 512, 8, 8, 2, 2048, 152064), Shape("small-unrelated", 256, 4, 4, 2, 1024, 151936, tied=True),
              HybridShape("small-mtp-target", 512, 8, 8, 2, 64, 2048, 152064, 64, 4, 8)),
}


class Fill(Enum):
    RANDOM = "random"  # Q4_0 of the row's std
    CONSTANT = "constant"  # F32, every value the row's value (norms 1, biases 0)
    PASS_TOKEN = "pass token"  # F32 [I, 0]: the MTP head's eh_proj passes the token's half through


@dataclass(frozen=True)
class Tensor:
    name: str
    rows: int
    cols: int
    fill: Fill = Fill.RANDOM
    value: float = 1.0  # RANDOM: the std; CONSTANT: the value


def silent_tokens(fields: Fields, n_vocab: int) -> np.ndarray:
    """The tokens a synthetic head never picks: control and padding tokens (an end of text would cut runs short), and
    tokens that are not whole UTF-8 on their own (a random walk that ends inside a character leaves llama.cpp's tools
    printing invalid UTF-8). The rest, about 150k, are the real vocabulary's text tokens."""
    tokens = next(value for name, value, _ in fields if name == "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    byte_of = {symbol: byte for byte, symbol in enumerate(byte_symbols())}
    silent = np.ones(n_vocab, dtype=bool)
    for i, token in enumerate(tokens[:FIRST_SPECIAL]):
        try:
            bytes(byte_of[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        silent[i] = False
    return silent


def q4_0(name: str, seed: int, rows: int, cols: int, std: float, silent: np.ndarray | None = None) -> np.ndarray:
    """Random Q4_0 weights of this std, as GGUF's raw bytes (rows x blocks x [fp16 scale, 16 bytes of nibbles]).

    The nibbles are zero-mean: Q4_0 reads nibble n as n - 8, so uniform nibbles would have mean -0.5 and every
    matrix a shared direction that makes the model repeat one token; nibble 0 (-8) is read as 8 (0) instead.
    Seeded per tensor name, so a draft that shares a tensor with its target gets the very same bytes.
    """
    blocks = rows * cols // 32
    words = np.random.SFC64([seed, zlib.crc32(name.encode())]).random_raw(blocks * 2)  # 16 bytes of nibbles a block
    empty = ~(words | (words >> np.uint64(1)) | (words >> np.uint64(2)) | (words >> np.uint64(3))) & np.uint64(0x1111111111111111)
    np.bitwise_or(words, empty << np.uint64(3), out=words)
    out = np.empty((blocks, 18), dtype=np.uint8)
    out[:, 2:] = words.view(np.uint8).reshape(blocks, 16)
    nibble_std = np.sqrt(2 * sum(k * k for k in range(1, 8)) / 16)  # of -7..7 with 0 twice
    out[:, :2] = np.frombuffer(np.float16(std / nibble_std).tobytes(), dtype=np.uint8)
    out = out.reshape(rows, cols // 32 * 18)
    if silent is not None:  # scale 0: these tokens' logits are exactly 0, never the top one
        out.reshape(rows, cols // 32, 18)[silent, :, :2] = 0
    return out


def _norm(name: str, width: int) -> Tensor:
    return Tensor(name, 1, width, Fill.CONSTANT, 1.0)


def _ends(n_embd: int, n_vocab: int, tied: bool) -> tuple[list[Tensor], list[Tensor]]:
    """The embeddings before the blocks; the output norm and head after them."""
    head = [] if tied else [Tensor("output.weight", n_vocab, n_embd, value=LOGIT_STD * n_embd ** -0.5)]
    return [Tensor("token_embd.weight", n_vocab, n_embd)], [_norm("output_norm.weight", n_embd), *head]


def _ffn(i: int, n_embd: int, n_ff: int, gain: float) -> list[Tensor]:
    return [Tensor(f"blk.{i}.ffn_gate.weight", n_ff, n_embd, value=n_embd ** -0.5), Tensor(f"blk.{i}.ffn_up.weight", n_ff, n_embd, value=n_embd ** -0.5),
            Tensor(f"blk.{i}.ffn_down.weight", n_embd, n_ff, value=gain * n_ff ** -0.5)]


def qwen2_tensors(shape: Shape, blocks: int) -> list[Tensor]:
    """Every tensor of a qwen2 model of `shape` with its first `blocks` blocks, in file order."""
    head_dim = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    gain = BLOCK_GAIN / np.sqrt(shape.n_layer)
    start, end = _ends(shape.n_embd, shape.n_vocab, shape.tied)
    out = start
    for i in range(blocks):
        out += [
            _norm(f"blk.{i}.attn_norm.weight", shape.n_embd),
            Tensor(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd, value=shape.n_embd ** -0.5),
            Tensor(f"blk.{i}.attn_q.bias", 1, shape.n_embd, Fill.CONSTANT, 0.0),
            Tensor(f"blk.{i}.attn_k.weight", kv, shape.n_embd, value=shape.n_embd ** -0.5),
            Tensor(f"blk.{i}.attn_k.bias", 1, kv, Fill.CONSTANT, 0.0),
            Tensor(f"blk.{i}.attn_v.weight", kv, shape.n_embd, value=shape.n_embd ** -0.5),
            Tensor(f"blk.{i}.attn_v.bias", 1, kv, Fill.CONSTANT, 0.0),
            Tensor(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd, value=gain * shape.n_embd ** -0.5),
            _norm(f"blk.{i}.ffn_norm.weight", shape.n_embd),
            *_ffn(i, shape.n_embd, shape.n_ff, gain),
        ]
    return out + end


def _attention_block(shape: HybridShape, i: int, gain: float) -> list[Tensor]:
    """A Qwen3.5 full-attention block: its query projection carries the output gate too (twice the heads' width)."""
    width, kv = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    scale = shape.n_embd ** -0.5
    return [
        _norm(f"blk.{i}.attn_norm.weight", shape.n_embd), _norm(f"blk.{i}.post_attention_norm.weight", shape.n_embd),
        Tensor(f"blk.{i}.attn_q.weight", 2 * width, shape.n_embd, value=scale), Tensor(f"blk.{i}.attn_k.weight", kv, shape.n_embd, value=scale),
        Tensor(f"blk.{i}.attn_v.weight", kv, shape.n_embd, value=scale),
        Tensor(f"blk.{i}.attn_output.weight", shape.n_embd, width, value=gain * width ** -0.5),
        _norm(f"blk.{i}.attn_q_norm.weight", shape.head_dim), _norm(f"blk.{i}.attn_k_norm.weight", shape.head_dim),
        *_ffn(i, shape.n_embd, shape.n_ff, gain),
    ]


def _linear_attention_block(shape: HybridShape, i: int, gain: float) -> list[Tensor]:
    """A gated delta net block: decay -1 (ssm_a), time-step bias 0, a short convolution that averages its 4 taps."""
    keys, values = shape.ssm_state * shape.ssm_groups, shape.ssm_state * shape.ssm_heads
    scale = shape.n_embd ** -0.5
    return [
        _norm(f"blk.{i}.attn_norm.weight", shape.n_embd), _norm(f"blk.{i}.post_attention_norm.weight", shape.n_embd),
        Tensor(f"blk.{i}.attn_qkv.weight", 2 * keys + values, shape.n_embd, value=scale),
        Tensor(f"blk.{i}.attn_gate.weight", values, shape.n_embd, value=scale),
        Tensor(f"blk.{i}.ssm_conv1d.weight", 2 * keys + values, 4, Fill.CONSTANT, 0.25),
        Tensor(f"blk.{i}.ssm_dt.bias", 1, shape.ssm_heads, Fill.CONSTANT, 0.0), Tensor(f"blk.{i}.ssm_a", 1, shape.ssm_heads, Fill.CONSTANT, -1.0),
        Tensor(f"blk.{i}.ssm_beta.weight", shape.ssm_heads, shape.n_embd, value=scale),
        Tensor(f"blk.{i}.ssm_alpha.weight", shape.ssm_heads, shape.n_embd, value=scale),
        _norm(f"blk.{i}.ssm_norm.weight", shape.ssm_state),
        Tensor(f"blk.{i}.ssm_out.weight", shape.n_embd, values, value=gain * values ** -0.5),
        *_ffn(i, shape.n_embd, shape.n_ff, gain),
    ]


def recurrent_layers(shape: HybridShape) -> list[bool]:
    """Per block, the MTP block last: whether it is a gated delta net block (the MTP block attends)."""
    return [(i + 1) % shape.full_attention_interval != 0 for i in range(shape.n_layer)] + [False]


def qwen35_mtp_tensors(shape: HybridShape) -> list[Tensor]:
    """Every tensor of a qwen35 model of `shape` with one MTP block after its blocks, in file order."""
    gain = BLOCK_GAIN / np.sqrt(shape.n_layer)
    start, end = _ends(shape.n_embd, shape.n_vocab, False)
    out = start
    for i, recurrent in enumerate(recurrent_layers(shape)[:-1]):
        out += _linear_attention_block(shape, i, gain) if recurrent else _attention_block(shape, i, gain)
    mtp = shape.n_layer
    out += _attention_block(shape, mtp, gain)
    out += [Tensor(f"blk.{mtp}.nextn.eh_proj.weight", shape.n_embd, 2 * shape.n_embd, Fill.PASS_TOKEN),
            _norm(f"blk.{mtp}.nextn.enorm.weight", shape.n_embd), _norm(f"blk.{mtp}.nextn.hnorm.weight", shape.n_embd)]
    return out + end


def qwen35_fields(shape: HybridShape) -> dict[str, object]:
    """The qwen35 hyperparameters (llama.cpp's names, without the architecture's prefix); the MTP block counts as a block."""
    rope = shape.head_dim // 2  # Qwen3.5 rotates a part of each head, in sections (interleaved multimodal rope)
    return {
        "context_length": 32768, "embedding_length": shape.n_embd, "block_count": shape.n_layer + 1, "feed_forward_length": shape.n_ff,
        "attention.head_count": shape.n_head, "attention.head_count_kv": shape.n_head_kv, "attention.key_length": shape.head_dim,
        "attention.value_length": shape.head_dim, "attention.layer_norm_rms_epsilon": 1e-6, "rope.dimension_count": rope,
        "rope.dimension_sections": [rope // 6 + 1, rope // 6 + 1, rope // 2 - 2 * (rope // 6 + 1), 0], "rope.freq_base": 1e7,
        "ssm.conv_kernel": 4, "ssm.inner_size": shape.ssm_state * shape.ssm_heads, "ssm.state_size": shape.ssm_state,
        "ssm.time_step_rank": shape.ssm_heads, "ssm.group_count": shape.ssm_groups,
        "attention.recurrent_layers": recurrent_layers(shape), "nextn_predict_layers": 1,
    }


def _constant(tensor: Tensor) -> np.ndarray:
    if tensor.fill is Fill.PASS_TOKEN:
        return np.hstack([np.eye(tensor.rows, dtype=np.float32), np.zeros((tensor.rows, tensor.cols - tensor.rows), dtype=np.float32)])
    return np.full((tensor.rows, tensor.cols) if tensor.rows > 1 else tensor.cols, tensor.value, dtype=np.float32)


def _info(writer: gguf.GGUFWriter, tensor: Tensor) -> None:
    if tensor.fill is Fill.RANDOM:
        nbytes = tensor.rows * tensor.cols // 32 * 18
        writer.add_tensor_info(tensor.name, (tensor.rows, tensor.cols // 32 * 18), np.dtype(np.uint8), nbytes, gguf.GGMLQuantizationType.Q4_0)
    else:
        shape = (tensor.rows, tensor.cols) if tensor.rows > 1 else (tensor.cols,)
        writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), tensor.rows * tensor.cols * 4)


def write(path: Path, arch: str, name: str, hyper: dict[str, object], plan: list[Tensor], fields: Fields, n_vocab: int, seed: int,
          head: str = "output.weight") -> Path:
    """A GGUF of `arch`: its hyperparameters, the tokenizer (padded to `n_vocab` as the real 7B pads it), the tensors of
    `plan` streamed one by one; `head`, the tensor whose silent tokens' rows are zeroed."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(f"{name} (random, gpu_check)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    for key, value in hyper.items():
        writer.add_key_value(f"{arch}.{key}", value, *_value_type(value))
    for key, value, types in fields:
        if isinstance(value, list) and key == "tokenizer.ggml.tokens" and len(value) < n_vocab:
            value = value + [f"[PAD{i}]" for i in range(len(value), n_vocab)]
        if isinstance(value, list) and key == "tokenizer.ggml.token_type" and len(value) < n_vocab:
            value = value + [int(gguf.TokenType.UNUSED)] * (n_vocab - len(value))
        writer.add_key_value(key, value, types[0], types[-1] if len(types) > 1 else None)
    silent = silent_tokens(fields, n_vocab)
    for tensor in plan:
        _info(writer, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in plan:
        if tensor.fill is Fill.RANDOM:
            writer.write_tensor_data(q4_0(tensor.name, seed, tensor.rows, tensor.cols, tensor.value, silent if tensor.name == head else None))
        else:
            writer.write_tensor_data(_constant(tensor))
    writer.close()
    return path


def _value_type(value: object) -> tuple[gguf.GGUFValueType, gguf.GGUFValueType | None]:
    if isinstance(value, list):
        return gguf.GGUFValueType.ARRAY, (gguf.GGUFValueType.BOOL if isinstance(value[0], bool) else gguf.GGUFValueType.INT32)
    if isinstance(value, float):
        return gguf.GGUFValueType.FLOAT32, None
    return gguf.GGUFValueType.UINT32, None


def write_qwen2(path: Path, shape: Shape, seed: int, fields: Fields, blocks: int | None = None) -> Path:
    """A qwen2 GGUF of `shape` with its first `blocks` blocks (all by default)."""
    blocks = shape.n_layer if blocks is None else blocks
    hyper: dict[str, object] = {"context_length": 32768, "embedding_length": shape.n_embd, "block_count": blocks, "feed_forward_length": shape.n_ff,
                                "attention.head_count": shape.n_head, "attention.head_count_kv": shape.n_head_kv, "rope.freq_base": 1e6,
                                "attention.layer_norm_rms_epsilon": 1e-6}
    name = f"{shape.name}{'' if blocks == shape.n_layer else f' first {blocks} blocks'}"
    return write(path, "qwen2", name, hyper, qwen2_tensors(shape, blocks), fields, shape.n_vocab, seed,
                 head="token_embd.weight" if shape.tied else "output.weight")


def write_qwen35_mtp(path: Path, shape: HybridShape, seed: int, fields: Fields) -> Path:
    """A qwen35 GGUF of `shape` carrying one MTP block made to agree often (see the module's docstring)."""
    return write(path, "qwen35", shape.name, qwen35_fields(shape), qwen35_mtp_tensors(shape), fields, shape.n_vocab, seed)
