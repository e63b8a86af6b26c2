"""A loaded pair, ready to generate: what the CLI, the bench and the app hold on to.

Loading checks the pair before anything is generated, and every decoder (plain
decoding and each drafter) shares the same loaded target, so they can be
interleaved and compared on one set of weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec.engine import defaults
from localspec.engine.decode import Decoder
from localspec.engine.drafters.auto.controller import AutoDrafter, calibrate
from localspec.engine.drafters.base import Drafter, ModelDrafter, NoDrafter
from localspec.engine.drafters.hierarchical import HierarchicalDrafter
from localspec.engine.drafters.hybrid import HybridDrafter
from localspec.engine.drafters.ngram import NgramDrafter
from localspec.engine.drafters.self_draft import cached_self_draft
from localspec.engine.drafters.tree import TreeDrafter
from localspec.engine.errors import EngineError, LoadCancelled
from localspec.engine.model import DEFAULT_N_CTX, Model, ModelConfig
from localspec.engine.pair_check import check_pair


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    draft: Path | None = None
    n_ctx: int = DEFAULT_N_CTX
    target_gpu_layers: int | None = None
    draft_gpu_layers: int | None = None
    n_threads: int | None = None
    self_draft_dir: Path | None = None  # where `--drafter self` keeps the drafts it cuts from targets
    self_draft_layers: int | None = None  # blocks such a draft keeps (None: a quarter)


class Engine:
    def __init__(self, config: EngineConfig, on_stage: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> None:
        """Load the target, then the draft, then check the pair; `on_stage` hears each step, `cancel` is checked between them."""
        self.config = config
        report = on_stage or (lambda _stage: None)
        report("loading the target")
        # Two sequences: the tree drafter verifies its two branches side by side in the target's cache.
        target_config = ModelConfig(config.target_gpu_layers, config.n_ctx, n_threads=config.n_threads, n_seq=2)
        self.target = Model(config.target, target_config, role="target")
        self.draft: Model | None = None
        self.self_draft: Model | None = None
        try:
            if config.draft is not None:
                self._check_cancel(cancel)
                report("loading the draft")
                self.draft = Model(config.draft, ModelConfig(config.draft_gpu_layers, config.n_ctx, n_threads=config.n_threads), role="draft")
                self._check_cancel(cancel)
                report("checking the pair")
                check_pair(self.target, self.draft)
        except BaseException:
            self.close()
            raise
        self.plain = Decoder(self.target)
        self._decoders: dict[str, Decoder] = {"none": self.plain}

    @property
    def speculative(self) -> Decoder:
        """The draft model's decoder (plain decoding when no draft model was loaded)."""
        return self.decoder("model") if self.draft is not None else self.plain

    def decoder(self, drafter: str) -> Decoder:
        """By drafter name (defaults.DRAFTERS); each is made on first use and kept, learned costs included."""
        if drafter not in defaults.DRAFTERS:
            raise EngineError(f"Unknown drafter {drafter!r}: choose one of {', '.join(defaults.DRAFTERS)}.")
        if drafter not in self._decoders:
            self._decoders[drafter] = Decoder(self.target, self._make_drafter(drafter))
        return self._decoders[drafter]

    def _make_drafter(self, name: str) -> Drafter:
        if name == "none":
            return NoDrafter()
        if name == "ngram":
            return NgramDrafter()
        if name == "self":
            return ModelDrafter(self._load_self_draft(), name="self-draft")
        if name == "auto":
            # The controller's costs are timed here, on first use: a few target passes.
            # Its draft model reads the prompt only if auto picks it: on a machine where it never pays, the first
            # token does not wait for a draft prefill.
            model = ModelDrafter(self.draft, lazy_start=True) if self.draft is not None else None
            return AutoDrafter(calibrate(self.target, self.draft), model)
        if self.draft is None:
            raise EngineError(f"The {name} drafter needs a draft model: give --draft (or a pair), or pick ngram, self or auto.")
        model = ModelDrafter(self.draft)
        if name == "hybrid":
            return HybridDrafter(model)
        if name == "hierarchical":
            return HierarchicalDrafter(model)
        if name == "tree":
            return TreeDrafter(model)
        return model

    def _load_self_draft(self) -> Model:
        if self.self_draft is None:
            if self.config.self_draft_dir is None:
                raise EngineError("The self drafter needs a directory to keep the draft it cuts from the target.")
            made = cached_self_draft(self.config.target, self.config.self_draft_layers, self.config.self_draft_dir)
            config = ModelConfig(self.config.draft_gpu_layers, self.config.n_ctx, n_threads=self.config.n_threads)
            self.self_draft = Model(made.path, config, role="self-draft")
            check_pair(self.target, self.self_draft)
        return self.self_draft

    @staticmethod
    def _check_cancel(cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise LoadCancelled("Loading the pair was cancelled.")

    def close(self) -> None:
        for model in (self.target, self.draft, self.self_draft):
            if model is not None:
                model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
