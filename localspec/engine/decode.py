"""The decode loop: draft, verify in one target pass, accept, roll back, repeat.

Plain decoding is the same loop with a drafter that proposes nothing, so the
baseline and speculation share every line of bookkeeping and every statistic.

Invariant between steps: the target's cache holds every settled token except
the last one (`last`), which the next verify batch starts with. That batch,
[last, d1..dK], yields K+1 rows of logits: row i judges draft token i+1, and
the row after the last accepted token gives the target's own next token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from localspec.engine import defaults
from localspec.engine.drafters.base import Draft, Drafter, NoDrafter
from localspec.engine.errors import EngineError, PromptTooLongError
from localspec.engine.events import Finished, StopReason, TokenEvent, TokenSource
from localspec.engine.grammar import Grammar
from localspec.engine.llama.model import Model
from localspec.engine.sampling import SamplingParams, distribution, make_rng
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.verify import Verdict, verify_greedy, verify_sample_match, verify_speculative, verify_tree

Verification = Literal["speculative", "sample-match"]


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = defaults.MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_max: int = defaults.DRAFT_MAX
    draft_p_min: float = defaults.DRAFT_P_MIN
    verification: Verification = "speculative"  # at temperature > 0; temperature 0 is always greedy
    stop: tuple[str, ...] = ()
    record_margins: bool = False  # evidence for lossless tests; costs a partition per row
    grammar: Grammar | None = None  # what the answer may say (JSON mode): one answer's state, so one config per request

    @property
    def draft_sampling(self) -> SamplingParams | None:
        """How drafts are sampled: None (greedy) at temperature 0 and under sample-match, which judges the tokens and
        never q; else from q at the request's own sampling, which speculative sampling needs."""
        return None if self.sampling.greedy or self.verification == "sample-match" else self.sampling

    def draft_cap(self, room: int, predicted_n: int, limit: int | None = None) -> int:
        """The most draft tokens a step may take: K, the cells left after the last settled token (`room`), the tokens the
        answer has left besides the target's own, and (several slots) each slot's share of a pass (`limit`)."""
        cap = min(self.draft_max, room, self.max_tokens - predicted_n - 1)
        return max(0, cap if limit is None else min(cap, limit))


