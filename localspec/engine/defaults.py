"""Default generation settings: one place, importable without loading llama.cpp (the CLI's help reads them).

DRAFT_P_MIN: on a 2-core CPU with the Qwen2.5-Coder 1.5B/0.5B pair at K=3, a 0.6
cut-off raised speculative throughput 25% over no cut-off (12.4 against 10.0
tok/s over four bench prompts): drafts the target would reject cost a draft
decode and a verify row each. llama.cpp's default is 0, which drafts them anyway.
"""

DRAFT_MAX = 3  # K, as llama.cpp's default
DRAFT_P_MIN = 0.6
MAX_TOKENS = 512
TEMPERATURE = 0.0
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05

# The drafters, by the name the command line, the settings and the bench use (see Engine.decoder).
DRAFTERS: dict[str, str] = {
    "auto": "the adaptive controller: per step, plain, prompt lookup or the draft model, and K, whichever is fastest",
    "model": "the draft model proposes K tokens",
    "ngram": "prompt lookup: continues text that occurred before (no model time)",
    "hybrid": "prompt lookup, continued by the draft model where it runs short",
    "hierarchical": "prompt lookup, vetted by the draft model; the target sees only what the draft agrees with",
    "tree": "the draft model forks at an unsure token; both branches are verified in one target pass",
    "self": "a draft cut from the target's own first blocks (made once, cached); no draft model needed",
    "none": "plain decoding",
}
DRAFTER = "auto"
DRAFTERS_WITH_DRAFT_MODEL = ("model", "hybrid", "hierarchical", "tree")
# auto's K is a cap on its own choice, and prompt lookup's long runs are where it wins most: a higher default.
AUTO_DRAFT_MAX = 8


def draft_max_for(drafter: str, recommended: int | None) -> int:
    """The K to use when the user set none: auto's cap, else the pair's recommendation, else llama.cpp's default."""
    if drafter == "auto":
        return AUTO_DRAFT_MAX
    return recommended if recommended is not None else DRAFT_MAX
