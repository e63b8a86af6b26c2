"""An answer's tokens from the target's rows: the verdict on a draft, the events it emits, the first token, the end.

Every loop judges and emits through these, so a token means the same whichever path produced it.
"""

from __future__ import annotations

import numpy as np

from localspec.engine.drafters.base import Draft
from localspec.engine.errors import EngineError
from localspec.engine.events import Finished, StopReason, TokenEvent, TokenSource
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.engine.sampling import Draws, distribution
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.verify import Verdict, verify_greedy, verify_sample_match, verify_speculative, verify_tree


def first_token(target: Model, row: np.ndarray, config: GenerationConfig, draws: Draws, text: TextAssembler,
                stats: GenerationStats) -> tuple[int, list[TokenEvent], StopReason | None]:
    """The answer's first token, judged on the prompt's last row with no draft: the token, its events, and whether the
    answer ends there."""
    nothing = Draft()
    verdict, judged = judge(nothing, row, config, draws, stats.predicted_n)
    margins = top2_margins(judged) if config.record_margins else None
    events, reason = emitted_tokens(target, nothing, verdict, margins, text, stats, config)
    return verdict.token, events, reason


def emitted_tokens(target: Model, draft: Draft, verdict: Verdict, margins: np.ndarray | None, text: TextAssembler,
                   stats: GenerationStats, config: GenerationConfig) -> tuple[list[TokenEvent], StopReason | None]:
    """A verdict's tokens as events, in order, up to the first that ends the answer (end of generation, a stop string,
    max_tokens), and why it ended (None: it goes on)."""
    final_source = TokenSource.TARGET if not draft.tokens else (
        TokenSource.BONUS if verdict.n_accepted == draft.branch_length(verdict.branch) else TokenSource.CORRECTION
    )
    if config.grammar is not None:  # its time so far, which the step's events carry
        stats.t_grammar_ms, stats.grammar_rows = config.grammar.ns / 1e6, config.grammar.rows
    events: list[TokenEvent] = []
    for i, token in enumerate([*verdict.accepted, verdict.token]):
        if target.vocab.is_eog(token):
            return events, StopReason.EOS
        source = TokenSource.ACCEPTED if i < verdict.n_accepted else final_source
        piece = text.push(target.vocab.token_bytes(token))
        stats.predicted_n += 1
        events.append(TokenEvent(token, piece, source, stats.n_steps, stats, None if margins is None else float(margins[i])))
        if text.stopped:
            return events, StopReason.STOP_STRING
        if stats.predicted_n >= config.max_tokens:
            return events, StopReason.MAX_TOKENS
    return events, None


def closing_events(text: TextAssembler, stats: GenerationStats, reason: StopReason, message: str = "") -> list[TokenEvent | Finished]:
    """The end of an answer: the text held back (what could have begun a stop string), then Finished."""
    tail = "" if text.stopped else text.flush()
    held_back = [TokenEvent(-1, tail, TokenSource.TARGET, stats.n_steps, stats)] if tail else []
    return [*held_back, Finished(reason, stats, message, text.stop_word)]


def judge(draft: Draft, rows: np.ndarray, config: GenerationConfig, draws: Draws, position: int) -> tuple[Verdict, np.ndarray]:
    """The target's verdict on a draft from its verify rows, the first of which chooses the answer's token `position`:
    greedy at temperature 0, else the configured rule; with penalties or a logit bias, the penalised target's
    (engine/penalties.py); under a grammar, the constrained target's (engine/grammar.py). With the rows as judged: how
    near a tie each choice was is measured on those."""
    penalties = config.penalties
    if config.grammar is None and penalties is None:
        return _judge(draft, rows, config, draws, position), rows
    if draft.fork is not None:
        raise EngineError("A tree draft cannot be verified under a grammar or penalties; use another drafter.")
    if penalties is not None:
        rows = penalties.adjust(rows, draft.tokens)
    if config.grammar is not None:
        rows = config.grammar.mask(rows, draft.tokens)
    verdict = _judge(draft, rows, config, draws, position)
    emitted = [*verdict.accepted, verdict.token]
    for state in (penalties, config.grammar):
        if state is not None:
            state.accept(emitted)
    return verdict, rows


def _judge(draft: Draft, rows: np.ndarray, config: GenerationConfig, draws: Draws, position: int) -> Verdict:
    if config.sampling.greedy:
        if draft.fork is None:
            return verify_greedy(draft.tokens, rows)
        return verify_tree(draft, rows, lambda row, _: int(row.argmax()))

    def choose(row: np.ndarray, depth: int) -> int:
        return draws.choose(distribution(row, config.sampling), position + depth)

    if draft.fork is not None:
        # Each branch's tokens are deterministic candidates: the target's own sample from p picks the path.
        return verify_tree(draft, rows, choose)
    if config.rule == "speculative":
        return verify_speculative(draft.tokens, draft.dists, rows, config.sampling, draws.rng)
    return verify_sample_match(draft.tokens, rows, choose)


def top2_margins(rows: np.ndarray) -> np.ndarray:
    """Each row's best logit minus its second: how near a tie the target's choice was (the lossless tests' evidence)."""
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]
