"""What the draft-head tests run (test_mtp.py, test_eagle3.py): raw prompts for the tiny models' 128-token vocabularies,
and each prompt's greedy answer with a head, alone and in four slots, checked against plain decoding."""

from __future__ import annotations

from localspec.engine.engine import Engine
from localspec.engine.generation_config import GenerationConfig
from tests.batch_runs import run_batch
from tests.conftest import Run, run
from tests.lossless import assert_lossless

PROMPTS = [[1, 5, 9, 17, 3, 8, 22, 40], [7, 7, 2, 90, 31], [100, 4, 66, 12, 12, 8, 3, 3, 51, 9, 2], [45, 46, 47]]
GREEDY = GenerationConfig(max_tokens=40, draft_max=4, draft_p_min=0.0)


def acceptance(runs: list[Run]) -> float:
    """The share of the drafted tokens accepted over `runs` (some must have been drafted)."""
    drafted = sum(r.finished.stats.draft_n for r in runs)
    assert drafted > 0
    return sum(r.finished.stats.draft_n_accepted for r in runs) / drafted


def lossless_alone_and_in_four_slots(engine: Engine, drafter: str, label: str) -> tuple[list[Run], list[Run]]:
    """Every prompt's greedy answer with `drafter`, alone and then four slots at once, each equal to plain decoding's
    (departing only at near-ties), every slot's cells what it says it holds."""
    plain = [run(engine.plain, prompt, GREEDY) for prompt in PROMPTS]
    alone = [run(engine.decoder(drafter), prompt, GREEDY) for prompt in PROMPTS]
    scheduler = engine.batch(4)
    together = [collected.run for collected in run_batch(scheduler, [(prompt, GREEDY, engine.drafter(drafter)) for prompt in PROMPTS])]
    for i, (expected, one, four) in enumerate(zip(plain, alone, together)):
        assert_lossless(expected, one, label=f"prompt {i}, {label}, alone")
        assert_lossless(expected, four, label=f"prompt {i}, {label}, 4 slots")
    for slot in scheduler.slots:
        assert engine.target.cells_held(slot.seq) == len(slot.cached)
    return alone, together
