"""Prompt lookup: draft by continuing the last n tokens from where they occurred before.

Code edits, quotes and summaries repeat their prompt; so do answers that reuse
names they already wrote. When the last n tokens (n from n_max down to n_min)
appeared earlier in the prompt or the answer, the tokens that followed them are
proposed. It costs no model time: an index of n-grams is kept as tokens arrive.

Of the earlier occurrences, the one whose preceding text agrees longest with
the text before the cursor is copied, and that agreement (`match_length`) is
reported with the run: a run copied from a place that matches the last 20
tokens is far likelier to be right than one found by a 2-token coincidence,
and the controller drafts long or not at all accordingly. The agreement reaches
across one small edit: where an answer edits what it copies (a renamed name, an
added annotation), the copy resumes its source right after, and the stretch
before the edit shows that it is a copy, not a coincidence.

With a `LookupMemory`, earlier requests count too: an autocomplete after a
keystroke finds the completion the last request wrote (which its own prompt
does not hold), a second edit of a file finds the first edit's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from localspec.engine.drafters.base import Ask, Draft, Drafter, DraftSources, NewSession, Observation
from localspec.engine.drafters.edits import EDIT_MAX, MATCH_CAP, REANCHOR, RESUMED, CopyTracker
from localspec.engine.tokens import common_prefix

NGRAM_MIN = 2
NGRAM_MAX = 4
CANDIDATES = 8  # agreement (up to MATCH_CAP tokens back) is measured for this many of the most recent occurrences
SEPARATOR = -1  # between remembered texts: no token equals it, so no n-gram, agreement or run crosses it
MEMORY_TOKENS = 16384  # what a memory keeps; past it the older half is dropped


@dataclass(frozen=True)
class Lookup:
    tokens: list[int] = field(default_factory=list)
    match_length: int = 0  # tokens before the cursor that agree with the text before the copied run (across an edit)
    own: bool = False  # copied from the answer being written, not from its prompt or an earlier request

    @property
    def resumed(self) -> bool:
        """A guess past an edit (its source from just after the edit), not a run whose source agrees with the text before:
        auto judges it by its own record; the drafters that take every run leave it."""
        return self.match_length == RESUMED


class NgramIndex:
    """Tokens and, for every n-gram of n_min..n_max tokens, each index where it ends (oldest first)."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(token)
            end = len(self.tokens) - 1
            for n in range(self.n_min, min(self.n_max, end + 1) + 1):
                self.ends.setdefault(tuple(self.tokens[end + 1 - n : end + 1]), []).append(end)

    def truncate(self, n: int) -> None:
        """Back to the first n tokens, as if the rest had never been added."""
        for end in range(len(self.tokens) - 1, n - 1, -1):
            for size in range(self.n_min, min(self.n_max, end + 1) + 1):
                gram = tuple(self.tokens[end + 1 - size : end + 1])
                ends = self.ends[gram]
                ends.pop()  # the last end recorded for the gram is this one: ends are appended in order
                if not ends:
                    del self.ends[gram]
        del self.tokens[n:]

    def exact_agreement(self, earlier: int, text: Sequence[int], end: int) -> int:
        """How many tokens ending at `earlier` here equal those ending at `end` in `text` (up to MATCH_CAP)."""
        tokens, length = self.tokens, 0
        while length < MATCH_CAP and earlier - length >= 0 and end - length >= 0 and tokens[earlier - length] == text[end - length]:
            length += 1
        return length

    def agreement(self, earlier: int, text: Sequence[int], end: int) -> int:
        """The exact agreement, plus the stretch that agrees before it past one small edit (a renamed name, an inserted
        annotation): an edited copy resumes its source after each edit, where the exact agreement starts again from a
        2-token coincidence and would judge the run as one."""
        length = self.exact_agreement(earlier, text, end)
        if length >= MATCH_CAP:
            return length
        tokens, before = self.tokens, 0
        source_end, text_end = earlier - length, end - length  # the tokens that differ
        for skip_source in range(EDIT_MAX + 1):
            s = source_end - skip_source
            if s < REANCHOR - 1:
                break
            anchor = tokens[s]
            for skip_text in range(EDIT_MAX + 1):
                t = text_end - skip_text
                if t < REANCHOR - 1:
                    break
                # In this index's own text, the agreeing stretch must come after its source, not be that source itself.
                if (skip_source or skip_text) and text[t] == anchor and (t > s or text is not tokens):
                    before = max(before, self.exact_agreement(s, text, t))
        return min(MATCH_CAP, length + (before if before >= REANCHOR else 0))


