"""OpenAI's frequency and presence penalties and logit bias, applied to the target's rows: the distribution a request
asked for is the penalised one, and speculation stays lossless against it.

Row i of a verify pass is the target's next-token distribution after the answer so far and the draft's first i
tokens, so the penalties on row i count those tokens too: a drafted token is judged exactly as the target would
have sampled it, had it been generated one token at a time (llama.cpp's sampler chain applies them the same way,
token by token). The draft proposes from its own, unpenalised distribution; verification corrects for that as for
any other difference between the two models. One answer's counts live here, so one object serves one request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

PENALTY_RANGE = 2.0  # OpenAI's: each penalty lies in [-2, 2]
BIAS_RANGE = 100.0  # OpenAI's: a bias lies in [-100, 100]; -inf (llama.cpp's `false`) bans the token


@dataclass
class Penalties:
    frequency: float = 0.0  # subtracted from a token's logit once for each time the answer has used it
    presence: float = 0.0  # subtracted once from the logit of every token the answer has used
    bias: Mapping[int, float] = field(default_factory=dict)  # added to a token's logit on every row
    counts: Counter[int] = field(default_factory=Counter)  # the answer's tokens so far

    def __post_init__(self) -> None:
        self._bias_ids = np.fromiter(self.bias.keys(), dtype=np.int64, count=len(self.bias))
        self._bias_values = np.fromiter(self.bias.values(), dtype=np.float32, count=len(self.bias))

    def adjust(self, rows: np.ndarray, draft: Sequence[int]) -> np.ndarray:
        """The verify rows as the penalised target has them: row i after the answer so far and draft[:i] (a copy: the
        rows are llama.cpp's own buffer)."""
        adjusted = np.array(rows, dtype=np.float32, copy=True)
        if len(self._bias_ids):
            adjusted[:, self._bias_ids] += self._bias_values
        if not (self.frequency or self.presence):
            return adjusted
        counts = Counter(self.counts)
        for i in range(len(adjusted)):
            if counts:
                ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
                times = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
                adjusted[i, ids] -= self.frequency * times + self.presence
            if i < len(draft):
                counts[draft[i]] += 1
        return adjusted

    def accept(self, tokens: Sequence[int]) -> None:
        """What the verdict emitted joins the answer's counts."""
        self.counts.update(tokens)
