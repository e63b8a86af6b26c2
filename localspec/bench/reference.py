"""llama.cpp's own tools, run on the same models and prompts, for a side-by-side comparison.

`llama-bench` gives the target's plain text-generation rate; `llama-speculative-simple`
gives llama.cpp's speculative rate with the same pair, prompt and K. Both are
built from the llama.cpp tree vendored in the llama-cpp-python sdist (see the
README), never shipped with localspec.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localspec.engine.errors import EngineError

# llama.cpp's own default draft p-min (`common_params_speculative::p_min` in the
# vendored common/common.h): what a user of its example gets without tuning.
LLAMA_CPP_DEFAULT_P_MIN = 0.0


@dataclass(frozen=True)
class ReferenceRun:
    tokens_per_second: float
    n_predict: int
    n_drafted: int
    n_accept: int


def tool(bin_dir: Path, name: str) -> Path:
    path = bin_dir / name
    if not path.exists():
        raise EngineError(f"{path} not found: --llama-cpp-bin must be a llama.cpp build's bin directory containing {name}.")
    return path


def llama_bench_tg(bin_dir: Path, target: Path, threads: int, n_gen: int = 64, depth: int = 0) -> float:
    """The target's plain generation rate (tokens/s) as llama-bench measures it (tg<n_gen> @ d<depth>).

    Depth matters: each token attends to everything before it, so generating
    after a chat prompt is slower than llama-bench's default empty context.
    """
    command = [
        str(tool(bin_dir, "llama-bench")), "-m", str(target), "-p", "0", "-n", str(n_gen), "-d", str(depth),
        "-t", str(threads), "-o", "json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    if result.returncode != 0:
        raise EngineError(f"llama-bench failed: {result.stderr.strip()[-500:]}")
    rows = json.loads(result.stdout)
    return float(next(r["avg_ts"] for r in rows if r.get("n_gen") == n_gen))


_SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
_COUNT = re.compile(r"\b(n_drafted|n_accept)\s+=\s+(\d+)")  # log lines carry a timestamp prefix
_LOST_LOG_TRIES = 4


def speculative_simple(
    bin_dir: Path, target: Path, draft: Path | None, spec_type: str, prompt_text: str, k: int, p_min: float, max_tokens: int, threads: int,
    n_ctx: int,
) -> ReferenceRun:
    """llama.cpp's speculative example at temperature 0 on exactly our rendered prompt, drafting as `spec_type` does
    (draft-simple: the draft model; draft-mtp: the target's MTP layers, no draft file; draft-eagle3: the EAGLE-3 head)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write(prompt_text)
        prompt_file = f.name
    command = [
        str(tool(bin_dir, "llama-speculative-simple")), "-m", str(target), *(["-md", str(draft)] if draft else []), "-f", prompt_file,
        "-n", str(max_tokens), "-c", str(n_ctx), "-t", str(threads), "-td", str(threads), "--temp", "0",
        "--spec-type", spec_type, "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", str(p_min),
    ]
    try:
        # Its closing lines go through llama.cpp's log thread, which the program leaves unjoined at exit (common/log.cpp:
        # "logs may be lost if not flushed"): here 5 runs in 60 exited 0 without them, so such a run is run again.
        for _ in range(_LOST_LOG_TRIES):
            result = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
            output = result.stdout + result.stderr
            parsed = parse_speculative_simple(output)
            if result.returncode != 0 or parsed is not None:
                break
    finally:
        Path(prompt_file).unlink(missing_ok=True)
    if result.returncode != 0 or parsed is None:
        raise EngineError(f"llama-speculative-simple failed: {output.strip()[-500:]}")
    return parsed


def parse_speculative_simple(output: str) -> ReferenceRun | None:
    """The speed and draft counters from llama-speculative-simple's closing log lines."""
    speed = _SPEED.search(output)
    counts = {name: int(value) for name, value in _COUNT.findall(output)}
    if speed is None or len(counts) < 2:  # a line lost (speculative_simple), not a run that drafted nothing
        return None
    return ReferenceRun(float(speed.group(3)), int(speed.group(1)), counts["n_drafted"], counts["n_accept"])