class LookupMemory(NgramIndex):
    """The earlier prompts and answers of one conversation or server slot, for lookup across requests.

    A request usually continues the last one (a chat's next turn, the same file after a keystroke), so only what
    the new text does not share with the last remembered one is added, with a little of the text before it so its
    n-grams and agreement still read; the oldest half is dropped past MEMORY_TOKENS.
    """

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX, max_tokens: int = MEMORY_TOKENS) -> None:
        super().__init__(n_min, n_max)
        self.max_tokens = max_tokens
        self._last: list[int] = []

    def remember(self, text: Sequence[int]) -> None:
        shared = common_prefix(self._last, text)
        if shared == len(text):
            return
        self.extend([SEPARATOR, *text[max(0, shared - MATCH_CAP) :]])
        self._last = list(text)
        if len(self.tokens) > self.max_tokens:
            kept = self.tokens[-(self.max_tokens // 2) :]
            self.tokens, self.ends = [], {}
            self.extend(kept)


def _never(token: int) -> bool:
    return False


class PromptLookup:
    """Prompt lookup over one sequence's text (and, with a memory, its earlier requests').

    A run ends at its first end-of-generation token (`ends_answer`): the answer ends there, so no token after it can be
    accepted. A copy of a chat's earlier turn goes on into the template's next turn, and auto priced those tokens as the
    copy's own (a rename's last bet drafted 33 tokens where 14 could hold)."""

    def __init__(self, n_min: int = NGRAM_MIN, n_max: int = NGRAM_MAX, memory: LookupMemory | None = None,
                 ends_answer: Callable[[int], bool] = _never) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("n-gram sizes need 1 <= n_min <= n_max")
        self.n_min, self.n_max = n_min, n_max
        self.memory = memory
        self.ends_answer = ends_answer
        self._index = NgramIndex(n_min, n_max)
        self._prompt_length = 0
        self._copy = CopyTracker()

    def start(self, prompt: Sequence[int]) -> None:
        """A new text; the last one (prompt and answer) goes into the memory, if there is one."""
        if self.memory is not None and self._index.tokens:
            self.memory.remember(self._index.tokens)
        self._index = NgramIndex(self.n_min, self.n_max)
        self._index.extend(prompt)
        self._prompt_length = len(prompt)
        self._copy = CopyTracker()

    def forget_requests(self) -> None:
        self._index = NgramIndex(self.n_min, self.n_max)
        self._prompt_length = 0
        self._copy = CopyTracker()
        if self.memory is not None:
            self.memory = LookupMemory(self.n_min, self.n_max, self.memory.max_tokens)

    def lookup(self, k: int, after: Sequence[int] = ()) -> Lookup:
        """Up to k tokens that followed the best earlier occurrence of the longest suffix seen before, or the copy the
        answer has been following (through its edits), where that agrees longer; with `after` (text a grammar forces
        next), the lookup as it will be once that text is accepted, the index and the copy put back afterwards."""
        if after:
            kept, length = self._copy.saved(), len(self._index.tokens)
            self.advance(after)
            try:
                return self.lookup(k)
            finally:
                self._index.truncate(length)
                self._copy = kept
        if k <= 0 or not self._index.tokens:
            return Lookup()
        found = self._search()
        if found is None or found[0] < self._copy.standing():
            offered, agreed = self._copy.offer(k, SEPARATOR)
            if offered or found is None:
                return self._offer(offered, agreed)
        length, source, start = found  # it agrees as far as the copy followed, or that copy has nothing left
        self._copy.follow(source, start, length)
        return self._offer(*self._copy.offer(k, SEPARATOR))

    def _offer(self, tokens: list[int], agreed: int) -> Lookup:
        end = next((i + 1 for i, token in enumerate(tokens) if self.ends_answer(token)), len(tokens))
        tokens = tokens[:end]
        if not tokens:
            return Lookup()
        own = self._copy.source is self._index.tokens and self._copy.next >= self._prompt_length
        return Lookup(tokens, agreed, own)

    def _search(self) -> tuple[int, list[int], int] | None:
        """The agreement, source text and start of the best run, if the last n_min tokens occurred before."""
        text = self._index.tokens
        end = len(text) - 1
        for n in range(min(self.n_max, end + 1), self.n_min - 1, -1):
            gram = tuple(text[end + 1 - n : end + 1])
            own = [e for e in self._index.ends.get(gram, [])[-CANDIDATES - 1 :] if e < end][-CANDIDATES:]
            # The longest agreement wins; among equals this text over the memory, then the most recent (later text is
            # likelier to be repeated).
            found = [(self._index.agreement(e, text, end), 1, e) for e in own]
            if self.memory is not None:
                remembered = self.memory.tokens
                found += [(self.memory.agreement(e, text, end), 0, e) for e in self.memory.ends.get(gram, [])[-CANDIDATES:]
                          if e + 1 < len(remembered) and remembered[e + 1] != SEPARATOR]
            if found:
                length, in_text, earlier = max(found)
                source = text if in_text else self.memory.tokens  # type: ignore[union-attr]
                return length, source, earlier + 1
        return None

    def agreeing_run(self, k: int, after: Sequence[int] = ()) -> list[int]:
        """The lookup's run unless it is a guess past an edit: what a drafter without a record of guesses drafts."""
        lookup = self.lookup(k, after)
        return [] if lookup.resumed else lookup.tokens

    def advance(self, tokens: Sequence[int]) -> None:
        self._index.extend(tokens)
        self._copy.advance(tokens, SEPARATOR)


class Lookups:
    """A PromptLookup per sequence, made on first use; `remember`: each keeps its sequence's earlier requests (a server
    slot's, a conversation's), as an editor's next request copies the last answer; `ends_answer`: the target's
    end-of-generation tokens, where runs end."""

    def __init__(self, remember: bool = True, ends_answer: Callable[[int], bool] = _never) -> None:
        self.remember = remember
        self.ends_answer = ends_answer
        self._by_seq: dict[int, PromptLookup] = {}

    def __getitem__(self, seq: int) -> PromptLookup:
        lookup = self._by_seq.get(seq)
        if lookup is None:
            memory = LookupMemory() if self.remember else None
            lookup = self._by_seq[seq] = PromptLookup(memory=memory, ends_answer=self.ends_answer)
        return lookup

    def forget_requests(self) -> None:
        for lookup in self._by_seq.values():
            lookup.forget_requests()


class NgramDrafter(Drafter):
    """Prompt lookup's run, for each sequence asking."""

    name = "ngram"

    def __init__(self, lookups: Lookups | None = None) -> None:
        self.lookups = lookups or Lookups()

    def begin(self, seq: int, prompt: Sequence[int]) -> None:
        self.lookups[seq].start(prompt)

    def propose(self, asks: Sequence[Ask]) -> list[Draft]:
        return [Draft.deterministic(self.lookups[ask.seq].agreeing_run(ask.k, ask.after), ask.sampling) for ask in asks]

    def accept(self, seq: int, tokens: Sequence[int]) -> None:
        self.lookups[seq].advance(tokens)

    def observe(self, seen: Observation) -> None:
        if isinstance(seen, NewSession):
            self.lookups.forget_requests()


def build(sources: DraftSources) -> Drafter:
    return NgramDrafter(Lookups(ends_answer=sources.target.vocab.is_eog))
