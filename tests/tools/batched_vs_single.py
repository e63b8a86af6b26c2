"""How far batched and single-row decodes of the tiny models differ, and how close their greedy runs come to a tie.

The figures behind tests/lossless.py's NEAR_TIE_TINY. Run: .venv/bin/python -m tests.tools.batched_vs_single
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.llama.model import Model, ModelConfig
from tests.conftest import TINY_SPECS
from tests.tiny_models import write_tiny_model

PROMPTS = ["hello there", "write a function", "the quick brown fox", "in the beginning", "tell me everything"]
TOKENS, BATCH = 200, 5


def main() -> None:
    root = Path(tempfile.mkdtemp())
    for name in ("target", "talkative"):
        with Model(write_tiny_model(root / f"{name}.gguf", TINY_SPECS[name]), ModelConfig(None, 4096)) as model:
            closest_tie, largest_difference = np.inf, 0.0
            for text in PROMPTS:
                prompt = chat_prompt_tokens(model, [Message("user", text)])
                model.prefill(prompt[:-1])
                tokens, rows = [prompt[-1]], []
                for _ in range(TOKENS):  # plain greedy decoding, one row at a time
                    rows.append(model.decode([tokens[-1]], outputs=1)[0].copy())
                    top2 = np.sort(rows[-1])[-2:]
                    closest_tie = min(closest_tie, float(top2[1] - top2[0]))
                    tokens.append(int(rows[-1].argmax()))
                model.prefill(prompt[:-1])
                for start in range(0, TOKENS, BATCH):  # the same tokens again, as verify batches
                    batched = model.decode(tokens[start : start + BATCH], outputs=BATCH)
                    largest_difference = max(largest_difference, float(np.abs(batched - rows[start : start + BATCH]).max()))
            print(f"{name}: closest top-2 gap {closest_tie:.4f}, largest batched-vs-single logit difference {largest_difference:.4f}")


if __name__ == "__main__":
    main()
