"""A chat over a loaded pair, without any UI: load and time the pair, stream an answer, keep it safe.

The app's workers call these functions on a thread and forward what they report
as messages; the functions themselves know nothing of textual. Each answer is
written to the history while it streams, so a crash keeps what was said.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.catalog.models_toml import Pair
from localspec.engine.chat import Message, chat_problem, message_dicts
from localspec.engine.decode import Decoder
from localspec.engine.drafters import registry
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import LoadCancelled
from localspec.engine.events import Finished, StopReason
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.stats import GenerationStats
from localspec.errors import LocalspecError
from localspec.machine.device import OffloadedLayers, backend_name, offloaded_layers
from localspec.machine.memory_plan import MemoryPlan
from localspec.machine.remote_plan import plan_pair_on_devices
from localspec.session import plain_speed
from localspec.session.context_fit import answer_room, fit_conversation
from localspec.session.generation_request import APP_NAMES, resolve
from localspec.session.history import History
from localspec.session.live_stats import LiveStats, StatsSnapshot
from localspec.session.plain_rate import updated_plain_ms
from localspec.session.plain_speed import PlainSpeed
from localspec.session.settings import Settings

UPDATE_INTERVAL_S = 0.1  # the panel and the text redraw at most ten times a second
SAVE_INTERVAL_S = 1.0  # a killed app loses at most this much of an answer
CALIBRATION_TOKENS = 8
# How an answer that did not end by itself (EOS, a stop string, max tokens) is stored: stopped by the user, or cut
# by a full context (its text is not a whole answer, and the next turn's prompt is shortened to fit).
ANSWER_STATUS = {StopReason.CANCELLED: "stopped", StopReason.CONTEXT_FULL: "cut", StopReason.MAX_TOKENS: "max_tokens"}


@dataclass
class LoadedPair:
    pair: Pair
    engine: Engine
    plain_ms_per_token: float  # timed at load (or read from auto's cost cache), then kept current by every answer (plain_rate.py)
    backend: str
    plan: MemoryPlan
    layers: list[OffloadedLayers]  # what llama.cpp was actually given, beside the plan
    chat_problem: str = ""  # why no conversation can be formatted for the target (no chat template), found at load

    def close(self) -> None:
        self.engine.close()


def load_pair(pair: Pair, target: Path, draft: Path | None, settings: Settings,
              on_stage: Callable[[str], object], cancel: threading.Event) -> LoadedPair:
    """Plan the memory, load both models, check the pair, and time the target's plain step (the speedup's baseline)."""
    on_stage("planning memory")
    plan = plan_pair_on_devices(target, draft, settings.n_ctx, settings.target_gpu_layers, settings.draft_gpu_layers,
                                settings.rpc_servers, with_self_draft=registry.Part.SELF_DRAFT in registry.spec(settings.drafter).requires,
                                self_draft_layers=settings.self_draft_layers)
    config = EngineConfig(target, draft, settings.n_ctx, plan.target.gpu_layers, plan.draft_gpu_layers, settings.threads,
                          self_draft_dir=paths.self_draft_dir(), self_draft_layers=settings.self_draft_layers,
                          self_draft_floor=plan.self_draft_floor, self_draft_gpu_layers=plan.self_draft_gpu_layers, cost_cache_dir=paths.cost_cache_dir(),
                          target_devices=plan.target_devices, draft_devices=plan.draft_devices)
    engine = Engine(config, on_stage, cancel)
    try:
        plain_ms = plain_baseline_ms(engine, on_stage, cancel)
        layers = [offloaded_layers(model) for model in (engine.draft, engine.target) if model is not None]
        return LoadedPair(pair, engine, plain_ms, backend_name(), plan, layers, chat_problem(engine.target))
    except BaseException:
        engine.close()
        raise


def plain_baseline_ms(engine: Engine, on_stage: Callable[[str], object] = lambda _stage: None,
                      cancel: threading.Event | None = None) -> float:
    """The plain step this pair took here before (auto's cost cache), else timed now: once auto has run a pair on a
    machine, its loads time nothing (a busy 2-core machine spent 30 s of every start timing plain decoding)."""
    known = engine.known_plain_ms()
    if known is not None:
        return known
    on_stage("timing plain decoding")
    return plain_ms_per_token(engine, cancel)


def plain_ms_per_token(engine: Engine, cancel: threading.Event | None = None) -> float:
    """The target's own plain step on this machine, timed over a few tokens: the baseline every speedup is measured against."""
    prompt = engine.target.vocab.tokenize("Hello", add_special=True)
    finished = _last(engine.plain.generate(prompt, GenerationConfig(max_tokens=CALIBRATION_TOKENS), cancel))
    if finished.reason is StopReason.CANCELLED:
        raise LoadCancelled("Loading the pair was cancelled.")
    stats = finished.stats
    return stats.predicted_ms / stats.predicted_n if stats.predicted_n else 0.0


def _last(events: Iterable[object]) -> Finished:
    finished = None
    for event in events:
        finished = event
    assert isinstance(finished, Finished)
    return finished


@dataclass(frozen=True)
class AnswerUpdate:
    """What arrived since the last update: text pieces with their source, and the panel's numbers."""

    pieces: list[tuple[str, str]]  # (source, text)
    snapshot: StatsSnapshot


@dataclass
class AnswerResult:
    text: str
    provenance: list[tuple[str, int]]
    finished: Finished
    snapshot: StatsSnapshot
    status: str  # as stored in the history (ANSWER_STATUS)
    dropped_messages: int = 0  # the oldest messages left out of the prompt to fit the context
    slowed: PlainSpeed | None = None  # plain decoding ran far below its best here (another program busy on the CPU)


@dataclass
class _Transcript:
    """The answer so far, as text and as runs of (source, characters) for the tint."""

    parts: list[str] = field(default_factory=list)
    runs: list[tuple[str, int]] = field(default_factory=list)

    def add(self, source: str, text: str) -> None:
        self.parts.append(text)
        if self.runs and self.runs[-1][0] == source:
            self.runs[-1] = (source, self.runs[-1][1] + len(text))
        else:
            self.runs.append((source, len(text)))

    @property
    def text(self) -> str:
        return "".join(self.parts)


def stream_answer(loaded: LoadedPair, messages: list[Message], settings: Settings, history: History, message_id: int,
                  cancel: threading.Event, on_update: Callable[[AnswerUpdate], None],
                  conversation_counts: tuple[int, int] = (0, 0), ready: Callable[[], bool] = lambda: True,
                  on_stage: Callable[[str], object] = lambda _stage: None) -> AnswerResult:
    """Generate the assistant's reply to `messages`, reporting and saving as it goes; `on_stage` hears what the first
    token waits on (a wait of seconds on a busy machine, that nothing else would explain).

    Updates go out at most every UPDATE_INTERVAL_S, and only when `ready()` says the
    last one has been drawn: a busy UI gets fewer, larger updates instead of a
    queue, so drawing never falls behind and never takes CPU the models need.
    """
    engine = loaded.engine
    transcript = _Transcript()
    pending: list[tuple[str, str]] = []
    finished: Finished | None = None
    stats = GenerationStats()  # what the events carry, as the last one left it (nothing yet)
    # Everything from here may fail, before the first token too (the request, the drafter, the chat template): the row
    # is closed as failed, with the reason, or the next start would find it streaming and call it interrupted.
    try:
        request = resolve(settings.asked, parts=engine.parts, context=engine.target.n_ctx, pair=loaded.pair, names=APP_NAMES)
        preparing = f"preparing the {request.drafter} drafter"
        if not engine.has_decoder(request.drafter):
            on_stage(preparing)
        decoder: Decoder = engine.decoder(request.drafter, lambda stage: on_stage(f"{preparing}: {stage}"))
        fitted = fit_conversation(engine.target, messages, answer_room(engine.target.n_ctx, settings.max_tokens))
        prompt = fitted.tokens
        on_stage(f"reading the prompt ({len(prompt)} tokens)")
        live = LiveStats(engine.target.n_ctx, loaded.plain_ms_per_token, *conversation_counts)
        last_update = last_save = time.perf_counter()
        for event in decoder.generate(prompt, replace(request.config, conversation=tuple(message_dicts(fitted.messages))), cancel):
            if isinstance(event, Finished):
                finished = event
                break
            stats = event.stats
            live.observe(event)
            if event.text:
                transcript.add(event.source.value, event.text)
                pending.append((event.source.value, event.text))
            now = time.perf_counter()
            if now - last_update >= UPDATE_INTERVAL_S and ready():
                on_update(AnswerUpdate(pending, live.snapshot(stats, len(prompt) + stats.predicted_n)))
                pending, last_update = [], now
            if now - last_save >= SAVE_INTERVAL_S:
                history.save_partial(message_id, transcript.text, transcript.runs)
                last_save = now
    except BaseException as exc:
        history.finish_answer(message_id, transcript.text, "error", stats.to_dict(), transcript.runs,
                              error=str(exc) if isinstance(exc, LocalspecError) else None)
        raise
    assert finished is not None
    # the conversation's tokens, the answer's included: a stopped answer's cells are freed at once, but its text stays in
    # the chat and comes back with the next prompt (the cache's n_past read 41 after Esc where the chat held 59)
    snapshot = live.snapshot(finished.stats, len(prompt) + finished.stats.predicted_n)
    if pending:
        on_update(AnswerUpdate(pending, snapshot))
    status = ANSWER_STATUS.get(finished.reason, "complete")
    history.finish_answer(message_id, transcript.text, status, finished.stats.to_dict(), transcript.runs)
    loaded.plain_ms_per_token = updated_plain_ms(loaded.plain_ms_per_token, finished.stats)  # the next answer's baseline
    speed = plain_speed.remember_answer(engine.target, finished.stats)
    return AnswerResult(transcript.text, transcript.runs, finished, snapshot, status, fitted.dropped_messages,
                        speed if speed is not None and speed.slowed else None)


def conversation_counts(stats_dicts: list[dict[str, Any]]) -> tuple[int, int]:
    """Drafted and accepted tokens over a conversation's stored answers."""
    return (sum(int(s.get("draft_n", 0)) for s in stats_dicts), sum(int(s.get("draft_n_accepted", 0)) for s in stats_dicts))

