"""One way to read a generation request, whichever door it came through: the command line, the server or the app.

Each door says what it was asked (`Asked`, None where it was silent), layered over what stands behind it (the
server's options), and what the loaded pair recommends; `resolve` applies one set of rules, with one set of messages
in the door's own names for its fields, and gives the drafter and the engine's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from localspec.catalog.models_toml import Pair
from localspec.engine import defaults
from localspec.engine.drafters import registry
from localspec.engine.generation_config import GenerationConfig, Verification
from localspec.engine.grammar import Grammar
from localspec.engine.penalties import Penalties
from localspec.engine.sampling import SamplingParams
from localspec.errors import UsageError


@dataclass(frozen=True)
class Asked:
    """What a request said; None (or no stop strings) where it said nothing."""

    drafter: str | None = None
    draft_max: int | None = None
    draft_p_min: float | None = None
    max_tokens: int | None = None  # None or below 0: until the answer ends or the context is full; 0 is refused
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    verification: Verification | None = None
    stop: tuple[str, ...] = ()
    grammar: Grammar | None = None
    penalties: Penalties | None = None

    def over(self, standing: Asked) -> Asked:
        """This request's fields where it gave them, else `standing`'s (a server's own options)."""
        return Asked(**{f.name: _given(getattr(self, f.name), getattr(standing, f.name)) for f in fields(self)})


def _given(value: Any, otherwise: Any) -> Any:
    return otherwise if value is None or value == () else value


@dataclass(frozen=True)
class GenerationRequest:
    drafter: str
    config: GenerationConfig


# Each door's names for the fields its users set, so that one rule speaks each door's language.
CLI_NAMES = {"drafter": "--drafter", "draft_max": "--draft-max", "draft_p_min": "--draft-p-min", "max_tokens": "--max-tokens",
             "grammar": "a grammar (--json-schema, --grammar)"}
SERVER_NAMES = {"drafter": "localspec.drafter", "draft_max": "speculative.n_max", "draft_p_min": "speculative.p_min",
                "max_tokens": "max_tokens", "grammar": "a grammar (response_format, json_schema) or penalties (frequency_penalty, "
                "presence_penalty, logit_bias)"}
APP_NAMES = {"drafter": "drafter", "draft_max": "draft-max", "draft_p_min": "draft p-min", "max_tokens": "max tokens",
             "grammar": "a grammar"}


def resolve(asked: Asked, *, parts: registry.PairParts, context: int, pair: Pair | None = None,
            names: Mapping[str, str] = CLI_NAMES) -> GenerationRequest:
    """The drafter and GenerationConfig for `asked`, on a pair that offers the drafters `parts` (what is not known before
    the load counts as there: the engine says at load), and whose answers may fill `context` tokens; the pair's
    recommended K and p-min where the request gives none."""
    drafter = asked.drafter or registry.DEFAULT
    if drafter not in registry.DRAFTERS:
        raise UsageError(f"{names['drafter']} must be one of {', '.join(registry.DRAFTERS)}, not {drafter!r}.")
    recommended = pair.draft_max if pair else None
    draft_max = asked.draft_max if asked.draft_max is not None else draft_max_for(drafter, recommended)
    if not 0 <= draft_max <= defaults.DRAFT_MAX_LIMIT:
        raise UsageError(f"{names['draft_max']} must be from 0 to {defaults.DRAFT_MAX_LIMIT}, not {draft_max}.")
    if draft_max == 0 or not registry.DRAFTERS[drafter].drafts:
        drafter, draft_max = registry.PLAIN, 0
    if registry.DRAFTERS[drafter].needs_draft_model and registry.Part.DRAFT_MODEL not in parts.offers:
        raise UsageError(f"{names['drafter']} {drafter} needs a draft model, and none is loaded: load a pair with a draft, "
                         f"or pick a drafter that needs none ({', '.join(registry.NO_DRAFT_MODEL)}).")
    if problem := parts.problem(drafter):
        raise UsageError(f"{names['drafter']} {drafter}: {problem}, or load another pair.")
    p_min = draft_p_min(asked.draft_p_min, pair)
    if not 0.0 <= p_min <= 1.0:
        raise UsageError(f"{names['draft_p_min']} must be from 0 to 1, not {p_min}.")
    if asked.max_tokens == 0:
        raise UsageError(f"{names['max_tokens']} must be 1 or more (or left out: until the answer ends or the context is full).")
    max_tokens = asked.max_tokens if asked.max_tokens is not None and asked.max_tokens > 0 else context  # the context stops it first
    sampling = SamplingParams(
        temperature=_first(asked.temperature, defaults.TEMPERATURE),
        top_k=_first(asked.top_k, defaults.TOP_K),
        top_p=_first(asked.top_p, defaults.TOP_P),
        min_p=_first(asked.min_p, defaults.MIN_P),
        seed=asked.seed,
    )
    sampling.validate()
    if asked.grammar is not None or asked.penalties is not None:
        refuse_unconstrained(drafter, names)
    config = GenerationConfig(max_tokens=max_tokens, sampling=sampling, draft_max=draft_max, draft_p_min=p_min,
                              verification=asked.verification, stop=asked.stop, grammar=asked.grammar,
                              penalties=asked.penalties)
    return GenerationRequest(drafter, config)


def refuse_unconstrained(drafter: str, names: Mapping[str, str] = CLI_NAMES) -> None:
    """A UsageError where the drafter cannot draft under a grammar or penalties (a door that makes the grammar only after
    the load asks this before it)."""
    if registry.Supports.GRAMMAR not in registry.DRAFTERS[drafter].supports:
        raise UsageError(f"The {drafter} drafter cannot draft under {names['grammar']}: pick another drafter.")


def draft_max_for(drafter: str, recommended: int | None) -> int:
    """The K to use when the user set none: a drafter that picks K itself gets the safety cap, else the pair's
    recommendation, else llama.cpp's default."""
    if registry.Supports.CHOOSES_K in registry.spec(drafter).supports:
        return defaults.AUTO_DRAFT_MAX
    return recommended if recommended is not None else defaults.DRAFT_MAX


def draft_p_min(given: float | None, pair: Pair | None) -> float:
    """The draft p-min: as given, else the pair's recommendation, else the default (the bench sweeps with it too)."""
    return float(_first(given, pair.draft_p_min if pair else None, defaults.DRAFT_P_MIN))


def _first(*values: Any) -> Any:
    return next(value for value in values if value is not None)
