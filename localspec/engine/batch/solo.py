"""The step of a scheduler's lone slot (every one-sequence generation, `Decoder`, and a server's single slot): the batch's
step without its bookkeeping, and with room for a tree's fork, which takes the target's second sequence.

Invariant between steps: the target's cache holds every settled token except
the last one (`last`), which the next verify batch starts with. That batch,
[last, d1..dK], yields K+1 rows of logits: row i judges draft token i+1, and
the row after the last accepted token gives the target's own next token.
"""

from __future__ import annotations

import time

from localspec.engine.answer import emitted_tokens, judge, top2_margins
from localspec.engine.batch.slot import Generation, Slot
from localspec.engine.drafters.base import Ask
from localspec.engine.errors import EngineError
from localspec.engine.events import StopReason, TokenEvent
from localspec.engine.llama.model import Model


def solo_step(target: Model, slot: Slot, generation: Generation, room: int) -> tuple[list[TokenEvent], StopReason | None]:
    """Draft up to K tokens, verify [last, *draft] in one target pass, keep the verdict, roll back the rest; the tokens
    as events, and whether the answer ended. `generation`: the slot's; `room`: the cells left after `last`."""
    drafter = generation.request.drafter
    assert slot.seq == 0  # a lone slot is sequence 0: the one-sequence API's
    config, stats, rng = generation.request.config, generation.stats, generation.rng
    t0 = time.perf_counter_ns()
    cap = config.draft_cap(room, stats.predicted_n, target.draft_limit)
    [draft] = drafter.propose([Ask(0, cap, config.draft_p_min, config.draft_sampling, rng)])
    if draft.n_tokens > room or not target.forks:
        # A tree's fork takes cells of its own (and an attention cache); with too few left, the main chain (at most
        # k <= room) goes alone.
        # The drafter hears the settled tokens in accept() as always, and drops the fork's speculation then.
        draft.fork = None
    t1 = time.perf_counter_ns()
    n_past = target.n_past
    fork = draft.fork
    if fork is None:
        rows = target.decode([slot.last, *draft.tokens], outputs=len(draft.tokens) + 1)
    else:
        rows = target.decode_tree([slot.last, *draft.tokens[: fork.at]], draft.tokens[fork.at :], fork.tokens)
    t2 = time.perf_counter_ns()
    verdict = judge(draft, rows, config, rng)
    drafter.observe_target(0, rows[0])  # before anything decodes again: rows is llama.cpp's buffer
    margins = top2_margins(rows[verdict.rows(len(draft.tokens))]) if config.record_margins else None
    if fork is not None:
        on_fork = verdict.n_accepted - fork.at if verdict.branch == 1 else None
        target.settle_tree(n_past + 1 + fork.at, on_fork)
        stats.n_forks += 1
        stats.n_fork_accepted += verdict.branch
    keep = n_past + 1 + verdict.n_accepted
    if target.forget(0, keep) != keep:
        raise EngineError(f"{target.path.name} could not roll back a draft of {len(draft.tokens)} tokens")
    drafter.accept(0, [*verdict.accepted, verdict.token])
    t3 = time.perf_counter_ns()
    drafter.observe_step(draft.n_tokens + 1, (t2 - t1) / 1e6, (t3 - t0 - (t2 - t1)) / 1e6)
    if draft.choice is not None:
        stats.record_decision(draft.choice.label, draft.choice.predicted, (t1 - t0) / 1e6)
    stats.record_step(draft.n_tokens, verdict.n_accepted, (t1 - t0) / 1e6, (t3 - t1) / 1e6, (t2 - t1) / 1e6, draft.depth)
    slot.last = verdict.token
    return emitted_tokens(target, draft, verdict, margins, generation.text, stats, config)
