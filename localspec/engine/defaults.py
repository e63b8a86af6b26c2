"""Default generation settings: one place, importable without loading llama.cpp (the CLI's help reads them).

DRAFT_P_MIN: on a 2-core CPU with the Qwen2.5-Coder 1.5B/0.5B pair at K=3, a 0.6
cut-off raised speculative throughput 25% over no cut-off (12.4 against 10.0
tok/s over four bench prompts): drafts the target would reject cost a draft
decode and a verify row each. llama.cpp's default is 0, which drafts them anyway.
"""

N_CTX = 4096  # tokens of context, shared by both models: the app, `generate`, `bench`, the planner and the doctor
MIN_N_CTX = 256  # the smallest context the app and the command line accept: a chat template and a short answer
DRAFT_MAX_LIMIT = 32  # the largest K accepted anywhere: beyond it a verify batch costs more than any draft saves
DRAFT_MAX = 3  # K, as llama.cpp's default
DRAFT_P_MIN = 0.6
MAX_TOKENS = 512
TEMPERATURE = 0.0
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05

# auto chooses K itself from the measured costs and acceptance, so its cap is only the safety limit: a long copy on a
# target whose batches are cheap (a GPU, a memory-bound Q8_0 or F16 target) pays drafted far beyond 8.
AUTO_DRAFT_MAX = DRAFT_MAX_LIMIT

