"""A loaded pair, ready to generate: what the CLI, the bench and the app hold on to.

Loading checks the pair before anything is generated, and every drafter (plain
decoding included) shares the same loaded target, so they can be interleaved
and compared on one set of weights. Each drafter is built once and kept, with
what it learns; the same object drafts for one slot or for a batch of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from localspec.engine import defaults
from localspec.engine.batch.scheduler import BatchScheduler
from localspec.engine.decode import Decoder
from localspec.engine.drafters import registry
from localspec.engine.drafters.auto import cost_cache
from localspec.engine.drafters.base import Drafter, DraftSetting
from localspec.engine.drafters.self_draft import cached_self_draft
from localspec.engine.errors import DrafterChoiceError, EngineError, LoadCancelled
from localspec.engine.llama.eagle3_head import Eagle3File
from localspec.engine.llama.gguf_file import architecture
from localspec.engine.llama.model import Model, ModelConfig
from localspec.engine.llama.mtp_head import mtp_layers
from localspec.engine.pair_check import EAGLE3_ARCHITECTURE, TokenizerComparison, check_pair, compare_tokenizers
from localspec.engine.pass_costs import CostTable, calibrate
from localspec.engine.tuning import BATCH_CALIBRATION_SIZES


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    draft: Path | None = None
    n_ctx: int = defaults.N_CTX
    target_gpu_layers: int | None = None
    draft_gpu_layers: int | None = None
    n_threads: int | None = None
    self_draft_dir: Path | None = None  # where `--drafter self` keeps the drafts it cuts from targets
    self_draft_layers: int | None = None  # blocks such a draft keeps (None: a quarter)
    self_draft_floor: int = 1  # the fewest it may keep: a hybrid's cut needs a block that attends (the memory plan's word)
    # The self-draft's GPU layers. Only a memory plan that counted it may put it there (see plan_memory's
    # self_draft); otherwise it stays on the CPU, where it cannot take GPU memory the plan gave the others.
    self_draft_gpu_layers: int = 0
    cost_cache_dir: Path | None = None  # where auto keeps the costs it measured, per pair and machine (None: measured each load)
    target_devices: tuple[int, ...] | None = None  # ModelConfig.devices for the target (and its self-draft)
    draft_devices: tuple[int, ...] | None = None


class Engine:
    def __init__(self, config: EngineConfig, on_stage: Callable[[str], object] | None = None, cancel: threading.Event | None = None) -> None:
        """Load the target, then the draft, then check the pair; `on_stage` hears each step, `cancel` is checked between them."""
        self.config = config
        report = on_stage or (lambda _stage: None)
        report("loading the target")
        self.target = Model(config.target, ModelConfig(config.target_gpu_layers, config.n_ctx, n_threads=config.n_threads,
                                                       devices=config.target_devices), role="target", cancel=cancel)
        self.draft: Model | None = None
        # How the draft's tokenizer compares with the target's: where it differs, only a drafter that
        # drafts through text (the registry's any_vocab rows) can run it.
        self.tokenizers = TokenizerComparison()
        self.eagle3: Eagle3File | None = None  # the pair's EAGLE-3 head, where its draft is one: the drafter loads it
        self._self_draft: Model | None = None
        try:
            if config.draft is not None and architecture(config.draft) == EAGLE3_ARCHITECTURE:
                self.eagle3 = Eagle3File(config.draft, config.draft_gpu_layers)
            elif config.draft is not None:
                self._check_cancel(cancel)
                report("loading the draft")
                self.draft = Model(config.draft, ModelConfig(config.draft_gpu_layers, config.n_ctx, n_threads=config.n_threads,
                                                                    devices=config.draft_devices), role="draft", cancel=cancel)
                self._check_cancel(cancel)
                report("checking the pair")
                self.tokenizers = compare_tokenizers(self.target.vocab, self.draft.vocab)
        except BaseException:
            self.close()
            raise
        self.batch_costs: CostTable | None = None  # the slots' shared costs, once batch() opened several
        self._n_slots = 1
        self._building_stage: Callable[[str], object] = lambda _stage: None  # who hears a drafter's building (decoder())
        self._let_drafters_go()
        self.plain = self.decoder("none")

    @property
    def tokenizers_differ(self) -> str:
        return self.tokenizers.difference

    @property
    def tokenizers_tolerated(self) -> str:
        """A difference llama.cpp refuses that the check accepted, and why (pair_check.py)."""
        return self.tokenizers.tolerated

    @property
    def drafting_note(self) -> str:
        """Why this pair's target verifies shorter drafts than asked (its memory: llama/memory.py), and whether its draft
        drafts through text (another tokenizer); empty where neither. The command line, the server and the app say it once, at load."""
        reason = self.target.memory.reason
        notes = [f"{self.target.path.name}: {reason}"] if reason else []
        if self.tokenizers_differ and self.draft is not None:
            notes.append(f"{self.draft.path.name}: {registry.bridge_note(self.tokenizers_differ)}")
        if self.tokenizers_tolerated and self.draft is not None:
            notes.append(f"{self.draft.path.name} drafts natively: {self.tokenizers_tolerated}")
        return "; ".join(notes)

    @property
    def mtp_layers(self) -> int:
        """The MTP layers the target keeps (the mtp drafter's head; 0: none)."""
        return mtp_layers(self.target)

    @property
    def offers(self) -> frozenset[registry.Part]:
        """What this pair offers the drafters beside its target (registry.Part): which of them can run on it."""
        return self.parts.offers

    @property
    def parts(self) -> registry.PairParts:
        return registry.PairParts.offered(self.draft is not None, not self.tokenizers_differ, self.mtp_layers > 0, self.eagle3 is not None)

    @property
    def speculative(self) -> Decoder:
        """The draft model's decoder (plain decoding when no draft model was loaded)."""
        return self.decoder("model") if self.draft is not None else self.plain

    def drafter(self, name: str) -> Drafter:
        """By name (the registry's); each is made on first use and kept, learned costs included."""
        if name not in self._drafters:
            spec = registry.spec(name)
            self.target.ensure_sequences(max(spec.target_sequences, self._n_slots))
            self._drafters[name] = spec.build(self)
        return self._drafters[name]

    def has_decoder(self, drafter: str) -> bool:
        """Whether the named drafter's decoder is built (building one may time the machine's passes first)."""
        return drafter in self._decoders

    def decoder(self, drafter: str, on_stage: Callable[[str], object] | None = None) -> Decoder:
        """One sequence's generations with the named drafter (kept, as the drafter is); `on_stage` hears what building it
        waits on (auto's first timing of this machine's passes)."""
        if drafter not in self._decoders:
            self._building_stage = on_stage or (lambda _stage: None)
            try:
                self._decoders[drafter] = Decoder(self.target, self.drafter(drafter))
            finally:
                self._building_stage = lambda _stage: None
        return self._decoders[drafter]

    def batch(self, n_slots: int, costs: CostTable | None = None) -> BatchScheduler:
        """Several generations at once (a server's slots) on this pair. The caches reopen with a sequence per slot,
        empty, and the batch costs are timed (unless given): the drafters are made anew for the slots, and the
        one-sequence decoders are not to be used after this."""
        self._let_drafters_go()
        self._n_slots = n_slots
        for model in (self.draft, self._self_draft):
            if model is not None:
                model.ensure_sequences(n_slots)
                model.clear_cache()
        self.batch_costs = costs or calibrate(self.target, self.draft, BATCH_CALIBRATION_SIZES)
        return BatchScheduler(self.target, n_slots, self.batch_costs)

    def alone(self) -> BatchScheduler:
        """The decode loop with one slot over the target's cache as it stands, each request drafted by its drafter's
        object (the decoders'): a server's single slot, which runs every drafter."""
        return BatchScheduler.alone(self.target)

    @property
    def setting(self) -> DraftSetting:
        return DraftSetting(self.batch_costs, self.config.cost_cache_dir, self._building_stage)

    def known_plain_ms(self) -> float | None:
        """The target's one-token pass as this pair measured it on this machine before (auto's cost cache), or None
        where it never ran here: the plain baseline a later load takes instead of timing plain decoding again."""
        if self.config.cost_cache_dir is None:
            return None
        table = cost_cache.load(cost_cache.cache_file(self.config.cost_cache_dir, self.target, self.draft))
        return table.target.ms.get(1) if table is not None else None

    @overload
    def part(self, part: Literal[registry.Part.EAGLE3_HEAD]) -> Eagle3File: ...

    @overload
    def part(self, part: Literal[registry.Part.DRAFT_MODEL, registry.Part.TARGET_TOKENIZER, registry.Part.SELF_DRAFT,
                                 registry.Part.MTP_LAYERS]) -> Model: ...

    def part(self, part: registry.Part) -> Model | Eagle3File:
        """The part a drafter requires, by name (DraftSources.part); a clear error where the pair lacks it."""
        Part = registry.Part
        if part is Part.EAGLE3_HEAD:
            return self._eagle3_head()
        if part is Part.SELF_DRAFT:
            return self._cut_self_draft()
        if part is Part.MTP_LAYERS:  # the head says where the target keeps none (mtp_head.py)
            return self.target
        return self._draft_model() if part is Part.TARGET_TOKENIZER else self._any_draft()

    def _draft_model(self) -> Model:
        if self.tokenizers_differ:
            assert self.draft is not None
            raise DrafterChoiceError(f"{self.draft.path.name} has another tokenizer than the target ({self.tokenizers_differ}), so its "
                              f"tokens cannot be verified as they are: run it with --drafter {' or '.join(registry.THROUGH_TEXT)}, which "
                              "drafts through text, or auto.")
        return self._any_draft()

    def _any_draft(self) -> Model:
        """The draft model, whatever its tokenizer (a drafter that drafts through text)."""
        if self.draft is None:
            needing = [d.name for d in registry.DRAFTERS.values() if d.needs_draft_model]
            if self.eagle3 is not None:
                raise DrafterChoiceError(f"The {', '.join(needing)} drafters need a draft model, and {self.eagle3.path.name} is an EAGLE-3 head: "
                                  "run it with --drafter eagle3 (or auto), or give a draft model instead.")
            raise DrafterChoiceError(f"The {', '.join(needing)} drafters need a draft model: give --draft (or a pair), "
                              f"or pick one that needs none ({', '.join(registry.NO_DRAFT_MODEL)}).")
        return self.draft

    def _eagle3_head(self) -> Eagle3File:
        if self.eagle3 is None:
            raise DrafterChoiceError("The eagle3 drafter needs an EAGLE-3 head made for the target: give it as --draft (a GGUF whose "
                              "architecture is eagle3), or pick another drafter.")
        return self.eagle3

    def _cut_self_draft(self) -> Model:
        """The target's first blocks, cut once into the cache directory and loaded on first use."""
        if self._self_draft is None:
            if self.config.self_draft_dir is None:
                raise EngineError("The self drafter needs a directory to keep the draft it cuts from the target.")
            made = cached_self_draft(self.config.target, self.config.self_draft_layers, self.config.self_draft_dir,
                                     self.config.self_draft_floor)
            config = ModelConfig(self.config.self_draft_gpu_layers, self.config.n_ctx, n_threads=self.config.n_threads,
                                 devices=self.config.target_devices)
            self._self_draft = Model(made.path, config, role="self-draft")
            check_pair(self.target.vocab, self._self_draft.vocab)
            self._self_draft.ensure_sequences(self._n_slots)
        return self._self_draft

    @staticmethod
    def _check_cancel(cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise LoadCancelled("Loading the pair was cancelled.")

    def _let_drafters_go(self) -> None:
        for drafter in getattr(self, "_drafters", {}).values():  # none yet where the load failed
            drafter.close()
        self._drafters: dict[str, Drafter] = {}
        self._decoders: dict[str, Decoder] = {}

    def close(self) -> None:
        self._let_drafters_go()
        for model in (self.target, self.draft, self._self_draft):
            if model is not None:
                model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
