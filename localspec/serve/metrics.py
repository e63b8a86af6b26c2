"""`GET /metrics`: Prometheus text with llama.cpp's metric names, so existing dashboards read it as they read llama-server."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from localspec.engine.stats import GenerationStats


@dataclass
class Metrics:
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    predicted_tokens: int = 0
    predicted_seconds: float = 0.0
    requests: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, stats: GenerationStats) -> None:
        with self._lock:
            self.requests += 1
            self.prompt_tokens += stats.prompt_n - stats.cache_n
            self.prompt_seconds += stats.prompt_ms / 1000
            self.predicted_tokens += stats.predicted_n
            self.predicted_seconds += stats.predicted_ms / 1000
            self.draft_tokens += stats.draft_n
            self.accepted_tokens += stats.draft_n_accepted
            for totals, counts in ((self.drafted_per_pos, stats.draft_n_per_pos), (self.accepted_per_pos, stats.n_acc_tokens_per_pos)):
                totals.extend([0] * (len(counts) - len(totals)))
                for i, n in enumerate(counts):
                    totals[i] += n

    def render(self, processing: int, deferred: int) -> str:
        with self._lock:
            rows = [
                ("counter", "prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_tokens),
                ("counter", "prompt_seconds_total", "Prompt process time.", self.prompt_seconds),
                ("counter", "tokens_predicted_total", "Number of generation tokens processed.", self.predicted_tokens),
                ("counter", "tokens_predicted_seconds_total", "Predict process time.", self.predicted_seconds),
                ("counter", "requests_total", "Generation requests completed (localspec).", self.requests),
                ("counter", "spec_decode_num_draft_tokens_total", "Draft tokens proposed to the target.", self.draft_tokens),
                ("counter", "spec_decode_num_accepted_tokens_total", "Draft tokens the target accepted.", self.accepted_tokens),
                ("gauge", "requests_processing", "Number of requests processing.", processing),
                ("gauge", "requests_deferred", "Number of requests deferred.", deferred),
            ]
            lines = []
            for kind, name, help_text, value in rows:
                lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value}"]
            for name, counts, help_text in (("spec_decode_num_draft_tokens_per_pos", self.drafted_per_pos, "Drafts that reached each position."),
                                            ("spec_decode_num_accepted_tokens_per_pos", self.accepted_per_pos, "Accepted drafts by position.")):
                lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} counter"]
                lines += [f'llamacpp:{name}{{position="{i}"}} {n}' for i, n in enumerate(counts)]
        return "\n".join(lines) + "\n"
