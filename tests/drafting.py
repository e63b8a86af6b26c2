"""Shared by the drafter tests: cost tables shaped like real machines, and helpers that drive auto as the decode loop
does or run a drafter on tiny models."""

from __future__ import annotations

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.drafters.auto.choice import Choice
from localspec.engine.drafters.auto.controller import AutoDrafter
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.base import Ask, StepCost
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.engine import Engine
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.stats import GenerationStats
from tests.conftest import run
from tests.lossless import assert_clear_of_ties

# Costs shaped like a large target on a GPU: verifying 16 tokens costs little more than one, drafting is cheap.
GPU_LIKE = {1: 20.0, 2: 20.5, 4: 21.0, 8: 22.0, 16: 24.0}, 1.0
# ...and like this 2-core CPU with the real pair: batches cost nearly what their tokens cost one by one.
CPU_LIKE = {1: 60.0, 2: 100.0, 4: 200.0, 8: 400.0, 16: 600.0}, 30.0

# Verify costs as measured on the 2-core CI machine with the real target: every row of logits costs, so speculation must be sure.
CPU_VERIFY_MS = {1: 46.0, 2: 78.0, 3: 110.0, 4: 135.0, 5: 147.0, 6: 180.0, 8: 319.0}

# A target whose batches cost little more than one token: a GPU, or a memory-bound target on a fast CPU.
CHEAP_BATCH_MS = {1: 20.0, 2: 21.0, 4: 22.0, 8: 24.0, 16: 28.0, 32: 36.0, 33: 37.0}

REPEATING = "the cat sat on the mat; the cat sat on the mat"


def decide(controller: AutoDrafter, k_cap: int, lookup: Lookup) -> Choice:
    """auto's choice for sequence 0 at most `k_cap` draft tokens, given lookup's run there."""
    pending = controller.model.pending_tokens(0) if controller.model is not None else 0
    return controller.planner.plan([SlotOptions(k_cap, lookup, pending, controller.belief(0))])[0]


def asked_before(planner: Planner) -> None:
    """The draft has been asked before, where the target was sure, and agreed: its evidence vouches for it, so it is
    asked on its merits, not as a try paid from the exploration budget (planner.plan)."""
    planner.draft_acceptance[-1].observe(1, 1)


def replay(controller: AutoDrafter, prompt: list[int], answer: list[int], k_cap: int = 8) -> list[tuple[int, int]]:
    """Drive the controller as the decode loop does, with `answer` as the target's text: (K, accepted) per step."""
    controller.begin(0, prompt)
    steps, position = [], 0
    while position < len(answer):
        draft = controller.propose([Ask(0, k_cap, 0.0)])[0]
        accepted = 0
        while accepted < len(draft.tokens) and position + accepted < len(answer) and draft.tokens[accepted] == answer[position + accepted]:
            accepted += 1
        controller.accept(0, answer[position : position + accepted + 1])
        controller.observe(StepCost(len(draft.tokens) + 1, CPU_VERIFY_MS.get(len(draft.tokens) + 1, 400.0), 0.0))
        steps.append((len(draft.tokens), accepted))
        position += accepted + 1
    return steps


def drafter_stats(engine: Engine, drafter: str, text: str = REPEATING, tokens: int = 80) -> GenerationStats:
    """Statistics of one drafter; the prompt is checked clear of near-ties, so acceptance figures hold on any machine."""
    prompt = chat_prompt_tokens(engine.target, [Message("user", text)])
    assert_clear_of_ties(run(engine.plain, prompt, GenerationConfig(max_tokens=tokens)))
    return run(engine.decoder(drafter), prompt, GenerationConfig(max_tokens=tokens, draft_max=6, draft_p_min=0.0)).finished.stats
