"""llama.cpp's AMX weight buffer is kept only where this build's AMX matmul is sound (localspec/engine/llama/amx.py).

A GCC 12 build faults in the AMX batched matmul; a sound build runs it, and it is much faster there. Each check runs
in a child process: the buffer list is the CPU backend's, once per process, and a fault must fail this test rather
than end the suite. The verdict is held against what the build really does with the real target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.machine import llama_build

CHILD_TIMEOUT_S = 300
VERDICT = (
    "import json\n"
    "from localspec.engine.llama import amx\n"
    "v = amx.amx_verdict()\n"
    "print(json.dumps({'offered': v.offered, 'sound': v.sound, 'reason': v.reason}))\n"
)
LONG_BATCH = (  # a 64-token batch: the AMX matmul runs for batches, a single token takes another kernel
    "import json, sys\n"
    "from localspec.engine.llama import amx, model as model_module\n"
    "if sys.argv[2] == 'keep-amx':\n"
    "    model_module.amx.settle_amx = lambda: None\n"
    "with model_module.Model(sys.argv[1], model_module.ModelConfig(n_ctx=512, n_threads=2)) as model:\n"
    "    tokens = model.vocab.tokenize('def fib(n):\\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\\n' * 4, add_special=False)[:64]\n"
    "    rows = model.decode(tokens, outputs=2)\n"
    "    print(json.dumps({'buffers': amx.cpu_weight_buffers(), 'rows': list(rows.shape), 'n': len(tokens)}))\n"
)


SOUND_BUILD_LOAD = (  # the engine's own load: what did settling ask of ggml in this process before llama.cpp loaded?
    "import json, sys\n"
    "from localspec.engine.llama import amx, ggml_library, model as model_module\n"
    "import llama_cpp\n"
    "asked, array, read, features = [], amx._extra_buffer_array, [], llama_cpp.llama_print_system_info\n"
    "amx._extra_buffer_array = lambda: asked.append(1) or array()\n"
    "llama_cpp.llama_print_system_info = lambda: read.append(1) or features()\n"
    "model_module._init_backend()\n"
    "early = {'queries': len(asked), 'features_read': len(read), 'ggml_opened': ggml_library.ggml_library.cache_info().currsize}\n"
    "with model_module.Model(sys.argv[1], model_module.ModelConfig(n_ctx=512, n_threads=2)) as model:\n"
    "    tokens = model.vocab.tokenize('def fib(n):\\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\\n' * 4, add_special=False)[:64]\n"
    "    rows = model.decode(tokens, outputs=2)\n"
    "    v = amx.settle_amx()\n"
    "    print(json.dumps({'early': early, 'verdict': {'offered': v.offered, 'sound': v.sound, 'reason': v.reason},\n"
    "                      'buffers': amx.cpu_weight_buffers(), 'rows': list(rows.shape), 'n': len(tokens)}))\n"
)


def run_child(code: str, *args: str, cache: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = os.environ | (env or {}) | ({"XDG_CACHE_HOME": str(cache)} if cache else {})
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)


def verdict(cache: Path) -> dict:
    child = run_child(VERDICT, cache=cache)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


def test_amx_leaves_the_list_and_the_other_buffers_keep_their_order():
    child = run_child(
        "import json, llama_cpp\n"
        "from localspec.engine.llama import amx\n"
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


def test_the_verdict_is_what_the_build_does_with_the_real_target(real_models: tuple[Path, Path], tmp_path: Path):
    """The probe's small matmul against the real target's long batch with AMX kept: a broken build must die there."""
    target, _ = real_models
    seen = verdict(tmp_path)
    kept = run_child(LONG_BATCH, str(target), "keep-amx", cache=tmp_path)
    if not seen["offered"]:  # no AMX on this CPU or in this build: nothing to keep or to fault
        assert kept.returncode == 0 and "AMX" not in json.loads(kept.stdout)["buffers"], kept.stderr[-2000:]
    elif seen["sound"]:
        assert kept.returncode == 0, f"exit {kept.returncode}: {kept.stderr[-2000:]}"
        assert "AMX" in json.loads(kept.stdout)["buffers"]
    else:  # this machine's GCC 12 wheel: the probe saw what the target's first batch does
        assert kept.returncode < 0 or "wrong" in seen["reason"], (seen, kept.returncode)


def test_the_engine_keeps_amx_exactly_where_it_is_sound(real_models: tuple[Path, Path], tmp_path: Path):
    target, _ = real_models
    child = run_child(LONG_BATCH, str(target), "settle", cache=tmp_path)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    seen, used = json.loads(child.stdout), verdict(tmp_path)
    assert ("AMX" in seen["buffers"]) == (used["offered"] and used["sound"])
    assert seen["n"] == 64 and seen["rows"][0] == 2


def test_the_verdict_is_kept_per_build_and_probed_again_when_unreadable(tmp_path: Path):
    first = verdict(tmp_path)
    store = tmp_path / "localspec" / "amx-verdicts.json"
    if not first["offered"] and not cpu_has_amx():
        assert not store.exists()  # nothing to probe, nothing kept
        return
    if not first["offered"] and not store.exists():
        return  # the kernels are in the build, but this machine refused the tile data: not kept, it is the machine's
    kept = json.loads(store.read_text())
    (key,) = kept["builds"]
    kept["builds"][key]["reason"] = "read from the cache"
    store.write_text(json.dumps(kept))
    assert verdict(tmp_path) == first | {"reason": "read from the cache"}  # no probe: the kept verdict
    store.write_text("{not json")
    assert verdict(tmp_path) == first  # probed again, and kept again
    assert json.loads(store.read_text())["builds"][key]["reason"] == first["reason"]


@pytest.fixture(scope="module")
def sound_amx_build() -> Path:
    """llama.cpp's own shared libraries, built here once (native code; the tile-config fix under GCC < 13, so its AMX
    matmul is sound), for LLAMA_CPP_LIB_PATH."""
    return llama_build.ensure_built(lambda _stage: None, cuda=False)


def cpu_has_amx() -> bool:
    """Linux's word for it: the AMX tiles and their int8 ops (elsewhere: unknown, taken as no)."""
    try:
        flags = next(line.split() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return {"amx_tile", "amx_int8"} <= set(flags)


def test_a_sound_amx_build_loads_and_decodes_with_amx_kept(sound_amx_build: Path, real_models: tuple[Path, Path], tmp_path: Path):
    """A build whose AMX matmul is sound keeps AMX, and settling its verdict leaves the process as llama.cpp alone would:
    no extra-buffer query, no feature list read and no libggml opened before the load (the probe's child asks
    instead). First start (probed) and second (cached)."""
    target, _ = real_models
    for start in ("probed", "cached"):
        child = run_child(SOUND_BUILD_LOAD, str(target), cache=tmp_path, env={"LLAMA_CPP_LIB_PATH": str(sound_amx_build)})
        assert child.returncode == 0, f"{start}: exit {child.returncode}: {child.stderr[-2000:]}"
        seen = json.loads(child.stdout)
        assert seen["n"] == 64 and seen["rows"][0] == 2, (start, seen)
        assert seen["early"] == {"queries": 0, "features_read": 0, "ggml_opened": 0}, (start, seen)
        if cpu_has_amx():  # a native build on an AMX CPU offers it, and this one is sound
            assert seen["verdict"]["offered"] and seen["verdict"]["sound"], (start, seen)
            assert "AMX" in seen["buffers"], (start, seen)
        else:
            assert "AMX" not in seen["buffers"], (start, seen)
