"""What auto keeps of one sequence between its steps, beside what every sequence teaches together.

How sure the target has lately been (confidence.py), how many asks a resume of
the draft model buys there (catch_up.py), how its long copies hold against the
learned rates (agreement.CopyEffect), and the confidence class the draft was
last asked in, which its outcome teaches. The one-sequence controller keeps one;
the batch planner keeps one per slot, so each slot is judged as auto judges a
lone answer. Without them the planner priced every catch-up whole and learned
the draft as one rate for prose and code alike: on a Q8_0 target, one client of
`serve --parallel 4` wrote fib at 9.4 tok/s where `--parallel 1` (auto) wrote it
at 13.6.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from localspec.engine.drafters.auto.agreement import CopyEffect
from localspec.engine.drafters.auto.catch_up import COPY_STEP, ResumeRuns
from localspec.engine.drafters.auto.confidence import TargetConfidence


@dataclass
class SequenceBelief:
    confidence: TargetConfidence = field(default_factory=TargetConfidence)
    resume_runs: ResumeRuns = field(default_factory=ResumeRuns)  # kept across the sequence's answers, as it learns
    copy_effect: CopyEffect = field(default_factory=CopyEffect)  # the answer's own
    asked_class: int = 0
    lookup_found: bool = False  # this step's lookup found a run: the text has a source, drafted or not

    def new_answer(self) -> None:
        self.confidence.forget()
        self.resume_runs.new_answer()
        self.copy_effect = CopyEffect()

    def observe_target(self, row: np.ndarray) -> None:
        """The target's row that judged the step's first token."""
        self.confidence.observe(row)

    def asked(self, missed: int) -> None:
        """The draft model is asked, after `missed` accepted tokens it has not read."""
        self.resume_runs.asked(missed)
        self.asked_class = self.confidence.class_index

    def looked(self, found: bool) -> None:
        """This step's lookup found a run (`found`) or none."""
        self.lookup_found = found

    def stepped(self, lookup_drafted: bool, accepted: int) -> None:
        """A step ended: whether lookup drafted it, and how many of its tokens were accepted."""
        self.resume_runs.step(copied=lookup_drafted and accepted >= COPY_STEP, sourced=self.lookup_found)
