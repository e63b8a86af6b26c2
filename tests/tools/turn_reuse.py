"""A conversation's next turn on a recurrent target: its prompt time from the last turn's checkpoint, against the same
prompt read again from nothing. Not a test: a measurement (run on a quiet CPU; `ps` shows what else runs).

Run: .venv/bin/python -m tests.tools.turn_reuse [--arch qwen35 --arch mamba] [--tokens 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from localspec.engine.chat import raw_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.events import Finished
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.stats import GenerationStats
from tests import arch_models


def measure(path: Path, n_tokens: int, rounds: int) -> None:
    with Engine(EngineConfig(path, n_ctx=2 * n_tokens)) as engine:
        config = GenerationConfig(max_tokens=32)

        def answer(prompt: list[int]) -> GenerationStats:
            return next(e for e in engine.plain.generate(prompt, config) if isinstance(e, Finished)).stats

        first = raw_prompt_tokens(engine.target, "the theater of trees " * n_tokens)[:n_tokens]
        restored, reread = [], []
        for _ in range(rounds):
            engine.target.forget(0)
            answer(first)
            next_turn = first + raw_prompt_tokens(engine.target, " and then what happened next?")[1:] * 10
            stats = answer(next_turn)
            restored.append(stats.prompt_ms)
            engine.target.forget(0)
            reread.append(answer(next_turn).prompt_ms)
        print(f"{path.name}: next turn ({stats.prompt_n} tokens, {stats.cache_n} from the checkpoint): "
              f"{statistics.median(restored):.1f} ms against {statistics.median(reread):.1f} ms read again "
              f"(medians of {rounds}: {', '.join(f'{v:.0f}' for v in restored)} / {', '.join(f'{v:.0f}' for v in reread)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", action="append", help="llama.cpp architecture names (default: qwen35 and mamba)")
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for arch in args.arch or ["qwen35", "mamba"]:
            measure(arch_models.write(Path(scratch), arch), args.tokens, args.rounds)


if __name__ == "__main__":
    main()
