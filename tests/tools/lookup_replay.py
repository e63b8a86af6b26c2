"""Auto's lookup replayed offline over a bench run's plain answers: a measurement aid, not a test.

`localspec bench --json out.json` keeps every plain answer and auto's verify costs. This replays auto (without its
draft model) over each answer at those costs, beside the lookup ceiling and beside the same rule given each answer's
own acceptance rates in advance (counted over the whole answer, then frozen). No model runs, so it takes seconds:
change the lookup or the controller, replay, compare. Where even the known rates fall short of a goal, better
estimates cannot reach it, and the gap is foresight. Greedy runs only (the plain answer is the target's text).

One order of the prompts is one path: what auto learned on the prompts before decides a bet or two on the next, and
a change that moves one early bet moves a later prompt by several percent. `--orders N` replays the prompts in N
shuffled orders, each with a fresh controller, and reports each prompt's geometric mean over them, so a change is
judged by what it does on average, not on one path.
Run: .venv/bin/python -m tests.tools.lookup_replay out.json --target T.gguf [--steps PROMPT_ID] [--orders N]
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

from localspec.bench.ceiling import lookup_ceiling
from localspec.bench.runner import load_prompts
from localspec.engine.chat import chat_prompt_tokens
from localspec.engine.drafters.auto.agreement import AgreementModel, CopyEffect
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.base import Ask, NewSession
from localspec.engine.llama.model import Model, ModelConfig
from localspec.engine.pass_costs import CostTable
from tests.tools.confidence_table import best_and_probability

K_CAP = 32  # auto's cap in the bench


class KnownRates(AgreementModel):
    """An agreement model that counts every run without decay; frozen, it judges by those counts and learns nothing."""

    frozen = False

    def __post_init__(self) -> None:
        self._count_without_decay()

    def _count_without_decay(self) -> None:
        for model in (*self.given.models(), *self.own.models()):
            model.decay = 1.0

    def observe_positions(self, match_length: int, start: int, held: int, missed: bool, unsure: bool = False,
                          own: bool = False, effect: CopyEffect | None = None) -> None:
        # Every lesson, a whole run's or a run's positions as they are judged, comes through here. The answer's effect is
        # left untaught: these rates are the answer's own already, and scaled by an effect they would count it twice.
        if not self.frozen:
            super().observe_positions(match_length, start, held, missed, unsure, own)

    def forget_guesses(self) -> None:
        if not self.frozen:
            super().forget_guesses()
            self._count_without_decay()


def replay(auto: AutoDrafter, prompt: Sequence[int], answer: Sequence[int], sure: Sequence[float]) -> tuple[float, list[str]]:
    """Auto's steps over `answer` at its cost table: the ratio to plain decoding, and each step as match:K/accepted.
    `sure` is the target's probability of its own best token at each answer position, which auto hears as the decode
    loop tells it: the prompt's row gives the first token (no step), each step's first verify row the next."""
    auto.observe(NewSession())
    auto.begin(0, prompt)
    auto.accept(0, answer[:1])
    auto.confidence.observe_probability(sure[0])
    position, spent, steps = 1, 0.0, []
    while position < len(answer):
        match = auto.lookups[0].lookup(K_CAP).match_length
        run = auto.propose([Ask(0, K_CAP, 0.0)])[0].tokens
        accepted = 0  # the step's last token is always the target's own
        while accepted < len(run) and position + accepted + 1 < len(answer) and run[accepted] == answer[position + accepted]:
            accepted += 1
        spent += auto.costs.verify(len(run) + 1)
        auto.confidence.observe_probability(sure[position])
        steps.append(f"{match}:{len(run)}/{accepted}")
        auto.accept(0, answer[position : position + accepted + 1])
        position += accepted + 1
    return (len(answer) - 1) * auto.costs.verify(1) / spent, steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--target", type=Path, required=True, help="the bench's target (its chat template makes the prompts)")
    parser.add_argument("--steps", action="append", default=[], help="print this prompt's steps (match:K/accepted)")
    parser.add_argument("--orders", type=int, default=0, help="also replay the prompts in this many shuffled orders")
    args = parser.parse_args()
    result = json.loads(args.bench_json.read_text())
    costs = CostTable.given({int(n): ms for n, ms in result["verify_ms"].items()})
    answers: dict[str, list[int]] = {}
    for measurement in result["measurements"]:
        if measurement["mode"] == "plain":
            answers.setdefault(measurement["prompt"], measurement["tokens"])
    target = Model(args.target, ModelConfig(0, 8192), role="target")
    prompts = {p.id: chat_prompt_tokens(target, p.messages) for p in load_prompts(None) if p.id in answers}
    sure = {prompt_id: best_and_probability(target, prompts[prompt_id], answer)[1] for prompt_id, answer in answers.items()}
    auto = AutoDrafter(costs)  # one controller across the prompts, in the bench's order, as the bench keeps it
    print(f"{'prompt':<22} {'auto':>6} {'known rates':>11} {'ceiling':>8} {'auto/ceiling':>12} {'known/ceiling':>13}")
    for prompt_id, answer in answers.items():
        ratio, steps = replay(auto, prompts[prompt_id], answer, sure[prompt_id])
        learner = AutoDrafter(costs)
        learner.planner.lookup_acceptance = KnownRates()
        replay(learner, prompts[prompt_id], answer, sure[prompt_id])
        learner.lookup_acceptance.frozen = True
        known, _ = replay(learner, prompts[prompt_id], answer, sure[prompt_id])
        ceiling = lookup_ceiling(prompts[prompt_id], answer, costs.verify, K_CAP).ratio
        print(f"{prompt_id:<22} {ratio:6.2f} {known:11.2f} {ceiling:8.2f} {ratio / ceiling:12.2f} {known / ceiling:13.2f}")
        if prompt_id in args.steps:
            print("  " + " ".join(steps))
    if args.orders:
        shuffled_orders(costs, prompts, answers, sure, args.orders)


def shuffled_orders(costs: CostTable, prompts: dict[str, list[int]], answers: dict[str, list[int]],
                    sure: dict[str, Sequence[float]], n_orders: int) -> None:
    """Each prompt's ratio to plain, geometric mean over `n_orders` shuffled orders (seeded), and theirs together."""
    logs: dict[str, list[float]] = {prompt_id: [] for prompt_id in answers}
    for seed in range(n_orders):
        order = list(answers)
        random.Random(seed).shuffle(order)
        auto = AutoDrafter(costs)
        for prompt_id in order:
            logs[prompt_id].append(math.log(replay(auto, prompts[prompt_id], answers[prompt_id], sure[prompt_id])[0]))
    means = {prompt_id: sum(values) / len(values) for prompt_id, values in logs.items()}
    print(f"\nauto over {n_orders} shuffled orders (geometric mean of each prompt's ratio to plain):")
    for prompt_id, mean in means.items():
        print(f"{prompt_id:<22} {math.exp(mean):6.3f}  (worst {math.exp(min(logs[prompt_id])):.2f})")
    print(f"{'all prompts':<22} {math.exp(sum(means.values()) / len(means)):6.4f}")


if __name__ == "__main__":
    main()
