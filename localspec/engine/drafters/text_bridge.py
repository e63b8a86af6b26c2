"""Text between two tokenizers: what a draft of another vocabulary reads, and its proposal in the target's tokens.

Two vocabularies agree on text, not on ids, so the bridge speaks bytes (`llama_token_to_piece`): the draft reads the
target's accepted text re-tokenized as its own, and its proposal, turned back into bytes, is re-tokenized for the
target (SLEM, Timor et al., ICML 2025). Only a short window is ever re-tokenized, never the whole context (Hugging
Face's Universal Assisted Generation re-encodes about ten tokens): the proposal after the answer's last few target
tokens, so a word the proposal finishes is split as the target would split it.

The bridge never decides what is emitted: the target verifies the proposal by exact match, so a re-tokenization
the target would not have chosen only costs acceptance, never correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

LOOKBEHIND = 4  # target tokens a proposal is re-tokenized after: enough to finish a word, short enough to cost nothing


class Tokenizer(Protocol):
    """What the bridge reads of each side (llama/vocabulary.py's Vocabulary)."""

    @property
    def add_bos(self) -> bool: ...
    @property
    def bos(self) -> int: ...
    @property
    def n_vocab(self) -> int: ...

    def token_bytes(self, token: int) -> bytes: ...

    def rendered(self, tokens: Sequence[int]) -> bytes: ...

    def tokenize_bytes(self, data: bytes, add_special: bool, parse_special: bool = True) -> list[int]: ...

    def is_eog(self, token: int) -> bool: ...


def whole_characters(data: bytes | bytearray) -> int:
    """How many leading bytes of `data` a tokenizer may read now: all but a character it ends inside of (byte-level
    vocabularies split emoji and CJK across tokens), which the next token completes. Bytes that are no UTF-8 at all
    never will be: they are read as they are (the tokenizer spells them U+FFFD)."""
    for back in range(2, min(4, len(data)) + 1):
        try:
            bytes(data[-back:]).decode("utf-8")
        except UnicodeDecodeError as error:
            if error.start == 0 and error.reason == "unexpected end of data":
                return len(data) - back
    if data and data[-1] >= 0xC2:  # a lead byte alone
        return len(data) - 1 if data[-1] <= 0xF4 else len(data)
    return len(data)


def valid_text(data: bytes) -> bytes:
    """The longest prefix of a proposal that is whole UTF-8: past it, the target's tokenizer would read something else."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return data[: error.start]
    return data


def text_of(vocab: Tokenizer, tokens: Sequence[int]) -> bytes:
    """The tokens' bytes as the output text holds them (control tokens give none)."""
    return b"".join(vocab.token_bytes(token) for token in tokens)


def draft_prompt(target: Tokenizer, draft: Tokenizer, prompt: Sequence[int]) -> tuple[list[int], bytes, int]:
    """The target's prompt as the draft reads it, the bytes left over (a character the prompt ends inside of), and the
    bytes it read.

    The prompt is spelled out with its control tokens, so a chat template both models share (ChatML) reaches the draft
    as its own special tokens; the target's BOS gives way to the draft's."""
    if target.add_bos and prompt and prompt[0] == target.bos:
        prompt = prompt[1:]
    text = target.rendered(prompt)
    whole = whole_characters(text)
    tokens = draft.tokenize_bytes(text[:whole], add_special=draft.add_bos, parse_special=True)
    return (tokens or [draft.bos]), text[whole:], whole


def to_target(target: Tokenizer, lookbehind: Sequence[int], proposal: bytes) -> list[int]:
    """`proposal` (whole characters) in the target's tokens, as they would follow `lookbehind` (the answer's last target
    tokens): re-tokenized after them where they come out unchanged, else on its own."""
    lookbehind = list(lookbehind[-LOOKBEHIND:])
    if lookbehind:
        tokens = target.tokenize_bytes(text_of(target, lookbehind) + proposal, add_special=False, parse_special=False)
        if tokens[: len(lookbehind)] == lookbehind:
            return tokens[len(lookbehind):]
    return target.tokenize_bytes(proposal, add_special=False, parse_special=False)


def proposal_text(draft: Tokenizer, tokens: Sequence[int]) -> bytes:
    """The draft's proposal as text, up to its first end-of-generation token (the target ends its answers its own way)."""
    text = bytearray()
    for token in tokens:
        if draft.is_eog(token):
            break
        text += draft.token_bytes(token)
    return bytes(text)


def kept_prefix(draft: Tokenizer, speculated: Sequence[int], accepted: bytes) -> tuple[int, int]:
    """How many of the draft's speculated tokens the accepted text holds whole, and their length in bytes."""
    n_bytes = 0
    for kept, token in enumerate(speculated):
        piece = draft.token_bytes(token)
        if not piece or accepted[n_bytes : n_bytes + len(piece)] != piece:
            return kept, n_bytes
        n_bytes += len(piece)
    return len(speculated), n_bytes


def shared_tokens(target: Tokenizer, draft: Tokenizer) -> np.ndarray:
    """For each draft token, the target token of the very same bytes, or -1 where the target has none (control tokens
    never count): the vocabularies' intersection, over which a sampled draft keeps standard speculative sampling (TLI,
    Timor et al.)."""
    by_bytes: dict[bytes, int] = {}
    for token in range(target.n_vocab):
        piece = target.token_bytes(token)
        if piece:
            by_bytes.setdefault(piece, token)
    pieces = (draft.token_bytes(token) for token in range(draft.n_vocab))
    return np.array([by_bytes.get(piece, -1) if piece else -1 for piece in pieces], dtype=np.int64)


def byte_tokens(vocab: Tokenizer) -> dict[int, int]:
    """Each byte value the vocabulary spells as a token of its own (byte-level BPE has all 256, SentencePiece its byte
    fallback): how part of a character reaches the draft exactly, where re-tokenizing it would misspell it U+FFFD."""
    found: dict[int, int] = {}
    for token in range(vocab.n_vocab):
        piece = vocab.token_bytes(token)
        if len(piece) == 1:
            found.setdefault(piece[0], token)
    return found
