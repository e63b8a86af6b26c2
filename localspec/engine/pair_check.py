"""Can this draft's tokens speak for this target as they are? llama.cpp's vocabulary rules, with a useful error.

A draft whose token 1234 means something else than the target's token 1234
would be verified against the wrong text, so such a draft drafts only through
text (the bridged drafter), and a drafter that hands its tokens to the target as
they are refuses it. The rules are those of llama.cpp's common/speculative.cpp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from localspec.engine.errors import PairMismatchError

MAX_VOCAB_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_COMPARED_TOKEN = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID: ids below are specials that may differ
# tokenizer.ggml.model -> llama.cpp's enum llama_vocab_type, so header and loaded model compare alike
VOCAB_TYPES = {"no_vocab": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}
VOCAB_NAMES = {number: name for name, number in VOCAB_TYPES.items()}


class TokenizerFacts(Protocol):
    """What the check reads: a loaded Model, or a GGUF header (local, or read over HTTP before a download)."""

    @property
    def vocab_type(self) -> int: ...
    @property
    def bos(self) -> int: ...
    @property
    def eos(self) -> int: ...
    @property
    def add_bos(self) -> bool: ...
    @property
    def add_eos(self) -> bool: ...
    @property
    def n_vocab(self) -> int: ...

    def token_text(self, token: int) -> str: ...


def vocab_name(vocab_type: int) -> str:
    """The tokenizer's name as GGUF files spell it (tokenizer.ggml.model), as `check` prints it."""
    return VOCAB_NAMES.get(vocab_type, "unknown")


def _refuse(reason: str) -> PairMismatchError:
    return PairMismatchError(
        f"The draft and target cannot be used together: {reason}. "
        "Its tokens go to the target as they are, so it needs the target's tokenizer."
    )


def check_pair(target: TokenizerFacts, draft: TokenizerFacts) -> None:
    """Raise PairMismatchError naming the first difference, or return if the pair is usable."""
    if reason := tokenizer_difference(target, draft):
        raise _refuse(reason)


def tokenizer_difference(target: TokenizerFacts, draft: TokenizerFacts) -> str:
    """The first difference that keeps the draft's token ids from meaning the target's ('' where none): such a draft
    drafts only through text (the bridged drafter)."""
    return compare_tokenizers(target, draft).difference


@dataclass(frozen=True)
class TokenizerComparison:
    difference: str = ""  # what keeps the draft's ids from meaning the target's ('' where nothing does)
    tolerated: str = ""  # a difference llama.cpp refuses that is found harmless here, with the rule that accepts it


def _shown(value: int | bool) -> str:
    """A special's value as `check` prints it: an id a file lacks (the header reads -1) as none."""
    return "none" if value == -1 and not isinstance(value, bool) else repr(value)


def compare_tokenizers(target: TokenizerFacts, draft: TokenizerFacts) -> TokenizerComparison:
    """llama.cpp's rules, and one it lacks: a BOS id that differs where neither model puts a BOS in its prompts and every
    id, specials included, is the same text in both is never read. Qwen3.5-0.8B's GGUF has no BOS id (llama.cpp then
    takes 11, against its Qwen3.6 targets' 248044) over the targets' very vocabulary: it drafts natively."""
    if target.vocab_type != draft.vocab_type:
        return TokenizerComparison(f"vocabulary types differ (target {vocab_name(target.vocab_type)}, draft {vocab_name(draft.vocab_type)})")
    specials = [name for name in ("bos", "eos", "add_bos", "add_eos") if getattr(target, name) != getattr(draft, name)]
    special = f"{specials[0]} differs (target {_shown(getattr(target, specials[0]))}, draft {_shown(getattr(draft, specials[0]))})" if specials else ""
    if specials and (specials != ["bos"] or target.add_bos):
        return TokenizerComparison(special)
    difference = abs(target.n_vocab - draft.n_vocab)
    if difference > MAX_VOCAB_SIZE_DIFFERENCE:
        return TokenizerComparison(f"vocabulary sizes differ by {difference} (target {target.n_vocab}, draft {draft.n_vocab}; "
                                   f"at most {MAX_VOCAB_SIZE_DIFFERENCE} is allowed)")
    first = 0 if special else FIRST_COMPARED_TOKEN  # a BOS let through: every id must match, specials included
    for token in range(first, min(target.n_vocab, draft.n_vocab)):
        t, d = target.token_text(token), draft.token_text(token)
        if t != d:
            return TokenizerComparison(special or f"token {token} is {t!r} in the target but {d!r} in the draft")
    if special:
        return TokenizerComparison(tolerated=f"{special}, accepted: neither model puts a BOS in its prompts and all "
                                             f"{min(target.n_vocab, draft.n_vocab)} ids are the same text in both")
    return TokenizerComparison()


EAGLE3_ARCHITECTURE = "eagle3"  # general.architecture of an EAGLE-3 head's GGUF: a head over the target's layers


def check_eagle3_head(target: str, n_layer: int, n_embd: int, head: str, layers: Sequence[int], hidden: int | None) -> None:
    """Raise PairMismatchError where the EAGLE-3 head `head` was made for another target than `target` (`n_layer`
    blocks, rows `n_embd` wide): it reads three layers, each at most the last (the final hidden state), `hidden` wide."""
    if len(layers) != 3 or any(not 0 <= layer <= n_layer for layer in layers):
        raise PairMismatchError(f"{head} reads target layers {list(layers)}, but {target} has {n_layer}: it is an EAGLE-3 head "
                                "for another model. Use the head made for this target.")
    if hidden is not None and hidden != n_embd:
        raise PairMismatchError(f"{head} reads hidden states {hidden} wide, but {target}'s are {n_embd}: it is an EAGLE-3 head "
                                "for another model. Use the head made for this target.")
