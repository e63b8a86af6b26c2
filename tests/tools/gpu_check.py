"""The GPU check: localspec against llama.cpp's own tools on one machine, in one go, with no downloads but the sources.

Anyone with an NVIDIA GPU (or, with --cpu, any machine) runs this once and gets ratios worth comparing: the same
llama.cpp, built here from the sources llama-cpp-python vendors (machine/llama_build), serves both llama.cpp's tools
and localspec (through LLAMA_CPP_LIB_PATH), on the same synthetic models and prompt. The models carry the real
Qwen2.5 tokenizer (from the sdist's ggml-vocab-qwen2.gguf) and random Q4_0 weights in the real shapes: a 7B target
whose blocks add little to the residual stream (close to a bigram model, so a shallow copy of it predicts it), the
layer-skip draft (the target's first blocks, its embeddings and head: it agrees most of the time), and an unrelated
0.5B-shaped draft (it almost never agrees). Nothing is fetched from the hub; nothing is asserted: it reports.

It prints: llama-bench's plain rate against localspec's plain decoding; llama-speculative-simple against localspec's
draft-model drafter at K=4 and K=8 (draft p-min 0); auto against the best fixed drafter; and every greedy departure
of a speculative run from plain decoding, with the target's top-2 logit gap there (a near-tie, or a bug).

Run: .venv/bin/python -m tests.tools.gpu_check [--sdist FILE] [--cpu] [--shape 7b|small] [--tokens 256] [--rounds 3] [--out DIR]
(--shape small --cpu runs in minutes on a 2-core CPU; the 7b shape wants a GPU: about 4.5 GB of weights.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

from localspec import paths
from localspec.bench import reference
from localspec.errors import LocalspecError
from localspec.machine import gpu_build, llama_build, llama_sources
from tests.tiny_models import byte_symbols

PROMPT = "Write a Python function that parses an ISO 8601 date and explain each step."
KS = (4, 8)
LAYER_SKIP_BLOCKS = 2
VOCAB_MEMBER = "vendor/llama.cpp/models/ggml-vocab-qwen2.gguf"
FIRST_SPECIAL = 151643  # <|endoftext|>: from here on, control and padding tokens, which the synthetic heads never pick
# How much the blocks add to the residual stream, all of them together (each block's output projections are scaled
# by BLOCK_GAIN / sqrt(blocks)). Small: the target stays close to a bigram model, so that its first blocks with its
# head (the layer-skip draft) agree with it about 70-85% of the time. Tuned on the small shape; see the docstring.
BLOCK_GAIN = 0.1
LOGIT_STD = 12.0  # spread of the target's logits: top-2 gaps far above the rounding differences of batched passes
# The fixed drafters benched with the layer-skip draft: those auto picks between. The others (tree, self,
# hierarchical) would double a GPU session's time, and self first cuts a copy of the 7B target.
LAYER_SKIP_DRAFTERS = "model,ngram,hybrid"
MODELS_FORMAT = 2  # raise when the weights written change: models in --out are then rewritten


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


SHAPES = {  # target, unrelated draft
    "7b": (Shape("qwen2.5-7b-shaped", 3584, 28, 28, 4, 18944, 152064), Shape("qwen2.5-0.5b-shaped", 896, 24, 14, 2, 4864, 151936, tied=True)),
    "small": (Shape("small-target", 512, 8, 8, 2, 2048, 152064), Shape("small-unrelated", 256, 4, 4, 2, 1024, 151936, tied=True)),
}


class CheckError(LocalspecError):
    """The check cannot run here: what is missing and how to get it."""


# --- the sources -------------------------------------------------------------------------------------------------


def find_sdist(given: Path | None) -> Path:
    """The llama-cpp-python sdist: as given, else kept from an earlier run, else fetched with pip (and kept)."""
    version = llama_sources.llama_cpp_version()
    how = f"run `{llama_sources.download_command(version)}` where there is a network, then pass the file with --sdist"
    if given is not None:
        if not given.is_file():
            raise CheckError(f"--sdist {given}: no such file; {how}")
        return given
    kept = paths.cache_dir() / "llama-build" / f"llama_cpp_python-{version}.tar.gz"
    if kept.is_file():
        return kept
    kept.parent.mkdir(parents=True, exist_ok=True)
    print(f"gpu-check: fetching the llama-cpp-python {version} sources with pip (kept in {kept.parent})", file=sys.stderr)
    return llama_sources.download_sdist(version, kept.parent, CheckError, how)


Fields = list[tuple[str, object, list[gguf.GGUFValueType]]]  # GGUF key-value pairs: key, value, value type (then item type)


def vocab_file(out: Path) -> Path:
    return out / "ggml-vocab-qwen2.gguf"


def tokenizer_fields(sdist: Path | None, out: Path) -> Fields:
    """The real Qwen2 tokenizer (tokenizer.* keys: tokens, types, merges, special ids, chat template), from the sdist
    (copied into `out` the first time)."""
    version = llama_sources.llama_cpp_version()
    vocab = vocab_file(out)
    if not vocab.is_file():
        assert sdist is not None, "the sources are needed for the vocabulary"
        try:
            with tarfile.open(sdist) as archive:
                member = archive.extractfile(f"llama_cpp_python-{version}/{VOCAB_MEMBER}")
                if member is None:
                    raise KeyError(VOCAB_MEMBER)
                vocab.write_bytes(member.read())
        except (KeyError, tarfile.TarError, OSError) as exc:
            raise CheckError(f"{sdist} has no {VOCAB_MEMBER} ({exc}): give llama-cpp-python {version}'s own source .tar.gz.") from exc
    reader = gguf.GGUFReader(vocab)
    return [(name, field.contents(), field.types) for name, field in reader.fields.items() if name.startswith("tokenizer.")]


# --- the models ----------------------------------------------------------------------------------------------------


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


def tensors(shape: Shape, seed: int, blocks: int) -> list[tuple[str, int, int, float | None]]:
    """(name, rows, cols, std) of every tensor, in file order; std None: a norm (ones) or a bias (zeros), in F32."""
    head_dim = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    gain = BLOCK_GAIN / np.sqrt(shape.n_layer)
    out: list[tuple[str, int, int, float | None]] = [("token_embd.weight", shape.n_vocab, shape.n_embd, 1.0)]
    for i in range(blocks):
        out += [
            (f"blk.{i}.attn_norm.weight", 1, shape.n_embd, None),
            (f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd, shape.n_embd ** -0.5),
            (f"blk.{i}.attn_q.bias", 1, shape.n_embd, None),
            (f"blk.{i}.attn_k.weight", kv, shape.n_embd, shape.n_embd ** -0.5),
            (f"blk.{i}.attn_k.bias", 1, kv, None),
            (f"blk.{i}.attn_v.weight", kv, shape.n_embd, shape.n_embd ** -0.5),
            (f"blk.{i}.attn_v.bias", 1, kv, None),
            (f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd, gain * shape.n_embd ** -0.5),
            (f"blk.{i}.ffn_norm.weight", 1, shape.n_embd, None),
            (f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd, shape.n_embd ** -0.5),
            (f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd, shape.n_embd ** -0.5),
            (f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff, gain * shape.n_ff ** -0.5),
        ]
    out.append(("output_norm.weight", 1, shape.n_embd, None))
    if not shape.tied:
        out.append(("output.weight", shape.n_vocab, shape.n_embd, LOGIT_STD * shape.n_embd ** -0.5))
    return out


def write_model(path: Path, shape: Shape, seed: int, fields: Fields, blocks: int | None = None) -> Path:
    """A qwen2 GGUF of `shape` with its first `blocks` blocks (all by default), streamed tensor by tensor."""
    blocks = shape.n_layer if blocks is None else blocks
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name(f"{shape.name}{'' if blocks == shape.n_layer else f' first {blocks} blocks'} (random, gpu_check)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    for name, value, types in fields:
        if isinstance(value, list) and name == "tokenizer.ggml.tokens" and len(value) < shape.n_vocab:  # the 7B pads it, as the real one does
            value = value + [f"[PAD{i}]" for i in range(len(value), shape.n_vocab)]
        if isinstance(value, list) and name == "tokenizer.ggml.token_type" and len(value) < shape.n_vocab:
            value = value + [int(gguf.TokenType.UNUSED)] * (shape.n_vocab - len(value))
        writer.add_key_value(name, value, types[0], types[-1] if len(types) > 1 else None)
    silent = silent_tokens(fields, shape.n_vocab)
    plan = tensors(shape, seed, blocks)
    for name, rows, cols, std in plan:
        if std is None:
            writer.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
        else:
            writer.add_tensor_info(name, (rows, cols // 32 * 18), np.dtype(np.uint8), rows * cols // 32 * 18, gguf.GGMLQuantizationType.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, rows, cols, std in plan:
        if std is None:
            writer.write_tensor_data((np.zeros if name.endswith(".bias") else np.ones)(cols, dtype=np.float32))
        else:
            head = name == "output.weight" or (shape.tied and name == "token_embd.weight")
            writer.write_tensor_data(q4_0(name, seed, rows, cols, std, silent if head else None))
    writer.close()
    return path


def write_models(out: Path, shape_name: str, sdist: Path | None) -> dict[str, Path]:
    """The target, its layer-skip draft and the unrelated draft in `out` (kept, and reused while their recipe holds)."""
    target_shape, unrelated_shape = SHAPES[shape_name]
    files = {"target": out / f"{shape_name}-target.gguf", "layer-skip": out / f"{shape_name}-layer-skip.gguf",
             "unrelated": out / f"{shape_name}-unrelated.gguf"}
    recipe = {"format": MODELS_FORMAT, "gain": BLOCK_GAIN, "logit_std": LOGIT_STD, "skip": LAYER_SKIP_BLOCKS,
              "shapes": [asdict(target_shape), asdict(unrelated_shape)], "version": llama_sources.llama_cpp_version()}
    stamp = out / f"{shape_name}-models.json"
    if all(f.is_file() for f in files.values()) and stamp.is_file() and json.loads(stamp.read_text()) == recipe:
        return files
    started = time.perf_counter()
    fields = tokenizer_fields(sdist, out)
    write_model(files["target"], target_shape, 1, fields)
    write_model(files["layer-skip"], target_shape, 1, fields, blocks=LAYER_SKIP_BLOCKS)
    write_model(files["unrelated"], unrelated_shape, 2, fields)
    stamp.write_text(json.dumps(recipe))
    size = sum(f.stat().st_size for f in files.values()) / 2**30
    print(f"gpu-check: wrote the three models ({size:.1f} GiB) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return files


# --- the runs ------------------------------------------------------------------------------------------------------


def bench(env: dict[str, str], bin_dir: Path, target: Path, draft: Path, prompts: Path, tokens: int, rounds: int,
          drafters: str | None, threads: int | None, out: Path, label: str) -> dict:
    """`localspec bench` with llama.cpp's tools beside it, in a child on the built library: its JSON (its report: a file)."""
    result_file = out / f"bench-{label}.json"
    command = [sys.executable, "-m", "localspec", "bench", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts),
               "--max-tokens", str(tokens), "--rounds", str(rounds), "--draft-max", ",".join(map(str, KS)), "--draft-p-min", "0", "--reference-p-min", "0",
               "--llama-cpp-bin", str(bin_dir), "--json", str(result_file)]
    if drafters:
        command += ["--drafters", drafters]
    if threads:
        command += ["--threads", str(threads)]
    started = time.perf_counter()
    with open(out / f"bench-{label}.txt", "w") as report:  # its progress goes on to stderr, as it comes
        done = subprocess.run(command, env=env, stdout=report)
    if done.returncode != 0:
        raise CheckError(f"localspec bench ({label}) failed (exit status {done.returncode}); its messages are above.")
    print(f"gpu-check: bench with the {label} draft took {time.perf_counter() - started:.0f} s (report: {out / f'bench-{label}.txt'})",
          file=sys.stderr)
    return json.loads(result_file.read_text())


