"""How well the target's confidence predicts what drafts get accepted, over a bench run's plain answers: a measurement
aid, not a test (the figures in engine/drafters/auto/confidence.py and agreement.py come from it).

For each answer token: the target's probability of its own best token there, decayed over the tokens before as auto
decays it per step; whether the draft model would have offered the token at p-min and been right; and, where prompt
lookup has a run, whether the run's first token was right, by its match class. Tabled by the confidence class.
Run: .venv/bin/python -m tests.tools.confidence_table out.json --target T.gguf --draft D.gguf
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from localspec.bench.runner import load_prompts
from localspec.engine.chat import chat_prompt_tokens
from localspec.engine.defaults import DRAFT_P_MIN
from localspec.engine.drafters.auto.agreement import match_class
from localspec.engine.drafters.ngram import PromptLookup
from localspec.engine.llama.model import Model, ModelConfig
from localspec.engine.tuning import CLASS_EDGES, CONFIDENCE_DECAY


def best_and_probability(model: Model, prompt: Sequence[int], answer: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The model's best token and its probability at every answer position (one pass over the prompt and the answer)."""
    model.forget(0)
    model.decode(list(prompt[:-1]), outputs=0)
    rows = model.decode([prompt[-1], *answer[:-1]], outputs=len(answer)).astype(np.float64)
    rows -= rows.max(axis=1, keepdims=True)
    probabilities = np.exp(rows)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    return probabilities.argmax(axis=1), probabilities.max(axis=1)


def confidence_class(confidence: float) -> int:
    return sum(confidence >= edge for edge in CLASS_EDGES)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    args = parser.parse_args()
    answers: dict[str, list[int]] = {}
    for measurement in json.loads(args.bench_json.read_text())["measurements"]:
        if measurement["mode"] == "plain":
            answers.setdefault(measurement["prompt"], measurement["tokens"])
    target = Model(args.target, ModelConfig(0, 8192), role="target")
    draft = Model(args.draft, ModelConfig(0, 8192), role="draft")
    prompts = {p.id: chat_prompt_tokens(target, p.messages) for p in load_prompts(None) if p.id in answers}
    drafts: dict[int, list[bool]] = defaultdict(list)  # confidence class -> the draft's next token offered and right
    lookups: dict[tuple[int, int], list[bool]] = defaultdict(list)  # (match class, confidence class) -> first token right
    for prompt_id, answer in answers.items():
        _, sure = best_and_probability(target, prompts[prompt_id], answer)
        draft_best, draft_sure = best_and_probability(draft, prompts[prompt_id], answer)
        lookup = PromptLookup()
        lookup.start(prompts[prompt_id])
        decayed: float | None = None
        for position, token in enumerate(answer):
            if decayed is not None:
                drafts[confidence_class(decayed)].append(bool(draft_best[position] == token and draft_sure[position] >= DRAFT_P_MIN))
                run = lookup.lookup(4)
                if run.tokens:
                    lookups[(match_class(run.match_length), confidence_class(decayed))].append(run.tokens[0] == token)
            decayed = sure[position] if decayed is None else CONFIDENCE_DECAY * decayed + (1 - CONFIDENCE_DECAY) * sure[position]
            lookup.advance([token])
    bounds = (0.0, *CLASS_EDGES, 1.0)
    names = [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(bounds, bounds[1:])]
    print(f"{'target confidence':<18}" + "".join(f"{name:>12}" for name in names))
    print(f"{'draft accepted':<18}" + "".join(f"{np.mean(drafts[c]):7.2f}({len(drafts[c]):3d})" if drafts[c] else f"{'-':>12}" for c in range(len(names))))
    for bound in sorted({key[0] for key in lookups}):
        cells = [lookups[(bound, c)] for c in range(len(names))]
        print(f"{f'lookup match {bound}':<18}" + "".join(f"{np.mean(x):7.2f}({len(x):3d})" if x else f"{'-':>12}" for x in cells))


if __name__ == "__main__":
    main()
