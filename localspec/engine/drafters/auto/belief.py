"""What auto keeps of one sequence between its steps, beside what every sequence teaches together.

How sure the target has lately been (confidence.py), how many asks a resume of
the draft model buys there (catch_up.py), how its long copies hold against the
learned rates (agreement.CopyEffect), where its edits break them (edit_points.py),
what it may lose on lookup runs from thin evidence (thin_bets.py), and the
confidence class the draft was last asked in, which its outcome teaches. The
controller keeps one per sequence, so each slot of a batch is judged as auto
judges a lone answer: its catch-ups priced by its own resumes, its draft by its
own text's confidence, not as one rate for prose and code alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.auto.agreement import CopyEffect
from localspec.engine.drafters.auto.catch_up import ResumeRuns
from localspec.engine.drafters.auto.confidence import TargetConfidence
from localspec.engine.drafters.auto.edit_points import EditPoints
from localspec.engine.drafters.auto.thin_bets import ThinBets
from localspec.engine.drafters.ngram import Lookup
from localspec.engine.pass_costs import CostTable
from localspec.engine.tuning import COPY_STEP, THIN_MATCH


@dataclass
class SequenceBelief:
    confidence: TargetConfidence = field(default_factory=TargetConfidence)
    resume_runs: ResumeRuns = field(default_factory=ResumeRuns)  # kept across the sequence's answers, as it learns
    copy_effect: CopyEffect = field(default_factory=CopyEffect)  # the answer's own
    thin_bets: ThinBets = field(default_factory=ThinBets)  # the answer's own
    edit_points: EditPoints = field(default_factory=EditPoints)  # the answer's own
    asked_class: int = 0
    lookup_found: bool = False  # this step's lookup found a run: the text has a source, drafted or not

    def new_answer(self) -> None:
        self.confidence.forget()
        self.resume_runs.new_answer()
        self.copy_effect = CopyEffect()
        self.thin_bets = ThinBets()
        self.edit_points = EditPoints()

    def observe_target(self, row: np.ndarray) -> None:
        """The target's row that judged the step's first token."""
        self.confidence.observe(row)

    def asked(self, missed: int) -> None:
        """The draft model is asked, after `missed` accepted tokens it has not read."""
        self.resume_runs.asked(missed)
        self.asked_class = self.confidence.class_index

    def looked(self, lookup: Lookup) -> None:
        """This step's lookup, drafted or not: whether it found a run, and (one that agrees, not a guess) its run."""
        self.lookup_found = bool(lookup.tokens)
        self.edit_points.watch([] if lookup.resumed else lookup.tokens)

    def lookup_cap(self, costs: CostTable, match_length: int, k: int) -> int:
        """How much of a lookup run from `match_length` may be drafted: all k, unless it is thin evidence (thin_bets.py)."""
        if self.confidence.unsure and match_length < THIN_MATCH:
            return self.thin_bets.cap(costs, k)
        return k

    def stepped(self, costs: CostTable, lookup_k: int, settled: Sequence[int]) -> None:
        """A step ended: `lookup_k` lookup tokens drafted (0: lookup did not draft it), `settled` its accepted tokens and
        the target's own."""
        accepted = len(settled) - 1
        self.edit_points.settle(settled)
        self.resume_runs.step(copied=lookup_k > 0 and accepted >= COPY_STEP, sourced=self.lookup_found)
        self.thin_bets.step(costs, lookup_k, accepted)
