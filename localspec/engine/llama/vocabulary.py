"""A model's vocabulary: its special tokens, each token's text and bytes, and text to tokens.

Its own object because it is a job of its own (Model loads, holds the context and decodes), and a token's bytes are
asked once per emitted token: they are cached here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp


class Vocabulary:
    def __init__(self, vocab: ctypes.c_void_p) -> None:
        self.handle = vocab
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(vocab)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buf = ctypes.create_string_buffer(256)

    @property
    def vocab_type(self) -> int:
        return llama_cpp.llama_vocab_type(self.handle)

    @property
    def bos(self) -> int:
        return llama_cpp.llama_vocab_bos(self.handle)

    @property
    def eos(self) -> int:
        return llama_cpp.llama_vocab_eos(self.handle)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.handle))

    @property
    def add_eos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_eos(self.handle))

    def token_text(self, token: int) -> str:
        """The vocabulary's own spelling of a token (as stored in the GGUF)."""
        return llama_cpp.llama_vocab_get_text(self.handle, token).decode("utf-8", errors="replace")

    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens the vocabulary has (pre, suf, mid, pad, rep, sep), by name; a model without them: {}."""
        getters = {"pre": llama_cpp.llama_vocab_fim_pre, "suf": llama_cpp.llama_vocab_fim_suf, "mid": llama_cpp.llama_vocab_fim_mid,
                   "pad": llama_cpp.llama_vocab_fim_pad, "rep": llama_cpp.llama_vocab_fim_rep, "sep": llama_cpp.llama_vocab_fim_sep}
        return {name: token for name, get in getters.items() if (token := get(self.handle)) >= 0}

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends generation; asked of every emitted token, so each answer is kept (a dict lookup, not a C call)."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.handle, token))
        return eog

    def text(self, tokens: Sequence[int]) -> str:
        """The tokens' text, as /detokenize gives it (bytes that end mid-character are replaced)."""
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token contributes to the output text (control tokens give none)."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token, special=False)
        return piece

    def rendered(self, tokens: Sequence[int]) -> bytes:
        """The tokens as text with their control tokens spelled out (`<|im_start|>`): a prompt as another tokenizer
        reads it."""
        return b"".join(self._piece(token, special=True) for token in tokens)

    def _piece(self, token: int, special: bool) -> bytes:
        n = llama_cpp.llama_token_to_piece(self.handle, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n >= 0:
            return self._piece_buf.raw[:n]
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(self.handle, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        return self.tokenize_bytes(text.encode("utf-8"), add_special, parse_special)

    def tokenize_bytes(self, data: bytes, add_special: bool, parse_special: bool = True) -> list[int]:
        """`tokenize` for text held as bytes (whole characters: the tokenizer reads UTF-8)."""
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.handle, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            tokens = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self.handle, data, len(data), tokens, capacity, add_special, parse_special)
        return list(tokens[:n])
