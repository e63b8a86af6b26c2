"""Time per pass outside llama.cpp (python_ms_per_step), plain decoding: one sequence (Decoder) and the batch scheduler.

A tiny generated model shows the loop's own Python; a real model adds what its vocabulary costs on the host (the
logits row read, its argmax). Run on a quiet CPU (check `ps`); to compare two trees, run it with PYTHONPATH at each.
Run: .venv/bin/python -m tests.tools.pass_overhead [REAL.gguf] [--tokens N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

from localspec.engine.batch.scheduler import BatchScheduler
from localspec.engine.batch.slot import SlotRequest
from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.drafters.base import NoDrafter
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import Finished
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.pass_costs import CostTable
from localspec.engine.stats import GenerationStats
from tests.conftest import TINY_SPECS
from tests.tiny_models import write_tiny_model

COSTS = CostTable.given({1: 1.0, 64: 2.0})  # the scheduler's planner needs costs; plain decoding never reads them
ROUNDS = 5


def scheduled(scheduler: BatchScheduler, prompt: list[int], config: GenerationConfig, slots: int) -> GenerationStats:
    done: list[Finished] = []
    for _ in range(slots):
        scheduler.add(SlotRequest(prompt, config, NoDrafter(), lambda event: done.append(event) if isinstance(event, Finished) else None,
                                  lambda _error: None, threading.Event()))
    while scheduler.busy:
        scheduler.step()
    return done[0].stats


def measure(path: Path, tokens: int) -> None:
    with Engine(EngineConfig(path, n_ctx=2048)) as engine:
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me everything about quicksort in Python")])
        config = GenerationConfig(max_tokens=tokens)
        one = []
        for _ in range(ROUNDS):
            engine.target.forget(0)
            one.append(next(e for e in Decoder(engine.target).generate(prompt, config) if isinstance(e, Finished)).stats.python_ms_per_step)
        print(f"{path.name}: one sequence {statistics.median(one):.4f} ms/pass ({', '.join(f'{v:.4f}' for v in one)})")
        for slots in (1, 4):
            runs = [scheduled(BatchScheduler(engine.target, slots, COSTS), prompt, config, slots).python_ms_per_step for _ in range(ROUNDS)]
            print(f"{path.name}: scheduler, {slots} slot{'s' if slots > 1 else ''} {statistics.median(runs):.4f} ms/pass "
                  f"({', '.join(f'{v:.4f}' for v in runs)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("real", nargs="?", type=Path, help="a real GGUF too (its vocabulary's cost shows)")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        measure(write_tiny_model(Path(scratch) / "talkative.gguf", TINY_SPECS["talkative"]), 400)
    if args.real:
        measure(args.real, args.tokens)


if __name__ == "__main__":
    main()
