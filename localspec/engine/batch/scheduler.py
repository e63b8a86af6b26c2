"""The decode loop, for one slot or many: every busy slot advances in one target pass per step (continuous batching).

A step: cancelled slots free their cells; the planner picks each generating
slot's draft; the draft model drafts them together (one pass per position);
then ONE target pass holds every generating slot's [last, d1..dK] and, in the
room a step's worth of time leaves, a chunk of each new prompt; each slot is
verified and rolled back on its own sequence. A request that arrives joins at
the next step, and its prompt never stalls the others for more than a step.
The pass that reads a prompt's last token judges its first answer token: it
waits for no draft. A request that brings its own one-sequence drafter (every
Decoder's does) runs in a scheduler of one slot and takes solo.py's step.

Each slot may use 1/N of the context (n_ctx over the slots), so no slot can take
the cells another needs; a finished slot keeps its cells as a prompt cache (a
cancelled one its prompt's), and a new request starts from the longest prefix any
slot holds, busy or not, sharing that slot's cells.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.engine import prompt_passes
from localspec.engine.answer import closing_events, emitted_tokens, first_token, judge, top2_margins
from localspec.engine.batch import prompt_cache
from localspec.engine.batch.drafting import BatchDraftModel, DraftOrder
from localspec.engine.batch.prefill import prefill_budget
from localspec.engine.batch.slot import Generation, Slot, SlotRequest
from localspec.engine.batch.solo import solo_step
from localspec.engine.drafters import registry
from localspec.engine.drafters.auto.choice import Choice
from localspec.engine.drafters.auto.costs import CostTable, calibrate
from localspec.engine.drafters.auto.planner import Planner, SlotOptions
from localspec.engine.drafters.base import Draft, Drafter, one_hot
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.errors import EngineError, PromptTooLongError
from localspec.engine.events import StopReason, TokenEvent
from localspec.engine.llama.model import Model
from localspec.engine.sampling import SamplingParams, make_rng
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.tokens import common_prefix
from localspec.engine.tuning import BATCH_CALIBRATION_SIZES


@dataclass
class _Step:
    slot: Slot
    choice: Choice
    draft: Draft
    pos0: int = 0  # the slot's cells before the pass: its [last, *draft] go from here


class BatchScheduler:
    def __init__(self, target: Model, draft: Model | None, n_slots: int, costs: CostTable | None = None, keep_cache: bool = False) -> None:
        """`keep_cache`: start from what the target's cache holds (one slot, as a one-sequence Decoder does), not empty."""
        if n_slots < 1:
            raise ValueError("a batch needs at least one slot")
        costs = costs or calibrate(target, draft, BATCH_CALIBRATION_SIZES)
        target.ensure_sequences(n_slots)
        if not keep_cache:
            target.clear_cache()
        if draft is not None:
            draft.ensure_sequences(n_slots)
            draft.clear_cache()
        self.target = target
        self.drafting = BatchDraftModel(draft) if draft is not None else None
        self.slots = [Slot(seq, target, draft) for seq in range(n_slots)]
        self.share = target.n_ctx // n_slots  # each slot's part of the context
        self.planner = Planner(costs, draft is not None)
        self._arrivals = 0

    @classmethod
    def alone(cls, target: Model) -> BatchScheduler:
        """One slot over the target's cache as it stands, whose requests bring their own drafter objects (SlotRequest.solo):
        a one-sequence Decoder's loop, and a server's single slot. The planner is never asked, so no costs are measured."""
        return cls(target, None, 1, CostTable(), keep_cache=True)

    # --- requests ---------------------------------------------------------------------

    @property
    def n_free(self) -> int:
        return sum(1 for slot in self.slots if not slot.busy)

    @property
    def busy(self) -> bool:
        return any(slot.busy for slot in self.slots)

    def check_fits(self, prompt: Sequence[int]) -> None:
        """A prompt must leave its slot room for an answer: refused before it takes a slot."""
        if not prompt:
            raise ValueError("the prompt must hold at least one token")
        if len(prompt) >= self.share and len(self.slots) == 1:
            raise PromptTooLongError(f"The prompt is {len(prompt)} tokens but the context holds {self.share}, leaving no room for an "
                                     "answer. Shorten the prompt or raise the context size.")
        if len(prompt) >= self.share:
            n = len(self.slots)
            raise PromptTooLongError(
                f"The prompt is {len(prompt)} tokens but a slot holds {self.share} (the {self.target.n_ctx}-token context "
                f"shared by {n} slots), leaving no room for an answer. Shorten the prompt, or give each slot a larger context."
            )

    def add(self, request: SlotRequest) -> Slot:
        """Take a free slot (prompt_cache.slot_for) and start the request there; it joins the batch at the next step."""
        prompt = list(request.prompt)
        self.check_fits(prompt)
        request.config.sampling.validate()
        if request.solo is not None and len(self.slots) > 1:
            raise ValueError("a request's own drafter object drafts for a scheduler's lone slot (BatchScheduler.alone)")
        role = registry.batch_role(request.drafter) if request.solo is None else None
        free = [slot for slot in self.slots if not slot.busy]
        if not free:
            raise EngineError("every slot is busy: wait for one to finish")
        slot = prompt_cache.slot_for(free, prompt[:-1])
        keep = prompt_cache.take_prefix(self.slots, slot, prompt)
        if self.drafting is not None and role == "model":
            self.drafting.sync(slot, prompt[:-1])
        rng, seed = make_rng(request.config.sampling.seed)
        stats = GenerationStats(drafter=request.drafter, draft_max=request.config.draft_max, prompt_n=len(prompt), cache_n=keep,
                                seed=None if request.config.sampling.greedy else seed)
        if role is not None:
            slot.lookup.start(prompt)  # every request's text joins the slot's memory, whichever drafter it runs
            slot.belief.new_answer()
            self.planner.start_answer()
        lookup = slot.lookup if role in ("lookup", "adaptive") else None
        self._arrivals += 1
        slot.last_used = self._arrivals
        slot.generation = Generation(SlotRequest(prompt, request.config, request.drafter, request.emit, request.fail, request.cancel,
                                                 request.solo), role, rng, stats, TextAssembler(request.config.stop),
                                     time.perf_counter_ns(), self._arrivals, lookup)
        slot.last = -1  # until the prompt's pass judges the first token
        return slot

    # --- one step -----------------------------------------------------------------------

    def step(self) -> None:
        """Advance every busy slot by one pass. A failed pass ends every request in it with the error."""
        try:
            self._step()
        except EngineError as exc:
            self.abort(exc)

    def abort(self, error: BaseException) -> None:
        """End every running request with `error` and empty the caches (after a failed pass, what they hold is unknown)."""
        for slot in self.slots:
            if slot.generation is not None:
                slot.job.request.fail(error)
                slot.generation = None
            self._free(slot)

    def _step(self) -> None:
        if len(self.slots) == 1 and self._solo_step(self.slots[0]):
            return
        for slot in self.slots:
            if slot.generation is not None and slot.generation.request.cancel.is_set():
                prompt = slot.job.prompt
                self._finish(slot, StopReason.CANCELLED)
                self._keep_prompt_only(slot, prompt)  # a client that left takes its answer's cells with it, at once
        generating = [slot for slot in self.slots if slot.busy and not slot.prefilling and self._may_generate(slot)]
        reading = sorted((slot for slot in self.slots if slot.prefilling), key=lambda slot: slot.job.arrival)
        if not generating and not reading:
            return
        step_start = time.perf_counter_ns()
        ns_before = self._decode_ns()

        k_limit = self.target.n_batch // max(1, len(generating)) - 1  # every slot's [last, draft] fits one pass
        options = [self._options(slot, k_limit) for slot in generating]
        choices = self.planner.plan(options)
        n_verify = sum(choice.k + 1 for choice in choices)
        n_batch = self.target.n_batch
        chunks = []
        if generating:
            budget = prefill_budget(self.planner.costs, n_verify, self.planner.step_ms(choices, options), n_batch)
            for slot in reading:
                if budget <= 0:
                    break
                chunk = slot.job.prompt[len(slot.cached) : len(slot.cached) + budget]
                chunks.append((slot, chunk))
                budget -= len(chunk)
        elif reading:  # a prompt alone in its pass, cut as prompt_passes says: its cells come out as a fresh read's
            slot, prompt = reading[0], reading[0].job.prompt
            chunks.append((slot, prompt[len(slot.cached) : prompt_passes.next_pass_end(len(slot.cached), len(prompt), n_batch)]))
        steps = self._drafts(generating, options, choices)
        draft_end = time.perf_counter_ns()

        entries: list[tuple[int, int, int, bool]] = []
        for step in steps:
            step.pos0 = len(step.slot.cached)
            entries += [(token, step.pos0 + i, step.slot.seq, True) for i, token in enumerate([step.slot.last, *step.draft.tokens])]
        n_verify = len(entries)  # a draft may stop short of its K (p_min)
        starts = [len(slot.cached) for slot, _ in chunks]
        for (slot, chunk), start in zip(chunks, starts):
            ends = start + len(chunk) == len(slot.job.prompt)  # the prompt's last token: its row judges the first
            entries += [(token, start + i, slot.seq, ends and i == len(chunk) - 1) for i, token in enumerate(chunk)]
        rows = self.target.decode_sequences(entries)  # the cells' record (Model.cells) takes every token in
        target_end = time.perf_counter_ns()
        spent = self._decode_ns() - ns_before  # the drafts' passes and this one: the step's llama time, counted before a slot can finish
        for step in steps:
            step.slot.job.llama_ns += spent
        if steps and not chunks:
            self.planner.observe_verify(n_verify, (target_end - draft_end) / 1e6)

        offset = 0
        for step in steps:
            n = len(step.draft.tokens) + 1
            self._settle(step, rows[offset : offset + n], (draft_end - step_start) / 1e6, (target_end - draft_end) / 1e6)
            offset += n
        for (slot, chunk), start in zip(chunks, starts):
            if not steps and len(chunks) == 1 and slot.canonical == start and prompt_passes.is_canonical(start, start + len(chunk),
                                                                                                          len(slot.job.prompt)):
                self.target.cells.canonical[slot.seq] = start + len(chunk)
        if self.drafting is not None:
            # The draft model reads along for `model` slots only: auto may never pick it, and prices the catch-up when it does.
            self.drafting.read([slot for slot, _ in chunks if slot.job.role == "model"])
        for slot, _ in chunks:
            if not slot.prefilling and slot.job.request.solo is not None:
                slot.job.request.solo.start(slot.job.prompt)  # its draft reads the prompt now, in the prompt's time
        now = time.perf_counter_ns()
        for slot, _ in chunks:
            if not slot.prefilling:
                slot.job.stats.prompt_ms = (now - slot.job.started_ns) / 1e6
                slot.job.generating_since_ns = now
                if slot.job.request.solo is not None:  # its llama time is taken over the answer, as its drafter's models decode too
                    slot.job.llama_ns = -_solo_decode_ns(self.target, slot.job.request.solo)
                self._first_token(slot, rows[offset : offset + 1])
                offset += 1
        if steps:
            self.planner.observe_overhead((time.perf_counter_ns() - step_start - (self._decode_ns() - ns_before)) / 1e6)

    def _solo_step(self, slot: Slot) -> bool:
        """A lone slot that its request's own drafter drafts, past its first token: its step (solo.py) without the batch's
        bookkeeping, which would add to the time per pass outside llama.cpp. False where the general path must act
        instead: nothing to generate, the request cancelled, or its context full."""
        generation = slot.generation
        if generation is None or generation.role is not None or slot.last < 0 or generation.request.cancel.is_set():
            return False
        room = self.share - len(slot.cached) - 1
        if room < 0:
            return False
        self._emit(slot, *solo_step(self.target, slot, room))
        return True

    def _first_token(self, slot: Slot, row: np.ndarray) -> None:
        """Judge and emit the answer's first token on the row of the prompt's last token (n_predict 0: none)."""
        generation = slot.job
        config = generation.request.config
        if config.max_tokens <= 0:  # the cache warmed; nothing to generate
            self._finish(slot, StopReason.MAX_TOKENS)
            return
        if generation.role not in ("plain", None):  # what auto learns from; plain decoding spares its pass over the row
            slot.belief.observe_target(row[0])
        slot.last, events, reason = first_token(self.target, row, config, generation.rng, generation.text, generation.stats)
        if generation.request.solo is not None:
            generation.request.solo.advance([slot.last])
            generation.request.solo.observe_target(row[0])
        else:
            slot.lookup.advance([slot.last])
        self._emit(slot, events, reason)

    def _emit(self, slot: Slot, events: list[TokenEvent], reason: StopReason | None) -> None:
        """Send a step's events; end the answer where they say it ends."""
        emit = slot.job.request.emit
        for event in events:
            emit(event)
        if reason is not None:
            self._finish(slot, reason)

    def _may_generate(self, slot: Slot) -> bool:
        """A slot whose prompt is read and first token judged: unless its share of the context is full, it generates."""
        if self.share - len(slot.cached) - 1 < 0:
            self._finish(slot, StopReason.CONTEXT_FULL, f"The context is full ({self.share} tokens). Start a new conversation or raise "
                                                        "the context size." if len(self.slots) == 1 else
                         f"The slot's context is full ({self.share} tokens). Start a new conversation, or give each slot a larger context.")
            return False
        return True

    def _options(self, slot: Slot, k_limit: int) -> SlotOptions:
        generation = slot.job
        assert generation.role is not None  # solo slots take solo_step
        config, stats = generation.request.config, generation.stats
        room = self.share - len(slot.cached) - 1
        cap = config.draft_cap(room, stats.predicted_n, k_limit)
        lookup = generation.lookup.lookup(cap) if generation.lookup is not None and cap else Lookup()
        pending = len(slot.cached) + 1 - common_prefix(slot.draft_cached, slot.cached)  # what the draft must read first
        return SlotOptions(generation.role, cap, lookup, pending, slot.belief)  # no draft model: the planner drafts plain

    def _drafts(self, generating: list[Slot], options: list[SlotOptions], choices: list[Choice]) -> list[_Step]:
        """Each slot's draft: lookup runs as they are, the draft model's (a hybrid's continuation too, after the lookup
        tokens it reads first) all in one batched drafting."""
        orders = []
        for slot, option, choice in zip(generating, options, choices):
            if choice.model_k:
                slot.belief.asked(option.pending)
                orders.append(DraftOrder(slot, choice.model_k, *self._model_sampling(slot), option.lookup.tokens[: choice.lookup_k]))
        drafted = self.drafting.draft(orders) if self.drafting is not None and orders else {}
        if self.drafting is not None:
            for n_tokens, ms in self.drafting.passes:
                self.planner.observe_draft_pass(n_tokens, ms)
        steps = []
        for slot, option, choice in zip(generating, options, choices):
            generation = slot.job
            slot.belief.looked(option.lookup)
            self.planner.watch_lookup(generation.shadows, option.lookup, slot.belief.confidence.unsure)
            sampling, run = generation.request.config.draft_sampling, option.lookup.tokens[: choice.lookup_k]
            if not choice.model_k:
                draft = Draft.deterministic(option.lookup.tokens[: choice.k], sampling)
            elif self._model_sampling(slot)[1] is None:  # greedy drafts: one-hot, where the target samples
                draft = Draft.deterministic([*run, *drafted[slot.seq].tokens], sampling)
            else:
                continuation = drafted[slot.seq]
                draft = Draft(run + continuation.tokens, one_hot(run) + continuation.dists)
            steps.append(_Step(slot, choice, draft))
        return steps

    @staticmethod
    def _model_sampling(slot: Slot) -> tuple[float, SamplingParams | None, np.random.Generator]:
        """How the draft model drafts for the slot: its p_min; greedily (None) or sampled from q; the slot's rng. auto's
        drafts are greedy at T > 0 too, judged one draw a position, so a seed repeats whatever it chose (AutoDrafter)."""
        generation = slot.job
        config = generation.request.config
        return config.draft_p_min, None if generation.role == "adaptive" else config.draft_sampling, generation.rng

    def _settle(self, step: _Step, rows: np.ndarray, draft_ms: float, verify_ms: float) -> None:
        """Verify one slot's draft on its rows, roll its sequence back past the rejection, emit its tokens."""
        slot, draft = step.slot, step.draft
        generation = slot.job
        config, stats = generation.request.config, generation.stats
        verdict = judge(draft, rows, config, generation.rng)
        if generation.role != "plain":
            slot.belief.observe_target(rows[0])
        settled = [*verdict.accepted, verdict.token]
        slot.belief.stepped(self.planner.costs, step.choice.k if step.choice.source == "ngram" else 0, settled)
        margins = top2_margins(rows[verdict.rows(len(draft.tokens))]) if config.record_margins else None
        keep = step.pos0 + 1 + verdict.n_accepted
        if keep < len(slot.cached):  # the pass put [last, *draft] in: the rejected draft tokens go
            self.target.forget(slot.seq, keep)
        slot.last = verdict.token
        stats.record_step(len(draft.tokens), verdict.n_accepted, draft_ms, verify_ms, verify_ms, len(draft.tokens))
        if generation.role == "adaptive":
            stats.record_decision(step.choice.label, step.choice.predicted)
        if step.choice.model_k:
            self.planner.observe_model(step.choice, slot.belief.asked_class, len(draft.tokens), verdict.n_accepted)
        slot.lookup.advance(settled)
        generation.shadows = self.planner.settle(generation.shadows, settled, slot.belief.copy_effect)
        self._emit(slot, *emitted_tokens(self.target, draft, verdict, margins, generation.text, stats, config))

    def release(self, slot: Slot) -> None:
        """Let go of a slot's request with no more events (its caller stopped listening); its cells stay, as a cache."""
        slot.generation = None

    def _finish(self, slot: Slot, reason: StopReason, message: str = "") -> None:
        """End the slot's generation: the text held back, then Finished. Its cells stay, as a prompt cache."""
        generation = slot.job
        stats = generation.stats
        if generation.request.solo is not None:
            generation.request.solo.end()
            if generation.generating_since_ns:
                generation.llama_ns += _solo_decode_ns(self.target, generation.request.solo)
        if generation.generating_since_ns:
            stats.predicted_ms = (time.perf_counter_ns() - generation.generating_since_ns) / 1e6
        stats.t_llama_ms = generation.llama_ns / 1e6
        slot.generation = None
        for event in closing_events(generation.text, stats, reason, message):
            generation.request.emit(event)

    def _keep_prompt_only(self, slot: Slot, prompt: Sequence[int]) -> None:
        """Drop the slot's cells past its prompt (what it answered); the prompt's stay as its cache, as a finished slot's do.
        Editors cancel the request in flight at every keystroke (llama.vim, llama.vscode), and the next one shares the file:
        freeing the prompt too would make every request after a cancelled one read the whole file again."""
        prompt_cache.cut(slot, common_prefix(slot.cached, prompt))
        if self.drafting is not None:
            self.drafting.sync(slot, slot.cached)  # the draft's cells past what the target keeps go too

    def _free(self, slot: Slot) -> None:
        self.target.forget(slot.seq)
        if self.drafting is not None:
            self.drafting.model.forget(slot.seq)

    def _decode_ns(self) -> int:
        return self.target.decode_ns + (self.drafting.model.decode_ns if self.drafting is not None else 0)


def _solo_decode_ns(target: Model, drafter: Drafter) -> int:
    """The decode time so far of the target and of every model a one-sequence drafter decodes with."""
    return target.decode_ns + sum(model.decode_ns for model in drafter.models)