class Decoder:
    def __init__(self, target: Model, drafter: Drafter | None = None) -> None:
        self.target = target
        self.drafter: Drafter = drafter or NoDrafter()

    def generate(
        self, prompt: Sequence[int], config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[TokenEvent | Finished]:
        """Yield a TokenEvent per emitted token, then exactly one Finished."""
        if not prompt:
            raise ValueError("the prompt must hold at least one token")
        self.check_fits(prompt)
        config.sampling.validate()
        rng, seed = make_rng(config.sampling.seed)
        stats = GenerationStats(drafter=self.drafter.name, draft_max=config.draft_max, seed=None if config.sampling.greedy else seed)
        text = TextAssembler(config.stop)
        target, drafter = self.target, self.drafter

        start = time.perf_counter_ns()
        stats.cache_n, first_row = target.read_prompt(prompt)
        drafter.start(prompt)
        stats.prompt_n = len(prompt)
        stats.prompt_ms = (time.perf_counter_ns() - start) / 1e6
        models = (target, *drafter.models)
        decode_ns_before = sum(model.decode_ns for model in models)

        gen_start = time.perf_counter_ns()
        # The prompt's own pass judges the first token, as llama.cpp's server does: it costs no pass of its own and never
        # waits for a draft (an editor shows it at once). Speculation starts from the second.
        last, events, reason = first_token(target, first_row, config, rng, text, stats)
        drafter.advance([last])
        drafter.observe_target(first_row[0])
        yield from events
        message = ""
        while reason is None:
            if cancel is not None and cancel.is_set():
                reason = StopReason.CANCELLED
                break
            room = target.n_ctx - target.n_past - 1  # slots left after `last`
            if room < 0:
                reason = StopReason.CONTEXT_FULL
                message = f"The context is full ({target.n_ctx} tokens). Start a new conversation or raise the context size."
                break
            k = config.draft_cap(room, stats.predicted_n)
            draft, verdict, margins = self._step(last, k, room, config, rng, stats)

            events, reason = emitted_tokens(target, draft, verdict, margins, text, stats, config)
            yield from events
            last = verdict.token

        drafter.end()
        stats.predicted_ms = (time.perf_counter_ns() - gen_start) / 1e6
        stats.t_llama_ms = (sum(model.decode_ns for model in models) - decode_ns_before) / 1e6
        yield from closing_events(text, stats, reason, message)

    def check_fits(self, prompt: Sequence[int]) -> None:
        """A prompt that fills the context leaves no room for an answer: refused before anything is decoded."""
        if len(prompt) >= self.target.n_ctx:
            raise PromptTooLongError(
                f"The prompt is {len(prompt)} tokens but the context holds {self.target.n_ctx}, "
                "leaving no room for an answer. Shorten the prompt or raise the context size."
            )

    def warm(self, prompt: Sequence[int]) -> int:
        """Evaluate `prompt` into the caches without generating (an editor warming its context); tokens already cached."""
        self.check_fits(prompt)
        cached = self.target.prefill(prompt)
        if prompt:
            self.drafter.start(prompt)  # the draft model reads it too (all but the last token, as for a generation)
        return cached

    def _step(
        self, last: int, k: int, room: int, config: GenerationConfig, rng: np.random.Generator, stats: GenerationStats
    ) -> tuple[Draft, Verdict, np.ndarray | None]:
        """Draft up to k tokens, verify [last, *draft] in one target pass, keep the verdict, roll back the rest."""
        t0 = time.perf_counter_ns()
        draft = self.drafter.propose(k, config.draft_p_min, config.draft_sampling, rng)
        if draft.n_tokens > room:
            # A tree's fork takes cells of its own; with too few left, the main chain (at most k <= room) goes alone.
            # The drafter hears the settled tokens in advance() as always, and drops the fork's speculation then.
            draft.fork = None
        t1 = time.perf_counter_ns()
        n_past = self.target.n_past
        fork = draft.fork
        if fork is None:
            rows = self.target.decode([last, *draft.tokens], outputs=len(draft.tokens) + 1)
        else:
            rows = self.target.decode_tree([last, *draft.tokens[: fork.at]], draft.tokens[fork.at :], fork.tokens)
        t2 = time.perf_counter_ns()
        verdict = judge(draft, rows, config, rng)
        self.drafter.observe_target(rows[0])  # before anything decodes again: rows is llama.cpp's buffer
        margins = top2_margins(rows[verdict.rows(len(draft.tokens))]) if config.record_margins else None
        if fork is not None:
            on_fork = verdict.n_accepted - fork.at if verdict.branch == 1 else None
            self.target.settle_tree(n_past + 1 + fork.at, on_fork)
            stats.n_forks += 1
            stats.n_fork_accepted += verdict.branch
        self.target.truncate(n_past + 1 + verdict.n_accepted)
        self.drafter.advance([*verdict.accepted, verdict.token])
        t3 = time.perf_counter_ns()
        self.drafter.observe_step(draft.n_tokens + 1, (t2 - t1) / 1e6)
        if draft.choice is not None:
            stats.record_decision(draft.choice.label, draft.choice.predicted)
        stats.record_step(draft.n_tokens, verdict.n_accepted, (t1 - t0) / 1e6, (t3 - t1) / 1e6, (t2 - t1) / 1e6, draft.depth)
        return draft, verdict, margins


def first_token(target: Model, row: np.ndarray, config: GenerationConfig, rng: np.random.Generator, text: TextAssembler,
                stats: GenerationStats) -> tuple[int, list[TokenEvent], StopReason | None]:
    """The answer's first token, judged on the prompt's last row with no draft: the token, its events, and whether the
    answer ends there. The one-sequence loop and the batch scheduler share it."""
    nothing = Draft()
    verdict = judge(nothing, row, config, rng)
    margins = top2_margins(row) if config.record_margins else None
    events, reason = emitted_tokens(target, nothing, verdict, margins, text, stats, config)
    return verdict.token, events, reason


def emitted_tokens(target: Model, draft: Draft, verdict: Verdict, margins: np.ndarray | None, text: TextAssembler,
                   stats: GenerationStats, config: GenerationConfig) -> tuple[list[TokenEvent], StopReason | None]:
    """A verdict's tokens as events, in order, up to the first that ends the answer (end of generation, a stop string,
    max_tokens), and why it ended (None: it goes on). The one-sequence loop and the batch scheduler share it."""
    final_source = TokenSource.TARGET if not draft.tokens else (
        TokenSource.BONUS if verdict.n_accepted == draft.branch_length(verdict.branch) else TokenSource.CORRECTION
    )
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
    """The end of an answer: the text held back (what could have begun a stop string), then Finished. The one-sequence
    loop and the batch scheduler share it."""
    tail = "" if text.stopped else text.flush()
    held_back = [TokenEvent(-1, tail, TokenSource.TARGET, stats.n_steps, stats)] if tail else []
    return [*held_back, Finished(reason, stats, message, text.stop_word)]


def judge(draft: Draft, rows: np.ndarray, config: GenerationConfig, rng: np.random.Generator) -> Verdict:
    """The target's verdict on a draft from its verify rows: greedy at temperature 0, else the configured rule; under a
    grammar, the constrained target's (engine/grammar.py)."""
    if config.grammar is None:
        return _judge(draft, rows, config, rng)
    if draft.fork is not None:
        raise EngineError("A tree draft cannot be verified under a grammar; use another drafter.")
    verdict = _judge(draft, config.grammar.mask(rows, draft.tokens), config, rng)
    config.grammar.accept([*verdict.accepted, verdict.token])
    return verdict


def _judge(draft: Draft, rows: np.ndarray, config: GenerationConfig, rng: np.random.Generator) -> Verdict:
    greedy = config.sampling.greedy
    if draft.fork is not None:
        # Each branch's tokens are deterministic candidates: the target's own choice (argmax, or its sample from p) picks the path.
        if greedy:
            return verify_tree(draft, rows, lambda row: int(row.argmax()))
        return verify_tree(draft, rows, lambda row: distribution(row, config.sampling).sample(rng))
    if greedy:
        return verify_greedy(draft.tokens, rows)
    if config.verification == "sample-match":
        return verify_sample_match(draft.tokens, rows, config.sampling, rng)
    return verify_speculative(draft.tokens, draft.dists, rows, config.sampling, rng)


def top2_margins(rows: np.ndarray) -> np.ndarray:
    """Each row's best logit minus its second: how near a tie the target's choice was (the lossless tests' evidence)."""
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]
