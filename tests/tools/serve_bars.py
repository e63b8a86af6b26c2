"""The server's bars, measured side by side in one run (issue 16): not a test, a measurement.

1. `localspec serve` against the same engine in-process (what `localspec generate` runs), one client, the bench's
   prompts at temperature 0: end-to-end tokens per second, request sent to last byte.
2. Against llama.cpp's own `llama-server` (built from the llama.cpp tree vendored in the llama-cpp-python sdist),
   same pair, same prompts, one client: without a draft, and with `-md` at its default draft settings.
3. The time to first token of an autocomplete request sharing a 1,000-token prefix with the one before, over
   that of the first.

Modes are interleaved prompt by prompt, every round, so drift falls on all alike; each round starts fresh servers,
so that no prompt is answered from what a server kept of its last sending.
Run: .venv/bin/python -m tests.tools.serve_bars --target T.gguf --draft D.gguf [--llama-server BIN] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from localspec.bench.runner import load_prompts
from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import TokenEvent
from localspec.engine.generation_config import GenerationConfig
from tests.live_server import free_port, live_server

MAX_TOKENS = 128
# Between two modes' requests: llama.cpp's worker threads poll for work for a while after a pass (its --poll), and a
# request sent at once to another server ran beside them (ours lost 10% following llama-server -md every time).
SETTLE_S = 1.0


def post(url: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        data = json.loads(response.read())
    return data, time.perf_counter() - start


def first_token_seconds(url: str, body: dict[str, Any]) -> float:
    """Request sent to the first streamed token."""
    request = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            if line.startswith(b"data: ") and b'"content": ""' not in line and b'"content":""' not in line:
                return time.perf_counter() - start
    raise RuntimeError("no token streamed")


@contextmanager
def llama_server(binary: Path, target: Path, draft: Path | None, threads: int, slots: int = 1, ctx_per_slot: int = 4096) -> Iterator[str]:
    """llama.cpp's server on a free port, ready (its -c is the whole context, shared by -np slots); its URL."""
    port = free_port()
    args = [str(binary), "-m", str(target), "--port", str(port), "-c", str(ctx_per_slot * slots), "-t", str(threads),
            "-np", str(slots), "--no-webui"]
    if draft is not None:
        # The draft takes the target's context; draft settings at their defaults. Since llama.cpp's speculative types
        # (MTP, EAGLE3, ...), -md alone loads the draft and drafts nothing (--spec-type defaults to none): the draft
        # model's own path is named.
        args += ["-md", str(draft), "-td", str(threads), "--spec-type", "draft-simple"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"llama-server did not start: {' '.join(args)}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--llama-server", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-autocomplete", action="store_true")
    args = parser.parse_args()
    prompts = load_prompts(None)
    totals: dict[str, list[float]] = {}  # mode -> [tokens, seconds]

    def add(mode: str, tokens: int, seconds: float) -> None:
        entry = totals.setdefault(mode, [0, 0.0])
        entry[0] += tokens
        entry[1] += seconds

    for round_index in range(args.rounds):
        # Fresh servers and engine every round: a prompt sent again to the same server would be answered from what it
        # kept (our lookup memory copies the answer it gave; llama-server's prompt cache skips the prompt).
        with ExitStack() as stack:
            modes = start_modes(stack, args)
            for prompt in prompts:
                messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
                order = list(modes.items())
                order = order[round_index % len(order):] + order[: round_index % len(order)]
                rates = []
                for name, ask in order:
                    time.sleep(SETTLE_S)
                    tokens, seconds = ask(messages)
                    add(name, tokens, seconds)
                    rates.append(f"{name.split(' (')[0]} {tokens / seconds:.1f}")
                print(f"  round {round_index + 1}, {prompt.id}: " + ", ".join(rates) + " tok/s", file=sys.stderr, flush=True)

    print(f"\nOne client, {len(prompts)} bench prompts x {args.rounds} round(s), each round on fresh servers, temperature 0, "
          f"{MAX_TOKENS} tokens max, {args.threads} threads; end-to-end tok/s (request to last byte)")
    base = totals["in-process engine (auto), as generate"]
    for name, (tokens, seconds) in totals.items():
        rate = tokens / seconds
        print(f"  {name:<40} {rate:6.2f} tok/s  {rate / (base[0] / base[1]):.3f}x in-process")
    if args.llama_server:
        ours = totals["localspec serve (auto)"][0] / totals["localspec serve (auto)"][1]
        for name in ("llama-server, no draft", "llama-server -md (defaults)"):
            print(f"  localspec serve / {name}: {ours / (totals[name][0] / totals[name][1]):.3f}")
    if not args.skip_autocomplete:
        autocomplete_bar(args)


def start_modes(stack: ExitStack, args: argparse.Namespace) -> dict[str, Callable[[list[dict[str, str]]], tuple[int, float]]]:
    """localspec serve, the engine in-process and (given the binary) llama-server with and without a draft, warmed up."""
    tmp = stack.enter_context(tempfile.TemporaryDirectory())
    served = stack.enter_context(live_server(Path(tmp), "--target", str(args.target), "--draft", str(args.draft),
                                             "--threads", str(args.threads)))
    engine = stack.enter_context(Engine(EngineConfig(args.target, args.draft, n_threads=args.threads)))
    modes: dict[str, Callable[[list[dict[str, str]]], tuple[int, float]]] = {}

    def counted(text: str) -> int:
        """Every mode's answer counted alike, in its text (llama-server's `completion_tokens` counts the end-of-generation
        token it sampled, ours does not: bench/load.py)."""
        return len(engine.target.vocab.tokenize(text, add_special=False))

    def via_http(url: str) -> Callable[[list[dict[str, str]]], tuple[int, float]]:
        def ask(messages: list[dict[str, str]]) -> tuple[int, float]:
            data, seconds = post(url + "/v1/chat/completions", {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0})
            return counted(data["choices"][0]["message"]["content"] or ""), seconds
        return ask

    def in_process(messages: list[dict[str, str]]) -> tuple[int, float]:
        start = time.perf_counter()
        prompt = chat_prompt_tokens(engine.target, [Message(m["role"], m["content"]) for m in messages])  # type: ignore[arg-type]
        events = list(engine.decoder("auto").generate(prompt, GenerationConfig(max_tokens=MAX_TOKENS, draft_max=8)))
        seconds = time.perf_counter() - start
        return counted("".join(e.text for e in events if isinstance(e, TokenEvent))), seconds

    modes["localspec serve (auto)"] = via_http(served.url)
    modes["in-process engine (auto), as generate"] = in_process
    if args.llama_server:
        modes["llama-server, no draft"] = via_http(stack.enter_context(llama_server(args.llama_server, args.target, None, args.threads)))
        modes["llama-server -md (defaults)"] = via_http(stack.enter_context(llama_server(args.llama_server, args.target, args.draft, args.threads)))
    for ask in modes.values():  # warm-up: each mode once (auto's costs, page cache), on a prompt that is not measured
        ask([{"role": "user", "content": "Hello"}])
    return modes


def autocomplete_bar(args: argparse.Namespace) -> None:
    """Autocomplete: a 1,000-token prefix, then the same prefix and a few more characters."""
    with tempfile.TemporaryDirectory() as tmp, live_server(Path(tmp), "--target", str(args.target), "--draft", str(args.draft),
                                                           "--threads", str(args.threads)) as served:
        ratios = []
        rng = random.Random(0)
        for trial in range(5):
            lines = [f"def helper_{trial}_{i}(value):\n    return value * {rng.randint(2, 99)} + {i}\n\n" for i in range(60)]
            prefix = "".join(lines)
            n = len(post(served.url + "/tokenize", {"content": prefix})[0]["tokens"])  # the server's tokenizer: no second load
            first = first_token_seconds(served.url + "/infill", {"input_prefix": prefix, "input_suffix": "\n", "n_predict": 4})
            second = first_token_seconds(served.url + "/infill", {"input_prefix": prefix + "def main():\n    ", "input_suffix": "\n", "n_predict": 4})
            ratios.append(second / first)
            print(f"  autocomplete trial {trial}: prefix {n} tokens, first token {first * 1000:.0f} ms, then {second * 1000:.0f} ms")
        print(f"  second request's time to first token / first's: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
