"""What the draft model's catch-up costs a step: reading the accepted text it missed, spread over the asks it buys.

The draft model reads what it has not seen (a plain or lookup stretch, or the
prompt itself the first time) in one batch before it drafts. That batch is paid
once, and the draft then drafts with a token or two to read a step for as long as
it keeps being asked. Charged whole to one step, a draft that had sat out a plain
stretch was never resumed (on code it had won 1.6x plain, auto then ran at 1.06x);
spread over a fixed 8 steps, it was resumed on code edits after every copied
stretch, where lookup takes the step back after one to four asks: on a Q8_0 target
each resume read 25-120 copied tokens for 0.3-0.7 s, and code edits ran 5-15%
slower than lookup alone.

So the catch-up is spread over the asks a resume has been seen to buy: how many
times the draft model was asked from one resume to the next (or to the answer's
end), learned with decay. A resume is an ask that reads at least RESUME_MIN
missed tokens: after a plain or lookup step or two the draft is asked again for
next to nothing, and the run goes on (fib on a Q8_0 target: one resume, then 30
asks with a lookup step here and there).

Within an answer, lookup copying says the same sooner: where it copied (drafted
and had COPY_STEP tokens or more accepted) in a share s of the last steps, a
resumed draft is expected to keep about 1/s of them before lookup takes one back
and the draft falls behind again. A rename on a
Q8_0 target resumed the draft after fib's 30-ask run had taught a spread of 15:
it bought 3 asks, and the answer ran at 1.74x plain where lookup alone ran 2.5x.
A new answer starts at a share of one half, so the resume that reads the prompt
waits for the answer's first steps: taken at once, it cost every rename its first
0.7 s (1.95x plain, three rounds of three) for the four asks it bought.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.engine.drafters.auto.costs import CostTable

RUN_PRIOR = 8.0  # asks a resume is assumed to buy before any was seen (the fixed spread this replaced)
RUN_PRIOR_WEIGHT = 1.0  # ...worth this many observed runs
RUN_DECAY = 0.8  # per run: the last few runs weigh most (code edits and code writing buy different runs)
RESUME_MIN = 8  # missed tokens that make an ask a resume, whose run teaches the spread
COPY_STEP = 3  # lookup tokens a step must have had accepted to count as a copy (ResumeRuns.step)
LOOKUP_SHARE_DECAY = 0.8  # per step: the share of the last few steps that lookup copied in
# A new answer's share before its first step: a resume there reads the whole prompt, and only the answer's first steps
# tell a rewrite, where lookup takes the step back at once, from new code (the module's docstring has the numbers).
NEW_ANSWER_LOOKUP_SHARE = 0.5


@dataclass
class ResumeRuns:
    """How many asks a resume of the draft model buys (until the next resume), learned with decay from the runs seen."""

    total: float = RUN_PRIOR * RUN_PRIOR_WEIGHT
    weight: float = RUN_PRIOR_WEIGHT
    current: int | None = None  # asks since the last resume (None: none yet in this answer)
    lookup_share: float = NEW_ANSWER_LOOKUP_SHARE  # of this answer's last steps, decayed: how many lookup copied in

    @property
    def learned(self) -> float:
        """The asks resumes have bought."""
        return max(1.0, self.total / self.weight)

    @property
    def expected(self) -> float:
        """The asks a resume now is expected to buy: as many as resumes have bought, and no more than lookup leaves."""
        return min(self.learned, 1 / self.lookup_share) if self.lookup_share > 0 else self.learned

    def step(self, copied: bool, sourced: bool = False) -> None:
        """A step was taken; `copied`: lookup drafted it and a copy's worth was accepted (a step or two of a short match
        in new code is not a copy: counted, it kept the draft from ever resuming on fib). `sourced`: lookup found a run
        here, so the text has a source even where the run broke at an edit. Until the draft's first resume in the answer
        (the one that reads the prompt) that is neither a copy nor new text, and leaves the share as it was: a rewrite's
        first lines break its runs at every renamed name, and read as new code they let the draft resume on the whole
        prompt before the copy showed. Later in an answer it counts as new text, as before: kept there too, it held the
        draft back from the conversions and fixes it was winning (yaml-json 1.33x -> 1.19x plain on a Q8_0 target)."""
        if sourced and not copied and self.current is None:
            return
        self.lookup_share = LOOKUP_SHARE_DECAY * self.lookup_share + (1 - LOOKUP_SHARE_DECAY) * copied

    def asked(self, missed: int) -> None:
        """The draft model was asked, after it `missed` accepted tokens."""
        if missed >= RESUME_MIN:
            self.end()
            self.current = 1
        elif self.current is not None:
            self.current += 1

    def new_answer(self) -> None:
        """The run in progress ends with its answer; lookup's share is the new answer's own."""
        self.end()
        self.lookup_share = NEW_ANSWER_LOOKUP_SHARE

    def end(self) -> None:
        """The run in progress is over (a resume, or the answer's end): it teaches the spread."""
        if self.current is not None:
            self.total = RUN_DECAY * self.total + self.current
            self.weight = RUN_DECAY * self.weight + 1
            self.current = None


def catch_up_price(costs: CostTable, missed: int, spread: float, then: int = 0) -> float:
    """The draft's first pass of an ask, reading the `missed` accepted tokens it has not seen, then `then` more (a hybrid's
    lookup tokens), as decide() weighs it: one token's pass, plus the rest of the batch spread over `spread` asks."""
    first = costs.draft_batch(1 + then)
    return first + (costs.draft_batch(max(1, missed) + then) - first) / spread
