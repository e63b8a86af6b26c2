"""What numpy costs right after a decode: a measurement aid, not a test.

A decode streams the weights through the caches, so the first numpy function of each kind called after it pays for
its code and tables again (20-35 us each on a 2-core VM, whatever its array's size), and a second call of the same
function is warm. auto's confidence read is five such functions: this is why it costs 105-130 us in the step against
15-35 us timed alone, and why a faster formula timed alone can be slower in place.
Run: .venv/bin/python -m tests.tools.cold_numpy MODEL.gguf [--steps N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from localspec.engine.llama.model import Model, ModelConfig

Operation = tuple[str, Callable[[np.ndarray], object]]


def operations(small: np.ndarray) -> list[Operation]:
    """Each twice in a row: the first call after the decode, then the same function warm."""
    return [
        ("argmax of the row", lambda row: row.argmax()),
        ("max of 100 floats", lambda row: small.max()),
        ("max of 100 floats, again", lambda row: small.max()),
        ("the row compared", lambda row: row > 1.0),
        ("the row compared, again", lambda row: row > 1.0),
        ("exp of 100 floats", lambda row: np.exp(small)),
        ("exp of 100 floats, again", lambda row: np.exp(small)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    with Model(args.model, ModelConfig(0, args.steps + 64), role="target") as model:
        prompt = model.vocab.tokenize("def fib(n):\n    if n < 2:\n        return n\n", True, False)
        model.decode(prompt[:-1], outputs=0)
        small = np.arange(100, dtype=np.float32)
        timed = operations(small)
        total = [0] * len(timed)
        token = prompt[-1]
        for _ in range(args.steps):
            row = model.decode([token], outputs=1)[0]
            for i, (_, operation) in enumerate(timed):
                start = time.perf_counter_ns()
                operation(row)
                total[i] += time.perf_counter_ns() - start
            token = int(row.argmax())
    for (name, _), ns in zip(timed, total):
        print(f"{name:28} {ns / args.steps / 1e3:7.1f} us")


if __name__ == "__main__":
    main()
