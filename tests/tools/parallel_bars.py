"""Issue 17's bars, measured side by side in one run: not a test, a measurement.

At each concurrency all servers are started afresh (the same pair, threads, slots and per-slot context), then
loaded in turn, in an order that rotates, so that the machine's drift falls on all alike: 1, 2, 4 and 8 concurrent
streaming clients sharing the bench's prompts at temperature 0 (`localspec bench-serve`'s measure). Fresh servers,
because the same prompts come at every concurrency: a server that kept the last level's state would answer from it
(llama-server's RAM prompt cache skips the prompts it has seen; our lookup memory copies the answers it gave), which
measures the repetition, not the load:
- localspec serve --parallel N with auto (its draft model and lookup), and with --drafter none;
- llama.cpp's llama-server -np N with -md (its default draft settings), and without a draft.
One round of this load moves a cell by about 5% on a 2-core machine, more than the margin a bar may have, so
`--repeats R` measures every concurrency R times, each on fresh servers, and reports each cell's median and each
ratio's median over the repeats (a ratio is taken within one repeat, where the servers ran side by side).
Run: .venv/bin/python -m tests.tools.parallel_bars --target T.gguf --draft D.gguf --llama-server BIN [--slots 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from localspec.bench.load import ClientRun, measure, stream_request
from localspec.bench.results import BenchPrompt
from localspec.bench.runner import load_prompts
from tests.live_server import live_server
from tests.tools.serve_bars import SETTLE_S, llama_server

CTX_PER_SLOT = 4096
WARM_UP = BenchPrompt("warm-up", "chat", "Say hello.")


@contextmanager
def ours(target: Path, draft: Path, threads: int, slots: int, drafter: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp, live_server(Path(tmp), "--target", str(target), "--draft", str(draft), "--threads",
                                                          str(threads), "--parallel", str(slots), "--ctx-size", str(CTX_PER_SLOT),
                                                          "--drafter", drafter) as server:
        yield server.url


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--clients", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="measure every concurrency this many times on fresh servers")
    parser.add_argument("--max-tokens", type=int, default=128)  # as the bench and the one-client bars
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated server names to run")
    args = parser.parse_args()
    prompts = load_prompts(None)
    counts = [int(c) for c in args.clients.split(",")]
    servers = {
        f"localspec --parallel {args.slots} auto": lambda: ours(args.target, args.draft, args.threads, args.slots, "auto"),
        f"localspec --parallel {args.slots} none": lambda: ours(args.target, args.draft, args.threads, args.slots, "none"),
        "localspec --parallel 1 auto": lambda: ours(args.target, args.draft, args.threads, 1, "auto"),
        f"llama-server -np {args.slots} -md": lambda: llama_server(args.llama_server, args.target, args.draft, args.threads, args.slots, CTX_PER_SLOT),
        f"llama-server -np {args.slots}": lambda: llama_server(args.llama_server, args.target, None, args.threads, args.slots, CTX_PER_SLOT),
    }
    wanted = [name.strip() for name in args.only.split(";") if name.strip()]
    chosen = {name: start for name, start in servers.items() if not wanted or name in wanted}
    runs: dict[str, dict[int, list[float]]] = {name: {c: [] for c in counts} for name in chosen}
    levels = [clients for _ in range(args.repeats) for clients in counts]
    for turn, clients in enumerate(levels):
        with ExitStack() as stack:
            urls = {name: stack.enter_context(start()) for name, start in chosen.items()}
            for url in urls.values():
                stream_request(url, WARM_UP, 8, None, ClientRun())  # not counted, and not one of the measured prompts
            names = list(urls)
            for name in names[turn % len(names):] + names[: turn % len(names)]:
                time.sleep(SETTLE_S)  # the last server's worker threads may still poll for work (serve_bars.py)
                aggregate, per_client, first, errors = measure(urls[name], prompts, clients, args.rounds, args.max_tokens, None)
                runs[name][clients].append(aggregate)
                print(f"{name:32} {clients} clients: {aggregate:6.2f} tok/s aggregate, {per_client:6.2f} per client, "
                      f"first token {first * 1000 if first else 0:.0f} ms, {errors} errors", flush=True)
    print(f"\n{args.target.name} + {args.draft.name}, {args.threads} threads, every prompt × {args.rounds} shared by the clients, "
          f"{args.max_tokens} tokens, temperature 0: aggregate tok/s, median of {args.repeats} repeat(s)")
    print(f"{'server':32} " + " ".join(f"{c:>8}" for c in counts))
    for name, row in runs.items():
        print(f"{name:32} " + " ".join(f"{statistics.median(row[c]):8.2f}" for c in counts))
    baseline, *others = runs
    if others:
        print(f"\n{baseline} ÷ each other server, median of the repeats' ratios (each repeat's ratios in brackets)")
        for other in others:
            ratios = [[ours / theirs for ours, theirs in zip(runs[baseline][c], runs[other][c])] for c in counts]
            print(f"÷ {other:30} " + " ".join(f"{statistics.median(r):6.3f} [{' '.join(f'{x:.2f}' for x in r)}]" for r in ratios))


if __name__ == "__main__":
    main()
