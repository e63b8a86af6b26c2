"""The decode loop, for one slot or many: every busy slot advances in one target pass per step (continuous batching).

A step: cancelled slots free their cells; each drafter proposes for all the
generating slots it serves at once (a draft model in one pass per position,
auto choosing for its slots together); then ONE target pass holds every
generating slot's [last, d1..dK] and, in the room a step's worth of time
leaves, a chunk of each new prompt; each slot is verified and rolled back on
its own sequence, and its drafter hears what it settled. A request that arrives
joins at the next step, and its prompt never stalls the others for more than a
step. The pass that reads a prompt's last token judges its first answer token:
it waits for no draft. One step body serves one slot or many, and bills each
pass's llama time to the slots generating in it; a tree's fork takes the
sequence past the slots' (llama/model.py lays it out), where the target holds one.

Each slot may use 1/N of the context (n_ctx over the slots), so no slot can take
the cells another needs; a finished slot keeps its cells as a prompt cache (a
cancelled one its prompt's), and a new request starts from the longest prefix any
slot holds, busy or not, sharing that slot's cells.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.engine import prompt_passes
from localspec.engine.answer import closing_events, emitted_tokens, first_token, judge, top2_margins
from localspec.engine.batch import prompt_cache
from localspec.engine.batch.prefill import prefill_budget
from localspec.engine.batch.slot import Generation, Slot, SlotRequest
from localspec.engine.drafters import registry
from localspec.engine.drafters.base import Ask, Decoding, Draft, Drafter, Prompt, PromptRead, StepCost, TargetPass, TargetRow
from localspec.engine.errors import EngineError, PromptTooLongError
from localspec.engine.events import StopReason, TokenEvent
from localspec.engine.llama.entry import Entry
from localspec.engine.llama.model import Model, TreeFork
from localspec.engine.pass_costs import CostTable, calibrate
from localspec.engine.sampling import Draws
from localspec.engine.stats import GenerationStats
from localspec.engine.text import TextAssembler
from localspec.engine.tokens import common_prefix
from localspec.engine.tuning import BATCH_CALIBRATION_SIZES


@dataclass
class _Step:
    slot: Slot
    drafter: Drafter
    draft: Draft
    pos0: int = 0  # the slot's cells before the pass: its [last, *draft] go from here


class BatchScheduler:
    def __init__(self, target: Model, n_slots: int, costs: CostTable | None = None, keep_cache: bool = False) -> None:
        """`costs`: the target's pass costs, which size the prompt chunks riding beside the slots generating (timed here
        when not given and several slots can meet in a pass); `keep_cache`: start from what the target's cache holds
        (one slot, as a one-sequence Decoder does), not empty."""
        if n_slots < 1:
            raise ValueError("a batch needs at least one slot")
        target.ensure_sequences(n_slots)
        if not keep_cache:
            target.clear_cache()
        self.target = target
        self._costs = costs
        self.slots = [Slot(seq, target) for seq in range(n_slots)]
        self.fork_seq = n_slots  # the sequence a tree's second branch takes, where the target holds one past the slots
        self.share = target.n_ctx // n_slots  # each slot's part of the context
        self._arrivals = 0

    @property
    def costs(self) -> CostTable:
        """The target's pass costs at batch sizes, which size a prompt's chunks beside slots generating: timed when first
        needed where not given (a lone slot never reads a prompt beside an answer, so it never waits for them)."""
        if self._costs is None:
            self._costs = calibrate(self.target, None, BATCH_CALIBRATION_SIZES)
        return self._costs

    @classmethod
    def alone(cls, target: Model) -> BatchScheduler:
        """One slot over the target's cache as it stands: a one-sequence Decoder's loop, and a server's single slot."""
        return cls(target, 1, keep_cache=True)

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
        if len(prompt) >= self.share:
            raise PromptTooLongError(f"The prompt is {len(prompt)} tokens but the context holds {self.share} for it (a slot holds "
                                     f"{self.share} of its {self.target.n_ctx} tokens), leaving no room for an answer. Shorten the "
                                     "prompt or raise the context size.")

    def add(self, request: SlotRequest) -> Slot:
        """Take a free slot (prompt_cache.slot_for) and start the request there; it joins the batch at the next step."""
        prompt = Prompt(request.prompt, request.config.conversation)
        self.check_fits(prompt)
        request.config.sampling.validate()
        free = [slot for slot in self.slots if not slot.busy]
        if not free:
            raise EngineError("every slot is busy: wait for one to finish")
        slot = prompt_cache.slot_for(free, prompt[:-1])
        keep = prompt_cache.take_prefix(self.slots, slot, prompt)
        config = request.config
        draws = Draws.of(config.sampling.seed, keyed=config.rule == "keyed")
        # The seed that writes this answer again: speculative sampling's random one does not (a given seed draws keyed).
        seed = None if config.sampling.greedy or not (draws.keyed or config.sampling.seed is not None) else draws.seed
        stats = GenerationStats(drafter=request.drafter.name, draft_max=config.draft_max, prompt_n=len(prompt), cache_n=keep, seed=seed)
        request.drafter.begin(slot.seq, prompt)
        self._arrivals += 1
        slot.last_used = self._arrivals
        slot.generation = Generation(SlotRequest(prompt, request.config, request.drafter, request.emit, request.fail, request.cancel),
                                     draws, stats, TextAssembler(request.config.stop), time.perf_counter_ns(), self._arrivals)
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
        """End every running request with `error` and empty the caches, its drafters' models' too (after a failed pass,
        what they hold is unknown; a drafter's next begin() finds its sequence empty)."""
        models = self._models()
        for slot in self.slots:
            if slot.generation is not None:
                slot.job.request.fail(error)
                slot.generation = None
            for model in models:
                model.forget(slot.seq)

    def _step(self) -> None:
        for slot in self.slots:
            if slot.generation is not None and slot.generation.request.cancel.is_set():
                prompt = slot.job.prompt
                self._finish(slot, StopReason.CANCELLED)
                self._keep_prompt_only(slot, prompt)  # a client that left takes its answer's cells with it, at once
        generating: list[Slot] = []
        reading: list[Slot] = []
        for slot in self.slots:
            if slot.generation is not None:
                if slot.prefilling:
                    reading.append(slot)
                elif self._may_generate(slot):
                    generating.append(slot)
        reading.sort(key=lambda slot: slot.job.arrival)
        if not generating and not reading:
            return
        step_start = time.perf_counter_ns()
        models = self._models()
        ns_before = _decode_ns(models)
        measured_before = {id(drafter): drafter.measured().ns for drafter in self._drafters(generating)}

        steps = self._drafts(generating)
        draft_end = time.perf_counter_ns()
        entries: list[Entry] = []
        fork: TreeFork | None = None
        for step in steps:
            step.pos0 = len(step.slot.cached)
            entries += [Entry(token, step.pos0 + i, step.slot.seq, True) for i, token in enumerate([step.slot.last, *step.draft.tokens])]
            if step.draft.fork is not None:  # _fitted kept it: its branch goes on the fork's sequence
                fork = TreeFork(step.slot.seq, self.fork_seq, step.pos0 + 1 + step.draft.fork.at, step.draft.fork.tokens)
        n_verify = sum(step.draft.n_tokens + 1 for step in steps)  # a fork's tokens too
        chunks = self._chunks(reading, n_verify, (draft_end - step_start) / 1e6 if steps else None)
        starts = [len(slot.cached) for slot, _ in chunks]
        for (slot, chunk), start in zip(chunks, starts):
            ends = start + len(chunk) == len(slot.job.prompt)  # the prompt's last token: its row judges the first
            entries += [Entry(token, start + i, slot.seq, ends and i == len(chunk) - 1) for i, token in enumerate(chunk)]
        rows = self.target.decode_sequences(entries, fork)  # the cells' record (Model.cells) takes every token in
        seen = TargetPass(entries)
        for drafter in self._drafters([step.slot for step in steps] + [slot for slot, _ in chunks]):
            drafter.observe(seen)
        target_end = time.perf_counter_ns()

        offset = 0
        settled = []
        for step in steps:
            n = step.draft.n_tokens + 1
            settled.append((step.slot, self._settle(step, rows[offset : offset + n], (draft_end - step_start) / 1e6,
                                                    (target_end - draft_end) / 1e6)))
            offset += n
        self._bill(steps, models, ns_before, measured_before)
        # A pass that verified drafts alone teaches the drafters that price steps what it cost; before any answer ends
        # (its events come last), since a drafter keeps what it learned when its answer ends.
        if steps and not chunks:
            cost = StepCost(n_verify, (target_end - draft_end) / 1e6, (time.perf_counter_ns() - step_start - (target_end - draft_end)) / 1e6)
            for drafter in self._drafters([step.slot for step in steps]):
                drafter.observe(cost)
        for slot, (events, reason) in settled:
            self._emit(slot, events, reason)
        for (slot, chunk), start in zip(chunks, starts):
            if not steps and len(chunks) == 1 and slot.canonical == start and prompt_passes.is_canonical(start, start + len(chunk),
                                                                                                          len(slot.job.prompt)):
                self.target.mark_read(slot.seq, start + len(chunk))
            slot.job.request.drafter.observe(PromptRead(slot.seq, len(slot.cached)))  # a drafter's model reads along, in the prompt's time
        now = time.perf_counter_ns()
        for slot, _ in chunks:
            if not slot.prefilling:
                slot.job.stats.prompt_ms = (now - slot.job.started_ns) / 1e6
                slot.job.generating_since_ns = now
                self._first_token(slot, rows[offset : offset + 1])
                offset += 1

    @staticmethod
    def _drafters(slots: Sequence[Slot]) -> list[Drafter]:
        """The drafters these slots run, each once (one object may serve several slots)."""
        return list({id(slot.job.request.drafter): slot.job.request.drafter for slot in slots}.values())

    @staticmethod
    def _bill(steps: Sequence[_Step], models: Sequence[Decoding], ns_before: int, measured_before: dict[int, Mapping[str, int]]) -> None:
        """The step's llama time (every pass from its drafts to its drafters' accepts), and each drafter's own measured
        work in it, go to every slot that generated in it: slots sharing a pass share its time, as a lone slot has it all."""
        spent = _decode_ns(models) - ns_before
        for step in steps:
            job = step.slot.job
            job.llama_ns += spent
            before = measured_before.get(id(step.drafter), {})
            for name, ns in step.drafter.measured().ns.items():
                job.drafter_ns[name] = job.drafter_ns.get(name, 0) + ns - before.get(name, 0)

    def _drafts(self, generating: list[Slot]) -> list[_Step]:
        """Each slot's draft: the text its grammar forces, then what its drafter proposes from there, every drafter for all
        its slots at once (a draft model in one batched drafting). A tree's fork takes the target's second sequence: only
        a lone slot's keeps it, where its cells have room for it."""
        k_limit = self.target.n_batch // max(1, len(generating)) - 1  # every slot's [last, draft] fits one pass
        if self.target.draft_limit is not None:  # and its rejected tokens can drop (llama/memory.py)
            k_limit = min(k_limit, self.target.draft_limit)
        asks = {slot.seq: self._ask(slot, k_limit) for slot in generating}
        groups: dict[int, tuple[Drafter, list[Slot]]] = {}
        for slot in generating:
            drafter = slot.job.request.drafter
            groups.setdefault(id(drafter), (drafter, []))[1].append(slot)
        drafts: dict[int, Draft] = {}
        for drafter, slots in groups.values():
            for slot, draft in zip(slots, drafter.propose([asks[slot.seq] for slot in slots])):
                ask = asks[slot.seq]
                forked = any(kept.fork is not None for kept in drafts.values())
                drafts[slot.seq] = self._fitted(slot, draft.after_forced(ask.after, ask.sampling), forked)
        return [_Step(slot, slot.job.request.drafter, drafts[slot.seq]) for slot in generating]

    def _fitted(self, slot: Slot, draft: Draft, forked: bool) -> Draft:
        """The draft without its tree's fork unless the fork may go in this step's pass: no other slot's fork took it
        (`forked`), the target holds a sequence past the slots' (the fork's) of an attention cache, and the slot's cells
        have room for both branches. Without it the main chain goes alone, as in several slots, where the doors refuse a
        drafter without Supports.SLOTS; the drafter drops the fork's speculation in accept()."""
        if draft.fork is not None and (forked or not (self.target.n_seq > self.fork_seq and self.target.forks
                                                       and draft.n_tokens <= self.share - len(slot.cached) - 1)):
            draft.fork = None
        return draft

    def _ask(self, slot: Slot, k_limit: int) -> Ask:
        """What the slot's drafter is asked for: K tokens after the text its grammar forces (a drafter that cannot draft
        from the end of that text is asked for none where there is some)."""
        generation = slot.job
        config, drafter = generation.request.config, generation.request.drafter
        room = config.draft_room(self.share - len(slot.cached) - 1, generation.stats.predicted_n, k_limit)
        row = registry.DRAFTERS.get(drafter.name)
        drafts = row is None or row.drafts
        forced = config.grammar.forced(room) if config.grammar is not None and drafts else []
        continues = row is not None and registry.Supports.CONTINUES in row.supports
        k = min(config.draft_max, room - len(forced)) if continues or not forced else 0
        return Ask(slot.seq, k, config.draft_p_min, config.draft_sampling, generation.draws, generation.stats.predicted_n, forced)

    def _chunks(self, reading: list[Slot], n_verify: int, draft_ms: float | None) -> list[tuple[Slot, Sequence[int]]]:
        """The prompt tokens this pass reads: beside slots generating, as much as a step's worth of time allows
        (prefill.py), in arrival order; alone, a prompt's next pass as prompt_passes cuts it, so its cells come out as a
        fresh read's."""
        chunks: list[tuple[Slot, Sequence[int]]] = []
        if not reading:
            return chunks
        if draft_ms is not None:
            budget = prefill_budget(self.costs, n_verify, draft_ms + self.costs.verify(n_verify), self.target.n_batch)
            for slot in reading:
                if budget <= 0:
                    break
                chunk = slot.job.prompt[len(slot.cached) : len(slot.cached) + budget]
                chunks.append((slot, chunk))
                budget -= len(chunk)
        elif reading:
            slot, prompt = reading[0], reading[0].job.prompt
            chunks.append((slot, prompt[len(slot.cached) : prompt_passes.next_pass_end(len(slot.cached), len(prompt), self.target.n_batch)]))
        return chunks

    def _first_token(self, slot: Slot, row: np.ndarray) -> None:
        """Judge and emit the answer's first token on the row of the prompt's last token (n_predict 0: none)."""
        generation = slot.job
        config, drafter = generation.request.config, generation.request.drafter
        if config.max_tokens <= 0:  # the cache warmed; nothing to generate
            self._finish(slot, StopReason.MAX_TOKENS)
            return
        drafter.observe(TargetRow(slot.seq, row[0]))
        slot.last, events, reason = first_token(self.target, row, config, generation.draws, generation.text, generation.stats)
        drafter.accept(slot.seq, [slot.last])
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
                                                        "the context size.")
            return False
        return True

    def _settle(self, step: _Step, rows: np.ndarray, draft_ms: float, verify_ms: float) -> tuple[list[TokenEvent], StopReason | None]:
        """Verify one slot's draft on its rows and roll its sequence back past the rejection: the tokens to emit, and
        whether the answer ends."""
        slot, draft = step.slot, step.draft
        generation = slot.job
        config, stats, drafter = generation.request.config, generation.stats, generation.request.drafter
        verdict, judged = judge(draft, rows, config, generation.draws, stats.predicted_n)
        drafter.observe(TargetRow(slot.seq, rows[0]))  # before anything decodes again: rows is llama.cpp's buffer
        margins = top2_margins(judged[verdict.rows(len(draft.tokens))]) if config.record_margins else None
        if draft.fork is not None:  # the branch the verdict took stays in the slot's sequence; the other goes
            self.target.settle_tree(TreeFork(slot.seq, self.fork_seq, step.pos0 + 1 + draft.fork.at, draft.fork.tokens),
                                    verdict.n_accepted - draft.fork.at if verdict.branch == 1 else None)
            stats.n_forks += 1
            stats.n_fork_accepted += verdict.branch
        keep = step.pos0 + 1 + verdict.n_accepted
        if self.target.forget(slot.seq, keep) != keep:  # the pass put [last, *draft] in: the rejected draft tokens go
            raise EngineError(f"{self.target.path.name} could not roll back a draft of {len(draft.tokens)} tokens")
        slot.last = verdict.token
        stats.record_step(draft.n_tokens, verdict.n_accepted, draft_ms, verify_ms, verify_ms, draft.depth)
        drafter.accept(slot.seq, [*verdict.accepted, verdict.token])
        emitted_before = stats.predicted_n
        events, reason = emitted_tokens(self.target, draft, verdict, margins, generation.text, stats, config)
        emitted = stats.predicted_n - emitted_before  # an end of generation or max_tokens may cut the step's tokens
        forced_kept = min(draft.forced, verdict.n_accepted, emitted)
        if draft.forced:
            stats.record_forced(draft.forced, forced_kept)
        if draft.choice is not None:  # with the tokens the step emitted past the forced ones (expected: all of those kept)
            stats.record_decision(draft.choice.label, draft.choice.predicted + draft.forced, draft_ms, emitted - forced_kept)
        return events, reason

    def release(self, slot: Slot) -> None:
        """Let go of a slot's request with no more events (its caller stopped listening); its cells stay, as a cache."""
        slot.generation = None

    def _finish(self, slot: Slot, reason: StopReason, message: str = "") -> None:
        """End the slot's generation: the text held back, then Finished. Its cells stay, as a prompt cache."""
        generation = slot.job
        stats = generation.stats
        generation.request.drafter.end(slot.seq)
        if generation.generating_since_ns:
            stats.drafter_ms = {name: ns / 1e6 for name, ns in generation.drafter_ns.items()}
            stats.predicted_ms = (time.perf_counter_ns() - generation.generating_since_ns) / 1e6
        stats.t_llama_ms = generation.llama_ns / 1e6
        slot.generation = None
        for event in closing_events(generation.text, stats, reason, message):
            generation.request.emit(event)

    def _keep_prompt_only(self, slot: Slot, prompt: Sequence[int]) -> None:
        """Drop the slot's cells past its prompt (what it answered); the prompt's stay as its cache, as a finished slot's do.
        Editors cancel the request in flight at every keystroke (llama.vim, llama.vscode), and the next one shares the file:
        freeing the prompt too would make every request after a cancelled one read the whole file again. A drafter's
        model cuts its own cells back when its sequence next begins."""
        prompt_cache.cut(slot, common_prefix(slot.cached, prompt))

    def _models(self) -> list[Decoding]:
        """The target and every model the busy slots' drafters decode with: whose decode time is the step's llama time."""
        models: list[Decoding] = [self.target]
        for slot in self.slots:
            if slot.generation is not None:
                models += [model for model in slot.generation.request.drafter.models if model not in models]
        return models


def _decode_ns(models: Sequence[Decoding]) -> int:
    return sum(model.decode_ns for model in models)
