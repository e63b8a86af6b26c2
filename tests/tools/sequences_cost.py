"""What a second sequence (a unified KV cache) costs plain decoding: the real target with n_seq=1 against n_seq=2.

The target is loaded with two sequences only when the tree drafter runs; these are the figures behind that.
Both contexts run side by side in one process, alternating rounds, so the machine's drift falls on both.
Run: .venv/bin/python -m tests.tools.sequences_cost [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.events import Finished
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model, ModelConfig
from tests import real_pair

PROMPT = "Write a Python function that parses an ISO 8601 date and explain each step."
TOKENS = 64


def tokens_per_second(decoder: Decoder, prompt: list[int]) -> float:
    finished = [event for event in decoder.generate(prompt, GenerationConfig(max_tokens=TOKENS)) if isinstance(event, Finished)][0]
    return finished.stats.predicted_per_second


def main(rounds: int) -> None:
    target = real_pair.ensure(real_pair.TARGET)
    with Model(target, ModelConfig(n_seq=1)) as one, Model(target, ModelConfig(n_seq=2)) as two:
        prompt = chat_prompt_tokens(one, [Message("user", PROMPT)])
        rates: dict[int, list[float]] = {1: [], 2: []}
        for decoder in (Decoder(one), Decoder(two)):  # warm-up
            tokens_per_second(decoder, prompt)
        for _ in range(rounds):
            for n_seq, model in ((1, one), (2, two)):
                model.forget(0)
                rates[n_seq].append(tokens_per_second(Decoder(model), prompt))
                time.sleep(0.2)
    for n_seq, values in rates.items():
        print(f"n_seq={n_seq}: median {statistics.median(values):.2f} tok/s over {rounds} rounds of {TOKENS} tokens "
              f"(min {min(values):.2f}, max {max(values):.2f})")
    print(f"ratio n_seq=2 / n_seq=1: {statistics.median(rates[2]) / statistics.median(rates[1]):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
