"""Following a copy through its edits: where the answer departs from the text it copies, and where it resumes.

An answer that rewrites code it was shown copies its source with edits: a renamed
name, an added annotation. Right after an edit the n-gram lookup has nothing to
offer (`count +=` never occurred before; the source says `x +=`) until a few tokens
agree with the source again, so every use of a renamed name cost plain steps. The
tracker keeps the copy's place in its source instead. Where the answer departs, it
offers the source from just past the replaced token, or from where the tokens
written since meet the source again. A replacement of one source token that the
copy then confirms (`x` written as `count`, and the copy goes on) is learned and
applied to the rest of the copy, so the later uses of the name are drafted right;
one that the answer does not repeat (it writes `x` again) is forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

EDIT_MAX = 8  # source tokens an edit may replace (and, twice that, tokens it may write before the copy counts as lost)
REANCHOR = 6  # a stretch that agrees this far shows a copy: an edit after one is an edit, not the end of a coincidence
SMALL_EDIT = 3  # an edit of at most this many tokens keeps the copy's agreement from before it
RESUMED = 1  # the agreement a run resumed past an edit reports: a class of its own (lookups agree on >= 2 tokens)
MATCH_CAP = 32  # agreement is counted up to this many tokens back


@dataclass
class Edit:
    at: int  # the source token where the answer departed
    before: int  # how many tokens the copy had agreed on until then
    written: list[int] = field(default_factory=list)  # what the answer wrote since


@dataclass(frozen=True)
class Anchor:
    skipped: int  # source tokens the edit replaced
    agreed: int  # the last tokens written, equal to the source right after the replaced ones


class CopyTracker:
    """The copy the lookup follows: its source, the next token it expects there, and the substitutions it learned."""

    def __init__(self) -> None:
        self.source: Sequence[int] = ()
        self.next = 0  # index in `source` of the token the copy expects next
        self.pending: list[int] = []  # the rest of a substitution the answer is writing
        self.agreed = 0  # tokens the copy has agreed on (a learned substitution counts as agreeing)
        self.edit: Edit | None = None
        self.substitutions: dict[int, tuple[int, ...]] = {}

    def saved(self) -> CopyTracker:
        """A copy of the tracker's state, to put back after a look past text not yet accepted (PromptLookup.lookup)."""
        kept = CopyTracker()
        kept.source, kept.next, kept.pending, kept.agreed = self.source, self.next, list(self.pending), self.agreed
        kept.edit = None if self.edit is None else Edit(self.edit.at, self.edit.before, list(self.edit.written))
        kept.substitutions = dict(self.substitutions)
        return kept

    def follow(self, source: Sequence[int], start: int, agreed: int) -> None:
        """The lookup chose the copy that goes on at source[start]."""
        self.source, self.next, self.pending, self.agreed, self.edit = source, start, [], agreed, None

    def standing(self) -> int:
        """How far the copy agrees before the cursor: a lookup must agree as far to be followed instead. Inside an edit
        the copy is a guess, and any lookup whose last tokens agree beats it."""
        if self.edit is not None:
            return 0
        return self.agreed if self.source else 0

    def offer(self, k: int, stop: int) -> tuple[list[int], int]:
        """Up to k tokens of the copy from where the answer is (substitutions applied), and the agreement behind them:
        RESUMED while the answer is inside an edit; ([], 0) when there is no copy to follow. `stop` ends a source run."""
        if self.edit is not None:
            # A departure from a short match (a coincidence, not a copy), or longer than a rename (the copy may have
            # ended): no guess; a lookup that agrees will find the copy again.
            if self.edit.before < REANCHOR:
                return [], 0
            anchor = self._anchor()
            if len(self.edit.written) - (anchor.agreed if anchor else 0) > SMALL_EDIT:
                return [], 0
            start = self.edit.at + anchor.skipped + anchor.agreed if anchor else self.edit.at + 1
            return self._run(start, k, stop), RESUMED
        if not self.source:
            return [], 0
        return (self.pending + self._run(self.next, k, stop))[:k], self.agreed

    def advance(self, tokens: Sequence[int], stop: int) -> None:
        for token in tokens:
            if self.edit is not None:
                self._write(token)
            elif self.source:
                self._copy(token, stop)

    def _run(self, start: int, k: int, stop: int) -> list[int]:
        run: list[int] = []
        position = start
        while len(run) < k and position < len(self.source) and self.source[position] != stop:
            run.extend(self.substitutions.get(self.source[position], (self.source[position],)))
            position += 1
        return run[:k]

    def _copy(self, token: int, stop: int) -> None:
        if self.pending:
            if token == self.pending[0]:
                self.pending.pop(0)
                self.agreed = min(MATCH_CAP, self.agreed + 1)
            else:
                self.edit, self.pending = Edit(self.next, 0, [token]), []
            return
        if self.next >= len(self.source) or self.source[self.next] == stop:
            self.source = ()
            return
        original = self.source[self.next]
        substitution = self.substitutions.get(original)
        if substitution is not None and token == substitution[0]:
            self.next += 1
            self.pending = list(substitution[1:])
        elif token == original:
            if substitution is not None:  # the answer kept this one: the rename was not everywhere
                del self.substitutions[original]
            self.next += 1
        else:
            self.edit = Edit(self.next, self.agreed, [token])
            return
        self.agreed = min(MATCH_CAP, self.agreed + 1)

    def _write(self, token: int) -> None:
        edit = self.edit
        assert edit is not None
        edit.written.append(token)
        anchor = self._anchor()
        replacement = edit.written[: -anchor.agreed] if anchor else []
        # The copy resumed: two tokens agree again, or one past a single replaced source token.
        if anchor and (anchor.agreed >= 2 or (anchor.skipped == 1 and replacement)):
            replaced = self.source[edit.at]
            if anchor.skipped == 1 and replacement and replaced not in replacement:
                self.substitutions[replaced] = tuple(replacement)
            self.next = edit.at + anchor.skipped + anchor.agreed
            # A small edit of a real copy (a rename, not a jump elsewhere) keeps the agreement from before it.
            small = anchor.skipped <= SMALL_EDIT and len(replacement) <= SMALL_EDIT and edit.before >= REANCHOR
            self.agreed = min(MATCH_CAP, (edit.before if small else 0) + anchor.agreed)
            self.edit = None
        elif len(edit.written) > 2 * EDIT_MAX:
            self.source, self.edit = (), None

    def _anchor(self) -> Anchor | None:
        """Where the tokens written since the departure meet the source again: the most that agree, then the fewest
        source tokens replaced."""
        edit = self.edit
        assert edit is not None
        written, source = edit.written, self.source
        best: Anchor | None = None
        for skipped in range(EDIT_MAX + 1):
            start = edit.at + skipped
            for agreed in range(min(len(written), len(source) - start), 0, -1):
                if best is not None and agreed <= best.agreed:
                    break
                if list(source[start : start + agreed]) == written[-agreed:]:
                    best = Anchor(skipped, agreed)
                    break
        return best
