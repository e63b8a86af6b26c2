"""A loaded pair, ready to generate: what the CLI, the bench and the app hold on to.

Loading checks the pair before anything is generated, and both decoders (the
speculative one and the plain baseline) share the same loaded target, so the
two can be interleaved and compared on one set of weights.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from localspec.engine.decode import Decoder
from localspec.engine.controller import AutoDrafter, calibrate
from localspec.engine.drafter import ModelDrafter
from localspec.engine.errors import EngineError, LoadCancelled
from localspec.engine.ngram import NgramDrafter
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


class Engine:
    def __init__(self, config: EngineConfig, on_stage: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> None:
        """Load the target, then the draft, then check the pair; `on_stage` hears each step, `cancel` is checked between them."""
        self.config = config
        report = on_stage or (lambda _stage: None)
        report("loading the target")
        self.target = Model(config.target, ModelConfig(config.target_gpu_layers, config.n_ctx, n_threads=config.n_threads), role="target")
        self.draft: Model | None = None
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
        self.speculative = Decoder(self.target, ModelDrafter(self.draft)) if self.draft is not None else self.plain
        self.ngram = Decoder(self.target, NgramDrafter())
        self._auto: Decoder | None = None

    @property
    def auto(self) -> Decoder:
        """The adaptive controller's decoder; its costs are timed on first use (a few target passes)."""
        if self._auto is None:
            costs = calibrate(self.target, self.draft)
            model = ModelDrafter(self.draft) if self.draft is not None else None
            self._auto = Decoder(self.target, AutoDrafter(costs, model))
        return self._auto

    def decoder(self, drafter: str) -> Decoder:
        """By drafter name: auto, model, ngram or none."""
        if drafter == "auto":
            return self.auto
        if drafter == "model":
            if self.draft is None:
                raise EngineError("The model drafter needs a draft model: give --draft, or pick another drafter.")
            return self.speculative
        if drafter == "ngram":
            return self.ngram
        if drafter == "none":
            return self.plain
        raise EngineError(f"Unknown drafter {drafter!r}: choose auto, model, ngram or none.")

    @staticmethod
    def _check_cancel(cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise LoadCancelled("Loading the pair was cancelled.")

    def close(self) -> None:
        for model in (self.target, self.draft):
            if model is not None:
                model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
