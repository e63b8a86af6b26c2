"""llama.cpp's AMX weight buffer is left out (localspec/engine/amx.py): a GCC 12 build faults in its batched matmul.

Each check runs in a child process: the list is the CPU backend's, once per process, and a fault must fail this test
rather than end the suite. On a CPU with AMX and a build that has it, the real target's first batch crashed before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD_TIMEOUT_S = 300


def run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def test_amx_leaves_the_list_and_the_other_buffers_keep_their_order():
    child = run_child(
        "import json, llama_cpp\n"
        "from localspec.engine import amx\n"
        "llama_cpp.llama_backend_init(); llama_cpp.llama_supports_gpu_offload()\n"
        "before = amx.cpu_weight_buffers()\n"
        "removed = amx.keep_weights_off_amx()\n"
        "print(json.dumps({'before': before, 'removed': removed, 'after': amx.cpu_weight_buffers(), "
        "'again': amx.keep_weights_off_amx()}))\n"
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen["after"] == [name for name in seen["before"] if name != "AMX"]
    assert seen["removed"] == ("AMX" in seen["before"])
    assert seen["again"] is False  # nothing left to remove


def test_the_real_target_reads_a_long_batch_without_faulting(real_models: tuple[Path, Path]):
    """A 64-token batch is what faulted (the AMX matmul runs for batches, a single token takes another kernel)."""
    target, _ = real_models
    child = run_child(
        "import json, sys\n"
        "from localspec.engine import amx\n"
        "from localspec.engine.model import Model, ModelConfig\n"
        "with Model(sys.argv[1], ModelConfig(n_ctx=512, n_threads=2)) as model:\n"
        "    tokens = model.tokenize('def fib(n):\\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\\n' * 4, add_special=False)[:64]\n"
        "    rows = model.decode(tokens, outputs=2)\n"
        "    print(json.dumps({'buffers': amx.cpu_weight_buffers(), 'rows': list(rows.shape), 'n': len(tokens)}))\n",
        str(target),
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    seen = json.loads(child.stdout)
    assert "AMX" not in seen["buffers"] and seen["n"] == 64 and seen["rows"][0] == 2
