"""The GPU check (tests/tools/gpu_check.py) runs through here on a CPU build: llama.cpp built once from the vendored
sources, synthetic models with the real tokenizer (a Qwen2 target with drafts, a Qwen3.5 target with its MTP block),
llama.cpp's tools and localspec side by side. It reports; what its
numbers mean on a GPU is for whoever runs it there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_gpu_check_runs_here_on_a_cpu_build(tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "tests.tools.gpu_check", "--cpu", "--shape", "small", "--tokens", "32", "--rounds", "1",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    for row in ("plain: llama-bench", "layer-skip K=4: speculative-simple / localspec model", "layer-skip K=8: speculative-simple / localspec model",
                "mtp K=2: speculative-simple / localspec mtp", "mtp K=4: speculative-simple / localspec mtp", "auto ÷ the best fixed drafter",
                "Greedy departures"):
        assert row in result.stdout, (row, result.stdout[-3000:])
    assert result.stdout.count("auto ÷ the best fixed drafter") == 3  # the layer-skip and unrelated drafts, and the MTP head
    assert {"small-layer-skip.gguf", "small-target.gguf", "small-unrelated.gguf", "small-mtp-target.gguf"} <= {path.name for path in tmp_path.glob("*.gguf")}
    assert all(json.loads(path.read_text()) for path in tmp_path.glob("*.json"))
