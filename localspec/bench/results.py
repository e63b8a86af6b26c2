"""What the bench measured: its prompts, its modes and every measurement, shared by the runner, the report and the charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from localspec.bench import reference
from localspec.bench.ceiling import Ceiling
from localspec.engine.chat import Message, with_system
from localspec.engine.drafters import registry
from localspec.engine.grammar import GrammarText
from localspec.engine.stats import GenerationStats
from localspec.session.structured_output import ToolRequest, requested_grammar, tool_request


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    prompt: str
    system: str | None = None
    # What the answer must be, as an OpenAI-shaped request sends it: a response_format (json_object, json_schema), or
    # tools, which the chat template renders, and a tool_choice that forces a call
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # None: allowed, OpenAI's default

    @property
    def messages(self) -> list[Message]:
        return with_system(self.system, [Message("user", self.prompt)])

    @cached_property
    def tool_request(self) -> ToolRequest:
        """The tools shown and a forced call's schema, read as the server reads a request's (a UsageError where they
        do not fit together)."""
        return tool_request(self.tools, self.tool_choice, self.parallel_tool_calls, self.response_format is not None)

    @cached_property
    def grammar(self) -> GrammarText | None:
        """The grammar every mode's answer is held to (None: free text), as `serve` would hold the same request's."""
        return requested_grammar(self.response_format, self.tool_request.forced_schema)


@dataclass(frozen=True)
class Mode:
    """One way of decoding: a drafter at a K (auto: K is its cap), verified one way at temperature > 0."""

    drafter: str  # the registry's name (registry.PLAIN: plain decoding)
    k: int
    verification: str = "speculative"

    @property
    def spec(self) -> registry.DrafterSpec:
        return registry.spec(self.drafter)

    @property
    def plain(self) -> bool:
        return not self.spec.drafts

    @property
    def adaptive(self) -> bool:
        """auto: it picks K each step, this mode's K only its cap."""
        return registry.Supports.CHOOSES_K in self.spec.supports

    @property
    def label(self) -> str:
        if self.plain:
            return "plain"
        if self.adaptive:
            return f"{self.drafter} K≤{self.k}"
        return f"{self.drafter} K={self.k}" + ("" if self.verification == "speculative" else f" {self.verification}")

    @property
    def fixed(self) -> bool:
        """A drafter at a set K, the kind auto is compared against."""
        return self.drafter in registry.FIXED and self.verification == "speculative"

    def reference(self, drafter: str, k: int) -> bool:
        """`drafter` at K `k`, verified as llama.cpp's llama-speculative-simple verifies (speculatively): its side of a reference row."""
        return self.drafter == drafter and self.k == k and self.verification == "speculative"


PLAIN = Mode(registry.PLAIN, 0)


@dataclass
class Measurement:
    prompt_id: str
    mode: Mode
    tokens: list[int]
    stats: GenerationStats
    departs_at: int | None = None  # first token that differs from plain output (greedy runs)
    margins: list[float] = field(default_factory=list)  # target's top-1 minus top-2 logit per token (--margins)
    text: str = ""  # the answer, so a structured one can be read and checked

    def margin_at_departure(self, plain: Measurement) -> float | None:
        """The closer of the two runs' top-2 logit gaps where the outputs part: a near-tie, or a bug."""
        if self.departs_at is None or not self.margins or not plain.margins:
            return None
        return min(self.margins[self.departs_at], plain.margins[self.departs_at])


@dataclass(frozen=True)
class ReferenceMeasurement:
    """One llama-speculative-simple run: which prompt, drafter (drafting as llama.cpp's `--spec-type` of its registry row), K and
    p-min, and what it measured."""

    prompt_id: str
    drafter: str
    k: int
    p_min: float
    run: reference.ReferenceRun


@dataclass
class BenchResult:
    ks: list[int]
    prompts: list[BenchPrompt]
    modes: list[Mode] = field(default_factory=list)
    temperature: float = 0.0
    measurements: list[Measurement] = field(default_factory=list)
    llama_bench_tg: list[float] = field(default_factory=list)  # tg64 on an empty context, before and after our runs
    llama_bench_matched: list[float] = field(default_factory=list)  # our workload: tg<max_tokens> @ d<mean prompt>
    matched_workload: tuple[int, int] = (0, 0)  # (n_gen, depth) of llama_bench_matched
    reference: list[ReferenceMeasurement] = field(default_factory=list)
    reference_error: str | None = None
    machine: dict[str, object] = field(default_factory=dict)
    ceilings: dict[str, Ceiling] = field(default_factory=dict)  # prompt id -> prompt lookup with foresight (greedy runs)
    verify_ms: dict[int, float] = field(default_factory=dict)  # auto's table at the end: target ms per batch size
    verify_passes: dict[int, float] = field(default_factory=dict)  # the passes that taught each size, calibration included
    rounds: int = 1
    lockstep: bool = False  # plain decoding and auto ran a token each in turn (lockstep.py)
    interrupted: bool = False  # Ctrl-C: only the prompts that finished every mode are kept
    notes: list[str] = field(default_factory=list)  # what was left out, and why (a drafter under a grammar, tools unrendered)

    def modes_for(self, prompt: BenchPrompt) -> list[Mode]:
        """The modes `prompt` runs in: under a grammar, those whose drafter can draft under one (registry: constrained)."""
        return [mode for mode in self.modes if prompt.grammar is None or registry.Supports.GRAMMAR in mode.spec.supports]

    def reference_drafters(self) -> list[tuple[str, str]]:
        """The drafters benched here that llama.cpp drafts as well, each with its `--spec-type`, in the modes' order."""
        drafters = dict.fromkeys(mode.drafter for mode in self.modes if mode.spec.reference)
        return [(drafter, spec_type) for drafter in drafters if (spec_type := registry.spec(drafter).reference)]

    def keep_finished_prompts(self) -> None:
        """After an interruption: drop the measurements of a prompt that did not finish every mode of its round (a
        report compares each mode with plain on the same prompts), and say so."""
        self.interrupted = True
        done = {m.prompt_id for m in self.measurements}
        finished = [p for p in self.prompts if p.id in done and
                    all(sum(m.prompt_id == p.id and m.mode == mode for m in self.measurements) >= 1 for mode in self.modes_for(p))]
        ids = {p.id for p in finished}
        self.prompts = finished
        self.measurements = [m for m in self.measurements if m.prompt_id in ids]
        self.ceilings = {key: value for key, value in self.ceilings.items() if key in ids}