def plain_margins(env: dict[str, str], target: Path, prompts: Path, tokens: int) -> dict:
    """The target's plain greedy run with its top-2 logit gap per token, in a child (margins cost time: kept out of bench)."""
    command = [sys.executable, "-m", "tests.tools.gpu_check", "--margins-of", str(target), "--prompts", str(prompts), "--tokens", str(tokens)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckError(f"the plain run with margins failed:\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def margins_child(target: Path, prompts: Path, tokens: int) -> None:
    """Child side of plain_margins: the prompt as bench renders it, greedy, margins recorded."""
    from localspec.bench.runner import load_prompts
    from localspec.engine.chat import chat_prompt_tokens
    from localspec.engine.engine import Engine, EngineConfig
    from localspec.engine.events import TokenEvent
    from localspec.engine.generation_config import GenerationConfig

    with Engine(EngineConfig(target)) as engine:
        prompt = chat_prompt_tokens(engine.target, load_prompts(prompts)[0].messages)
        events = [e for e in engine.plain.generate(prompt, GenerationConfig(max_tokens=tokens, record_margins=True))
                  if isinstance(e, TokenEvent) and e.token >= 0]
    print(json.dumps({"tokens": [e.token for e in events], "margins": [e.margin for e in events]}))


# --- the report ----------------------------------------------------------------------------------------------------


def _rate(runs: list) -> float:
    """tokens/s over llama-speculative-simple runs, as bench's report sums them."""
    tokens = sum(r["run"]["n_predict"] for r in runs)
    seconds = sum(r["run"]["n_predict"] / r["run"]["tokens_per_second"] for r in runs if r["run"]["tokens_per_second"])
    return tokens / seconds if seconds else 0.0


def _accepted(runs: list) -> float:
    return sum(r["run"]["n_accept"] for r in runs) / max(1, sum(r["run"]["n_drafted"] for r in runs))


@dataclass
class Pooled:
    """One mode over all rounds: rates and acceptance pooled as bench's overall row pools them."""

    drafter: str
    rate: float  # tokens/s: all rounds' tokens over all rounds' time
    accepted: float  # accepted ÷ drafted over all rounds
    drafted: int
    runs: list[dict]  # each round's measurement, in order


def pooled(measurements: list[dict]) -> dict[str, Pooled]:
    by_mode: dict[str, list[dict]] = {}
    for m in measurements:
        by_mode.setdefault(m["mode"], []).append(m)
    result = {}
    for mode, runs in by_mode.items():
        stats = [r["stats"] for r in runs]
        seconds = sum(s["predicted_ms"] for s in stats) / 1000
        drafted = sum(s["draft_n"] for s in stats)
        result[mode] = Pooled(runs[0]["drafter"], sum(s["predicted_n"] for s in stats) / seconds if seconds else 0.0,
                              sum(s["draft_n_accepted"] for s in stats) / max(1, drafted), drafted, runs)
    return result


def report(results: dict[str, dict], tg128: float, plain: dict, header: str) -> None:
    print(f"\n{header}")
    first = results["layer-skip"]
    by_mode = {label: pooled(result["measurements"]) for label, result in results.items()}
    ours_plain = by_mode["layer-skip"]["plain"].rate
    n_gen, depth = first["llama_bench_matched"]["n_gen"], first["llama_bench_matched"]["depth"]
    matched = float(np.mean(first["llama_bench_matched"]["tok_s"])) if first["llama_bench_matched"]["tok_s"] else 0.0
    print(f"\n{'tok/s (all rounds pooled)':62} {'llama.cpp':>10} {'localspec':>10} {'ratio':>7}")
    print(f"{'plain: llama-bench -p 0 -n 128 / localspec plain':62} {tg128:10.1f} {ours_plain:10.1f} {ours_plain / tg128:7.2f}")
    if matched:
        print(f"{f'plain: llama-bench tg{n_gen} @ d{depth} (our workload) / localspec plain':62} {matched:10.1f} {ours_plain:10.1f} "
              f"{ours_plain / matched:7.2f}")
    for label, result in results.items():
        for k in KS:
            runs = [r for r in result["reference"] if r["k"] == k]
            ours = by_mode[label].get(f"model K={k}")
            if not runs or ours is None:
                continue
            theirs = _rate(runs)
            name = f"{label} draft K={k}: speculative-simple / localspec model"
            print(f"{name:62} {theirs:10.1f} {ours.rate:10.1f} {ours.rate / theirs if theirs else 0.0:7.2f}   "
                  f"accepted {100 * _accepted(runs):.0f}% / {100 * ours.accepted:.0f}%")
        if result.get("reference_error"):
            print(f"  ({label}) llama.cpp's tools failed: {result['reference_error']}")
    print(f"\nlocalspec's modes in the same run: ×plain = tok/s ÷ localspec's plain tok/s\n  {'draft':<11} {'mode':<18} {'tok/s':>8} "
          f"{'×plain':>7} {'accepted':>9}")
    for label, modes in by_mode.items():
        base = modes["plain"].rate
        for name, mode in modes.items():
            accepted = f"{100 * mode.accepted:8.0f}%" if mode.drafted else f"{'':9}"
            print(f"  {label:<11} {name:<18} {mode.rate:8.1f} {mode.rate / base:7.2f} {accepted}")
        fixed = [(mode.rate, name) for name, mode in modes.items() if mode.drafter not in ("none", "auto")]
        auto = next((mode for mode in modes.values() if mode.drafter == "auto"), None)
        if auto and fixed:
            best_rate, best = max(fixed)
            print(f"  {label:<11} auto ÷ the best fixed drafter ({best}): {auto.rate / best_rate:.2f}")
    print("\nGreedy departures from plain decoding (the target's top-2 logit gap there, from its plain run with margins)")
    departures = runs_seen = 0
    for label, modes in by_mode.items():
        for name, mode in modes.items():
            if name == "plain":
                continue
            for round_index, m in enumerate(mode.runs, 1):
                runs_seen += 1
                at = m["departs_at"]
                if at is None:
                    continue
                departures += 1
                gap = plain["margins"][at] if at < len(plain["margins"]) and plain["tokens"][:at] == m["tokens"][:at] else None
                print(f"  {label} draft, {name}, round {round_index}: token {at} of {len(m['tokens'])}, " + (
                    f"top-2 gap {gap:.4f}" if gap is not None else "the plain run with margins went elsewhere before it (its own departure: rounding)"))
    if not departures:
        print(f"  none: all {runs_seen} speculative runs emitted exactly plain decoding's tokens")
    same = all(plain["tokens"] == m["tokens"] for m in by_mode["layer-skip"]["plain"].runs)
    print(f"  (plain with margins {'matches' if same else 'does NOT match'} bench's plain runs; smallest top-2 gap in it: {min(plain['margins']):.4f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python's source .tar.gz (default: the one kept from an earlier run, else pip fetches it)")
    parser.add_argument("--cpu", action="store_true", help="build and run for the CPU even where nvcc and a GPU are found")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="7b", help="7b: the real shapes (default); small: a CPU-sized smoke run")
    parser.add_argument("--tokens", type=int, default=256, help="tokens generated per run (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every mode (default 3: the first round is auto's learning)")
    parser.add_argument("--threads", type=int, help="CPU threads for localspec and llama.cpp alike (default: localspec's, the physical cores)")
    parser.add_argument("--out", type=Path, default=paths.cache_dir() / "gpu-check", help="models, reports and JSON (default: localspec's cache)")
    parser.add_argument("--margins-of", type=Path, help=argparse.SUPPRESS)  # the child of plain_margins
    parser.add_argument("--prompts", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.margins_of:
        margins_child(args.margins_of, args.prompts, args.tokens)
        return 0
    try:
        return run(args)
    except LocalspecError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = not args.cpu
    gpus = gpu_build.nvidia_gpus()
    if cuda and shutil.which("nvcc") is None:
        print("gpu-check: nvcc (the CUDA toolkit's compiler) is not on the PATH, so llama.cpp is built for the CPU; "
              "install the CUDA toolkit for a GPU build.", file=sys.stderr)
        cuda = False
    elif cuda and not gpus:
        print("gpu-check: nvcc is here but no NVIDIA GPU is (nvidia-smi lists none), so llama.cpp is built for the CPU.", file=sys.stderr)
        cuda = False
    # The sources are needed for the build and the vocabulary, each the first time only.
    needed = args.sdist is not None or not llama_build.is_built(cuda) or not vocab_file(args.out).is_file()
    sdist = find_sdist(args.sdist) if needed else None
    bin_dir = llama_build.ensure_built(lambda stage: print(f"gpu-check: {stage}", file=sys.stderr), cuda, sdist)
    built = time.perf_counter()
    print(f"gpu-check: llama.cpp ready after {built - started:.0f} s", file=sys.stderr)
    files = write_models(args.out, args.shape, sdist)
    prompts = args.out / "prompt.jsonl"
    prompts.write_text(json.dumps({"id": "check", "category": "check", "prompt": PROMPT}) + "\n")
    env = os.environ | {"LLAMA_CPP_LIB_PATH": str(bin_dir), "PYTHONUNBUFFERED": "1"}
    results = {label: bench(env, bin_dir, files["target"], files[label], prompts, args.tokens, args.rounds, drafters, args.threads, args.out, label)
               for label, drafters in (("layer-skip", LAYER_SKIP_DRAFTERS), ("unrelated", "model"))}
    threads = int(results["layer-skip"]["machine"]["threads"])
    tg128 = reference.llama_bench_tg(bin_dir, files["target"], threads, n_gen=128)
    plain = plain_margins(env, files["target"], prompts, args.tokens)
    target_shape, unrelated_shape = SHAPES[args.shape]
    device = f"{'CUDA' if cuda else 'CPU'} build in {bin_dir}" + (f", {gpus[0].name}" if cuda and gpus else "")
    header = (f"gpu-check, shape {args.shape}: target {target_shape.name} (Q4_0, {files['target'].stat().st_size / 2**30:.2f} GiB); "
              f"layer-skip draft: its first {LAYER_SKIP_BLOCKS} of {target_shape.n_layer} blocks; unrelated draft {unrelated_shape.name}.\n"
              f"{device}; threads: {threads}; {args.tokens} tokens per run, {args.rounds} rounds, greedy, one prompt; "
              f"K = {', '.join(map(str, KS))} at draft p-min 0.")
    report(results, tg128, plain, header)
    total = time.perf_counter() - started
    print(f"\nwall time {total:.0f} s (build {built - started:.0f} s); reports and JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
