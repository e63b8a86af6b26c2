"""`localspec bench-serve`: a running server loaded by 1, 2, 4, 8... concurrent clients sending the bench's prompts.

Each client is a thread that streams its requests one after another, as an
editor would, taking the next prompt from one shared queue: at every
concurrency the same work is done (every prompt, `--rounds` times), so the
rows compare like with like and each covers the whole prompt set, not the
first few prompts. For each concurrency the report gives the aggregate rate
(every token over the wall time), the mean per-client rate, and the time to
first token. Works against any OpenAI-compatible server, llama.cpp's included,
so the two can be compared side by side.

Tokens are counted in the text each answer streamed, by the server's own
tokenizer (its `/tokenize`, asked after the clock stops), not taken from the
`usage` it reports: servers count differently. llama.cpp's counts the
end-of-generation token it sampled (a 16-token haiku is 17 `completion_tokens`),
ours does not, and on the bench's short answers that alone read as llama.cpp
being 1-6% faster. A server without `/tokenize` is taken at its word.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from localspec.bench.results import BenchPrompt
from localspec.bench.runner import load_prompts, select_prompts
from localspec.errors import LocalspecError, UsageError


@dataclass
class ClientRun:
    reported_tokens: int = 0  # what the server's `usage` said
    busy_s: float = 0.0
    first_token_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # each answer as streamed, its reasoning included
    tokens: int = 0  # counted in `texts` once the clock stopped (count_tokens)


def json_request(url: str, path: str, body: dict[str, Any], api_key: str | None) -> urllib.request.Request:
    """A POST of `body` to the server at `url`, with its key when it has one."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    return urllib.request.Request(url.rstrip("/") + path, json.dumps(body).encode(), headers)


def stream_request(url: str, prompt: BenchPrompt, max_tokens: int, api_key: str | None, run: ClientRun) -> None:
    messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    request = json_request(url, "/v1/chat/completions", body, api_key)
    start = time.perf_counter()
    first = None
    pieces: list[str] = []
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            for line in response:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta") or {}
                    pieces += [delta.get("reasoning_content") or "", delta.get("content") or ""]
                    if first is None and delta.get("content"):
                        first = time.perf_counter() - start
                if chunk.get("usage"):
                    run.reported_tokens += chunk["usage"]["completion_tokens"]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        run.errors.append(str(exc))
        return
    run.busy_s += time.perf_counter() - start
    run.texts.append("".join(pieces))
    if first is not None:
        run.first_token_s.append(first)


def measure(url: str, prompts: list[BenchPrompt], clients: int, rounds: int, max_tokens: int,
            api_key: str | None) -> tuple[float, float, float | None, int]:
    """(aggregate tok/s, mean per-client tok/s, median time to first token, errors) for `clients` at once sending
    every prompt `rounds` times between them."""
    runs = [ClientRun() for _ in range(clients)]
    work: queue.SimpleQueue[BenchPrompt] = queue.SimpleQueue()
    for prompt in prompts * rounds:
        work.put(prompt)

    def client(index: int) -> None:
        while True:
            try:
                prompt = work.get_nowait()
            except queue.Empty:
                return
            stream_request(url, prompt, max_tokens, api_key, runs[index])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    count_tokens(url, runs, api_key)
    firsts = [s for run in runs for s in run.first_token_s]
    per_client = statistics.mean(run.tokens / run.busy_s if run.busy_s else 0.0 for run in runs)
    return sum(run.tokens for run in runs) / wall, per_client, statistics.median(firsts) if firsts else None, sum(len(r.errors) for r in runs)


def count_tokens(url: str, runs: list[ClientRun], api_key: str | None) -> None:
    """Each run's tokens: its answers' texts as the server's `/tokenize` counts them (the module's docstring says why),
    or, where the server has no `/tokenize`, the `usage` it reported."""
    for run in runs:
        try:
            run.tokens = 0
            for text in run.texts:
                with urllib.request.urlopen(json_request(url, "/tokenize", {"content": text}, api_key), timeout=60) as response:
                    run.tokens += len(json.loads(response.read())["tokens"])
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            run.tokens = run.reported_tokens


def parse_clients(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--clients takes comma-separated counts such as 1,2,4,8, not {text!r}") from None
    if not counts or counts[0] < 1:
        raise UsageError("--clients counts must be 1 or more")
    return counts


def run_bench_serve(args: argparse.Namespace) -> int:
    if not args.url.startswith(("http://", "https://")):
        raise UsageError(f"bench-serve takes a running server's URL, such as http://127.0.0.1:8080, not {args.url!r}.")
    chosen = select_prompts(load_prompts(args.prompts), args.only)
    prompts = [p for p in chosen if p.response_format is None and p.tools is None]  # its requests are plain chat
    structured = ", ".join(p.id for p in chosen if p not in prompts)
    if not prompts:
        raise UsageError(f"bench-serve sends plain chat requests, and every prompt chosen asks for structured output ({structured}): "
                         "`localspec bench` measures those.")
    counts = parse_clients(args.clients)
    try:
        urllib.request.urlopen(args.url.rstrip("/") + "/health", timeout=10).close()
    except (urllib.error.URLError, OSError) as exc:
        raise LocalspecError(f"No server answers at {args.url} ({exc}). Start one (`localspec serve ...`), or check the URL.") from None
    warm_up = ClientRun()
    stream_request(args.url, prompts[0], 8, args.api_key, warm_up)  # not counted: a server's first request pays its own start-up
    if warm_up.errors:
        raise LocalspecError(f"The server at {args.url} refused a chat request ({warm_up.errors[0]}). Check the URL and --api-key.")
    print(f"{args.url}: {len(prompts)} prompt(s) × {args.rounds} round(s) shared by the clients, {args.max_tokens} tokens max, "
          "temperature 0, streamed" + (f"; left out, as structured output (`localspec bench` measures it): {structured}" if structured else ""))
    print(f"{'clients':>7}  {'aggregate tok/s':>15}  {'per client tok/s':>16}  {'first token (median)':>20}  errors")
    for clients in counts:
        aggregate, per_client, first, errors = measure(args.url, prompts, clients, args.rounds, args.max_tokens, args.api_key)
        first_text = f"{first * 1000:.0f} ms" if first is not None else "-"
        print(f"{clients:>7}  {aggregate:>15.2f}  {per_client:>16.2f}  {first_text:>20}  {errors}", flush=True)
    return 0
