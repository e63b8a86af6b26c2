"""Plain decoding with llama.cpp's AMX kernels against its repack (AVX-512) kernels: the same library, one process.

The first copy of the model loads with AMX in the CPU's weight buffers, the second after it is taken out, and the two
decode in alternating rounds, so the machine's drift falls on both. It needs a build whose AMX matmul is sound
(`localspec doctor`'s AMX line; the README's "Intel CPUs with AMX" says how to rebuild).
Run: .venv/bin/python -m tests.tools.amx_cost MODEL.gguf [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.decode import Decoder
from localspec.engine.events import Finished
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama import amx
from localspec.engine.llama.model import Model, ModelConfig

PROMPT = "Write a Python function that parses an ISO 8601 date and explain each step."
TOKENS = 64


def tokens_per_second(model: Model, prompt: list[int]) -> float:
    model.forget(0)
    finished = [event for event in Decoder(model).generate(prompt, GenerationConfig(max_tokens=TOKENS)) if isinstance(event, Finished)][0]
    return finished.stats.predicted_per_second


def main(path: str, rounds: int) -> None:
    verdict = amx.settle_amx()
    if not verdict.sound:
        sys.exit(f"AMX is not usable here: {verdict.reason}")
    with Model(path, ModelConfig(n_ctx=2048)) as with_amx:
        amx.keep_weights_off_amx()
        with Model(path, ModelConfig(n_ctx=2048)) as with_repack:
            prompt = chat_prompt_tokens(with_amx, [Message("user", PROMPT)])
            rates: dict[str, list[float]] = {"AMX": [], "repack": []}
            for _ in range(rounds):
                for name, model in (("AMX", with_amx), ("repack", with_repack)):
                    rates[name].append(tokens_per_second(model, prompt))
    for name, values in rates.items():
        print(f"{name:7} {statistics.median(values):6.2f} tok/s  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"AMX / repack: {statistics.median(rates['AMX']) / statistics.median(rates['repack']):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
