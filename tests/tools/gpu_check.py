"""The GPU check: localspec against llama.cpp's own tools on one machine, in one go, with no downloads but the sources.

Anyone with an NVIDIA GPU (or, with --cpu, any machine) runs this once and gets ratios worth comparing: the same
llama.cpp, built here from the sources llama-cpp-python vendors (machine/llama_build), serves both llama.cpp's tools
and localspec (through LLAMA_CPP_LIB_PATH), on the same synthetic models and prompt. The models (tests/tools/gpu_models)
carry the real Qwen2.5 tokenizer (from the sdist's ggml-vocab-qwen2.gguf) and random Q4_0 weights in the real shapes.
Two checks:
- draft: a 7B Qwen2 target whose blocks add little to the residual stream (close to a bigram model, so a shallow copy of
  it predicts it), the layer-skip draft (the target's first blocks, its embeddings and head: it agrees most of the
  time), and an unrelated 0.5B-shaped draft (it almost never agrees);
- mtp: a 7B-shaped Qwen3.5 target (gated delta net blocks, one in four attending) with one MTP block that agrees with
  it about three times in four, drafting with no draft model.
Nothing is fetched from the hub; nothing is asserted: it reports.

It prints: llama-bench's plain rate against localspec's plain decoding; llama-speculative-simple against localspec's
drafter of the same kind (draft-simple: the draft model at K=4 and K=8; draft-mtp: the MTP head at K=2 and K=4; draft
p-min 0); auto against the best fixed drafter; and every greedy departure of a speculative run from plain decoding,
with the target's top-2 logit gap there (a near-tie, or a bug).

Run: .venv/bin/python -m tests.tools.gpu_check [--sdist FILE] [--cpu] [--checks draft,mtp] [--shape 7b|small] [--tokens 256] [--rounds 3] [--out DIR]
(--shape small --cpu runs in minutes on a 2-core CPU; the 7b shape wants a GPU: about 4.5 GB of weights a target. A
machine with no package registry gets what it needs from tests/tools/device_bundle.py.)
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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

from localspec import paths
from localspec.bench import reference
from localspec.engine.drafters import registry
from localspec.errors import LocalspecError
from localspec.machine import gpu_build, llama_build, llama_sources
from tests.tools import gpu_models

PROMPT = "Write a Python function that parses an ISO 8601 date and explain each step."
KS = (4, 8)
LAYER_SKIP_BLOCKS = 2
VOCAB_MEMBER = "vendor/llama.cpp/models/ggml-vocab-qwen2.gguf"
# The fixed drafters benched with the layer-skip draft: those auto picks between. The others (tree, self,
# hierarchical) would double a GPU session's time, and self first cuts a copy of the 7B target.
LAYER_SKIP_DRAFTERS = "model,ngram,hybrid"
MTP_KS = (2, 4)  # MTP heads pay at 2-3 drafted tokens (llama.cpp's and others' reports)


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


def vocab_file(out: Path) -> Path:
    return out / "ggml-vocab-qwen2.gguf"


def tokenizer_fields(sdist: Path | None, out: Path) -> gpu_models.Fields:
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


@dataclass(frozen=True)
class Check:
    """One comparison: a target, the drafts benched on it (by label; None: its own MTP layers), their drafters and K."""

    name: str
    target: str  # its file's label in write_models
    drafts: dict[str, str | None]  # label -> draft file's label (None: no draft file)
    drafters: dict[str, str]  # label -> the drafters benched (auto comes with each)
    ks: tuple[int, ...]


CHECKS = {
    "draft": Check("draft", "target", {"layer-skip": "layer-skip", "unrelated": "unrelated"},
                   {"layer-skip": LAYER_SKIP_DRAFTERS, "unrelated": "model"}, KS),
    "mtp": Check("mtp", "mtp-target", {"mtp": None}, {"mtp": "mtp"}, MTP_KS),
}


def write_models(out: Path, shape_name: str, sdist: Path | None, checks: list[Check]) -> dict[str, Path]:
    """The files the checks read, in `out` (each kept, and reused while its recipe holds): the qwen2 target, its
    layer-skip draft and the unrelated draft; the qwen35 target with its MTP block."""
    target, unrelated, mtp_target = gpu_models.SHAPES[shape_name]
    writers: dict[str, tuple[gpu_models.Shape | gpu_models.HybridShape, Callable[[Path, gpu_models.Fields], Path]]] = {
        "target": (target, lambda path, fields: gpu_models.write_qwen2(path, target, 1, fields)),
        "layer-skip": (target, lambda path, fields: gpu_models.write_qwen2(path, target, 1, fields, blocks=LAYER_SKIP_BLOCKS)),
        "unrelated": (unrelated, lambda path, fields: gpu_models.write_qwen2(path, unrelated, 2, fields)),
        "mtp-target": (mtp_target, lambda path, fields: gpu_models.write_qwen35_mtp(path, mtp_target, 1, fields)),
    }
    labels = dict.fromkeys(label for check in checks for label in (check.target, *(d for d in check.drafts.values() if d)))
    files = {label: out / f"{shape_name}-{label}.gguf" for label in labels}
    started = time.perf_counter()
    written = []
    for label, path in files.items():
        shape, write = writers[label]
        recipe = {"format": gpu_models.MODELS_FORMAT, "gain": gpu_models.BLOCK_GAIN, "logit_std": gpu_models.LOGIT_STD,
                  "skip": LAYER_SKIP_BLOCKS, "shape": asdict(shape), "version": llama_sources.llama_cpp_version()}
        stamp = path.with_suffix(".json")
        if path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == recipe:
            continue
        write(path, tokenizer_fields(sdist, out))
        stamp.write_text(json.dumps(recipe))
        written.append(path)
    if written:
        size = sum(f.stat().st_size for f in written) / 2**30
        print(f"gpu-check: wrote {len(written)} model(s) ({size:.1f} GiB) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return files


# --- the runs ------------------------------------------------------------------------------------------------------


def bench(env: dict[str, str], bin_dir: Path, target: Path, draft: Path | None, prompts: Path, tokens: int, rounds: int,
          drafters: str, ks: tuple[int, ...], threads: int | None, out: Path, label: str) -> dict:
    """`localspec bench` with llama.cpp's tools beside it, in a child on the built library: its JSON (its report: a file)."""
    result_file = out / f"bench-{label}.json"
    command = [sys.executable, "-m", "localspec", "bench", "--target", str(target), *(["--draft", str(draft)] if draft else []),
               "--prompts", str(prompts), "--max-tokens", str(tokens), "--rounds", str(rounds), "--draft-max", ",".join(map(str, ks)),
               "--draft-p-min", "0", "--reference-p-min", "0", "--llama-cpp-bin", str(bin_dir), "--json", str(result_file),
               "--drafters", drafters]
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


def report(check: Check, results: dict[str, dict], tg128: float, plain: dict, header: str) -> None:
    print(f"\n{header}")
    first_label = next(iter(results))
    first = results[first_label]
    by_mode = {label: pooled(result["measurements"]) for label, result in results.items()}
    ours_plain = by_mode[first_label]["plain"].rate
    n_gen, depth = first["llama_bench_matched"]["n_gen"], first["llama_bench_matched"]["depth"]
    matched = float(np.mean(first["llama_bench_matched"]["tok_s"])) if first["llama_bench_matched"]["tok_s"] else 0.0
    print(f"\n{'tok/s (all rounds pooled)':62} {'llama.cpp':>10} {'localspec':>10} {'ratio':>7}")
    print(f"{'plain: llama-bench -p 0 -n 128 / localspec plain':62} {tg128:10.1f} {ours_plain:10.1f} {ours_plain / tg128:7.2f}")
    if matched:
        print(f"{f'plain: llama-bench tg{n_gen} @ d{depth} (our workload) / localspec plain':62} {matched:10.1f} {ours_plain:10.1f} "
              f"{ours_plain / matched:7.2f}")
    for label, result in results.items():
        for drafter in dict.fromkeys(r["drafter"] for r in result["reference"]):
            for k in check.ks:
                runs = [r for r in result["reference"] if r["drafter"] == drafter and r["k"] == k]
                ours = by_mode[label].get(f"{drafter} K={k}")
                if not runs or ours is None:
                    continue
                theirs = _rate(runs)
                name = f"{label} K={k}: speculative-simple / localspec {drafter}"
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
        fixed = [(mode.rate, name) for name, mode in modes.items() if mode.drafter not in (registry.PLAIN, registry.ADAPTIVE)]
        auto = next((mode for mode in modes.values() if mode.drafter == registry.ADAPTIVE), None)
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
                print(f"  {label}, {name}, round {round_index}: token {at} of {len(m['tokens'])}, " + (
                    f"top-2 gap {gap:.4f}" if gap is not None else "the plain run with margins went elsewhere before it (its own departure: rounding)"))
    if not departures:
        print(f"  none: all {runs_seen} speculative runs emitted exactly plain decoding's tokens")
    same = all(plain["tokens"] == m["tokens"] for m in by_mode[first_label]["plain"].runs)
    print(f"  (plain with margins {'matches' if same else 'does NOT match'} bench's plain runs; smallest top-2 gap in it: {min(plain['margins']):.4f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help="llama-cpp-python's source .tar.gz (default: the one kept from an earlier run, else pip fetches it)")
    parser.add_argument("--cpu", action="store_true", help="build and run for the CPU even where nvcc and a GPU are found")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"which comparisons, comma-separated (default: all of {', '.join(CHECKS)}); "
                        "draft: a Qwen2 target with draft models; mtp: a Qwen3.5 target with its own MTP layers")
    parser.add_argument("--shape", choices=sorted(gpu_models.SHAPES), default="7b", help="7b: the real shapes (default); small: a CPU-sized smoke run")
    parser.add_argument("--tokens", type=int, default=256, help="tokens generated per run (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every mode (default 3: the first round is auto's learning)")
    parser.add_argument("--threads", type=int, help="CPU threads for localspec and llama.cpp alike (default: localspec's, the physical cores)")
    parser.add_argument("--out", type=Path, default=paths.cache_dir() / "gpu-check", help="models, reports and JSON (default: localspec's cache)")
    parser.add_argument("--margins-of", type=Path, help=argparse.SUPPRESS)  # the child of plain_margins
    parser.add_argument("--prompts", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [name for name in args.checks.split(",") if name not in CHECKS]
    if unknown:
        parser.error(f"--checks: {', '.join(unknown)} is none of {', '.join(CHECKS)}")
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
    checks = [CHECKS[name] for name in args.checks.split(",")]
    files = write_models(args.out, args.shape, sdist, checks)
    prompts = args.out / "prompt.jsonl"
    prompts.write_text(json.dumps({"id": "check", "category": "check", "prompt": PROMPT}) + "\n")
    env = os.environ | {"LLAMA_CPP_LIB_PATH": str(bin_dir), "PYTHONUNBUFFERED": "1"}
    device = f"{'CUDA' if cuda else 'CPU'} build in {bin_dir}" + (f", {gpus[0].name}" if cuda and gpus else "")
    target_shape, unrelated_shape, mtp_shape = gpu_models.SHAPES[args.shape]
    about = {"draft": f"target {target_shape.name}; layer-skip draft: its first {LAYER_SKIP_BLOCKS} of {target_shape.n_layer} blocks; "
                      f"unrelated draft {unrelated_shape.name}",
             "mtp": f"target {mtp_shape.name} ({mtp_shape.n_layer} blocks, one in {mtp_shape.full_attention_interval} attending) "
                    "with one MTP block, drafting with no draft model"}
    for check in checks:
        target = files[check.target]
        results = {label: bench(env, bin_dir, target, files[draft] if draft else None, prompts, args.tokens, args.rounds, check.drafters[label],
                                check.ks, args.threads, args.out, label) for label, draft in check.drafts.items()}
        threads = int(next(iter(results.values()))["machine"]["threads"])
        tg128 = reference.llama_bench_tg(bin_dir, target, threads, n_gen=128)
        plain = plain_margins(env, target, prompts, args.tokens)
        header = (f"gpu-check {check.name}, shape {args.shape}: {about[check.name]} (target Q4_0, {target.stat().st_size / 2**30:.2f} GiB).\n"
                  f"{device}; threads: {threads}; {args.tokens} tokens per run, {args.rounds} rounds, greedy, one prompt; "
                  f"K = {', '.join(map(str, check.ks))} at draft p-min 0.")
        report(check, results, tg128, plain, header)
    total = time.perf_counter() - started
    print(f"\nwall time {total:.0f} s (build {built - started:.0f} s); reports and JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
