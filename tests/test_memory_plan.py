"""The memory planner: its sizes against what llama.cpp allocates, and its decisions for made-up GPU and RAM sizes.

Device memory is the planner's input, so the tests pass sizes in (everything
fits, only the draft fits, nothing fits); the footprints always come from real
GGUF headers, and the sizes are checked against llama.cpp's own log.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from gguf.constants import GGMLQuantizationType

from localspec.gguf.header import GGUFHeader, TensorInfo, read_local_header
from localspec.machine.memory_plan import (
    HEADROOM_MIN_BYTES,
    HEADROOM_SHARE,
    DeviceMemory,
    ModelFootprint,
    PairTooBigError,
    footprint,
    plan_memory,
    read_footprint,
)
from tests.conftest import cli

GiB = 2**30
N_CTX = 4096


def gpu_free_leaving(budget: int) -> int:
    """The free GPU memory that leaves at least `budget` (and at most a byte more) after the planner's headroom."""
    free = max(budget + HEADROOM_MIN_BYTES, math.ceil(budget / (1 - HEADROOM_SHARE)))
    assert budget <= DeviceMemory(free, None).gpu_budget <= budget + 1
    return free


@pytest.fixture(scope="module")
def real(real_models) -> tuple[ModelFootprint, ModelFootprint]:
    target, draft = real_models
    return read_footprint(target, N_CTX), read_footprint(draft, N_CTX)


@pytest.fixture(scope="module")
def tiny_pair(tiny) -> tuple[ModelFootprint, ModelFootprint]:
    return read_footprint(tiny["target"], N_CTX), read_footprint(tiny["near"], N_CTX)


def _llama_log_sizes(log: Path) -> dict[str, list[float]]:
    """MiB per buffer kind, in load order (target, then draft), as llama.cpp reports them."""
    text = log.read_text()
    return {
        "weights": [float(v) for v in re.findall(r"CPU_Mapped model buffer size =\s+([\d.]+) MiB", text)],
        "kv": [float(v) for v in re.findall(r"CPU KV buffer size =\s+([\d.]+) MiB", text)],
        "compute": [float(v) for v in re.findall(r"sched_reserve:\s+CPU compute buffer size =\s+([\d.]+) MiB", text)],
    }


@pytest.mark.parametrize("pair", ["tiny", "real"])
def test_generate_json_reports_a_plan_that_matches_what_llama_cpp_allocates(pair, request, tmp_path):
    target, draft = (request.getfixturevalue("tiny")["target"], request.getfixturevalue("tiny")["near"]) if pair == "tiny" \
        else request.getfixturevalue("real_models")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = cli("generate", "--target", str(target), "--draft", str(draft), "--prompt", "hi", "--max-tokens", "4",
                 "--ctx-size", str(N_CTX), "--json", env=env)
    assert result.returncode == 0, result.stderr
    device = json.loads(result.stdout)["device"]
    plan = device["plan"]
    assert device["backend"] == "CPU" and not device["gpu_offload"] and device["gpus"] == []
    assert plan["verdict"] == "CPU only (no GPU offload in this build)" and plan["gpu_bytes"] == 0
    assert [(o["role"], o["on_gpu"]) for o in device["offloaded"]] == [("target", 0), ("draft", 0)]
    logged = _llama_log_sizes(tmp_path / "state" / "localspec" / "log" / "llama.log")
    for index, role in enumerate(["target", "draft"]):
        model = plan["models"][role]
        assert model["gpu_layers"] == 0 and model["ram_bytes"] == model["weight_bytes"] + model["kv_bytes"] + model["compute_bytes"]
        assert model["weight_bytes"] / 2**20 == pytest.approx(logged["weights"][index], abs=0.01)
        assert model["kv_bytes"] / 2**20 == pytest.approx(logged["kv"][index], abs=0.01)
        assert model["compute_bytes"] / 2**20 == pytest.approx(logged["compute"][index], rel=0.03)


def test_real_pair_everything_fits(real):
    target, draft = real
    plan = plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free=8 * GiB, ram_available=16 * GiB))
    assert (plan.draft.gpu_layers, plan.target.gpu_layers) == (25, 29)  # 24 and 28 blocks, each with its output layer
    assert plan.verdict == "all on the GPU"
    assert plan.gpu_bytes == target.gpu_bytes(29) + draft.gpu_bytes(25) <= plan.memory.gpu_budget
    assert plan.ram_bytes == target.input_bytes + draft.input_bytes  # only the token embeddings stay on the CPU


def test_real_pair_only_the_draft_fits(real):
    target, draft = real
    budget = draft.gpu_bytes(draft.n_offloadable) + target.gpu_bytes(1) - 16  # the target's output layer misses by a hair
    plan = plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free_leaving(budget), 16 * GiB))
    assert (plan.draft.gpu_layers, plan.target.gpu_layers) == (25, 0)
    assert plan.verdict == "draft on the GPU, target on the CPU"


def test_real_pair_target_takes_what_the_draft_leaves(real):
    target, draft = real
    plan = plan_memory(target, draft, N_CTX, DeviceMemory(2 * GiB, 16 * GiB))
    left = plan.memory.gpu_budget - draft.gpu_bytes(draft.n_offloadable)
    assert plan.draft.gpu_layers == 25 and 0 < plan.target.gpu_layers < 29
    assert target.gpu_bytes(plan.target.gpu_layers) <= left < target.gpu_bytes(plan.target.gpu_layers + 1)
    assert plan.verdict == f"draft on the GPU, target split ({plan.target.gpu_layers}/29 layers on the GPU)"


def test_real_pair_nothing_fits_on_the_gpu_but_in_ram(real):
    target, draft = real
    plan = plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free_leaving(draft.gpu_bytes(1) - 16), 16 * GiB))
    assert (plan.draft.gpu_layers, plan.target.gpu_layers) == (0, 0)
    assert plan.verdict == "all on the CPU (the GPU is too small)"


def test_real_pair_nothing_fits_at_all_is_refused_with_the_numbers_and_the_options(real):
    target, draft = real
    with pytest.raises(PairTooBigError) as refused:
        plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free=512 * 2**20, ram_available=1 * GiB))
    message = str(refused.value)
    assert "does not fit in this machine's memory at a 4096-token context" in message
    assert "it needs 2.4 GB" in message and "The GPU takes 0 B of it (536.9 MB free)" in message
    assert "so 2.4 GB must go in RAM, where 1.1 GB is available" in message
    assert "KV cache 117.4 MB" in message  # llama.cpp's 112 MiB for the target
    assert "a smaller quantization (the target is Q4_K_M)" in message
    assert "a smaller context does not help enough (the weights alone nearly fill the RAM)" in message  # 2.3 GB of weights
    assert "a smaller pair" in message


def test_tiny_models_three_memory_sizes(tiny_pair):
    target, draft = tiny_pair
    everything = plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free_leaving(target.total_bytes + draft.total_bytes), 1 * GiB))
    assert (everything.draft.gpu_layers, everything.target.gpu_layers) == (3, 3)
    only_draft = plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free_leaving(draft.gpu_bytes(3) + target.gpu_bytes(1) - 1), 1 * GiB))
    assert (only_draft.draft.gpu_layers, only_draft.target.gpu_layers) == (3, 0)
    with pytest.raises(PairTooBigError, match="does not fit"):
        plan_memory(target, draft, N_CTX, DeviceMemory(gpu_free=None, ram_available=target.total_bytes + draft.total_bytes - 1))
    fits_in_ram = plan_memory(target, draft, N_CTX, DeviceMemory(None, target.total_bytes + draft.total_bytes))
    assert fits_in_ram.ram_bytes == target.total_bytes + draft.total_bytes and fits_in_ram.gpu_bytes == 0


def test_layers_go_on_the_gpu_in_llama_cpps_order(tiny_pair):
    """The output layer first (with the compute buffer), then the blocks from the last one back; the embedding never."""
    target, _ = tiny_pair
    assert target.n_layer == 2 and target.n_offloadable == 3
    assert target.gpu_bytes(1) == target.output_bytes + target.compute_bytes
    assert target.gpu_bytes(2) == target.gpu_bytes(1) + target.block_bytes[1] + target.block_kv_bytes[1]
    assert target.gpu_bytes(3) == target.gpu_bytes(-1 + 4) == target.total_bytes - target.input_bytes
    assert target.gpu_bytes(99) == target.gpu_bytes(3)


def test_the_users_counts_win_over_the_planner(real):
    target, draft = real
    memory = DeviceMemory(2 * GiB, 16 * GiB)
    draft_on_cpu = plan_memory(target, draft, N_CTX, memory, draft_gpu_layers=0)
    assert draft_on_cpu.draft.gpu_layers == 0 and draft_on_cpu.draft.user_set
    assert draft_on_cpu.target.gpu_layers == 29  # the target now has the whole GPU
    fixed = plan_memory(target, draft, N_CTX, memory, target_gpu_layers=10)
    assert fixed.target.gpu_layers == 10 and fixed.draft.gpu_layers == 25 and not fixed.warnings
    too_many = plan_memory(target, draft, N_CTX, memory, target_gpu_layers=-1)
    assert too_many.target.gpu_layers == 29
    assert too_many.warnings and "the target's 29 GPU layers need" in too_many.warnings[0] and "loading may fail" in too_many.warnings[0]
    no_offload = plan_memory(target, draft, N_CTX, DeviceMemory(None, 16 * GiB), target_gpu_layers=-1, draft_gpu_layers=5)
    assert (no_offload.target.gpu_layers, no_offload.draft.gpu_layers) == (0, 0)  # as llama.cpp: no offload, no GPU layers


def test_unified_memory_counts_the_gpus_share_against_ram(real):
    target, draft = real
    need = target.total_bytes + draft.total_bytes
    plan = plan_memory(target, draft, N_CTX, DeviceMemory(8 * GiB, need, unified=True))
    assert plan.verdict == "all on the GPU"
    with pytest.raises(PairTooBigError):
        plan_memory(target, draft, N_CTX, DeviceMemory(8 * GiB, need - 1, unified=True))


def test_kv_cache_follows_context_and_cache_type(real_models):
    target = real_models[0]
    f16 = read_footprint(target, N_CTX)
    assert f16.kv_bytes == 28 * 2 * (128 + 128) * 2 * N_CTX  # blocks × KV heads × (key + value length) × 2 bytes × tokens
    assert read_footprint(target, N_CTX // 2).kv_bytes * 2 == f16.kv_bytes
    q8 = footprint([read_local_header(target)], N_CTX, target.name, cache_type=GGMLQuantizationType.Q8_0)
    assert q8.kv_bytes * 64 == f16.kv_bytes * 34  # q8_0: 34 bytes per 32 values, f16: 64


def test_a_tied_head_needs_a_copy_of_the_embedding_on_the_gpu_only():
    embedding = TensorInfo("token_embd.weight", (64, 1000), int(GGMLQuantizationType.F16))
    norm = TensorInfo("output_norm.weight", (64,), int(GGMLQuantizationType.F32))
    block = TensorInfo("blk.0.attn_q.weight", (64, 64), int(GGMLQuantizationType.F32))
    metadata = {"general.architecture": "llama", "llama.block_count": 1, "llama.embedding_length": 64,
                "llama.attention.head_count": 4, "tokenizer.ggml.tokens": ["t"] * 1000}
    tied = footprint([GGUFHeader(3, metadata, [embedding, norm, block], 0, 0)], 256, "tied")
    assert (tied.input_bytes, tied.output_bytes, tied.block_bytes) == (64 * 1000 * 2, 64 * 4, (64 * 64 * 4,))
    assert tied.head_copy_bytes == 64 * 1000 * 2
    assert tied.gpu_bytes(1) == tied.output_bytes + tied.head_copy_bytes + tied.compute_bytes
    assert tied.ram_bytes(0) == tied.total_bytes  # on the CPU, the head reads the embedding in place


def test_a_pair_too_big_for_this_machine_is_refused_before_loading(tiny):
    """A context no machine has memory for: the command says so, with the options, and loads nothing."""
    result = cli("generate", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), "--prompt", "hi",
                 "--ctx-size", str(2**30))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "does not fit in this machine's memory at a 1073741824-token context" in result.stderr
    assert "smaller quantization" in result.stderr and "smaller pair" in result.stderr
    fits = re.search(r"about --ctx-size (\d+) fits", result.stderr)  # what this machine's RAM holds, as a power of two
    assert fits is not None and 512 <= int(fits.group(1)) < 2**30 and int(fits.group(1)).bit_count() == 1, result.stderr


def test_the_self_draft_is_planned_from_the_targets_header_and_gets_only_what_the_target_leaves(tiny, tmp_path):
    from localspec.engine.drafters.self_draft import cached_self_draft
    from localspec.machine.memory_plan import plan_pair

    target = read_footprint(tiny["target"], N_CTX)
    made = cached_self_draft(tiny["target"], 1, tmp_path)
    cut = read_footprint(made.path, N_CTX)
    planned = target.first_blocks(1)
    assert (planned.weight_bytes, planned.kv_bytes, planned.n_layer) == (cut.weight_bytes, cut.kv_bytes, cut.n_layer)

    budget = target.gpu_bytes(target.n_offloadable) + planned.gpu_bytes(1)  # the target, and the self-draft's output layer only
    plan = plan_memory(target, None, N_CTX, DeviceMemory(gpu_free_leaving(budget), 16 * GiB), self_draft=planned)
    assert plan.target.gpu_layers == target.n_offloadable and plan.self_draft_gpu_layers == 1
    assert plan.gpu_bytes <= plan.memory.gpu_budget
    assert [p.role for p in plan.placements] == ["target", "self-draft"] and "self-draft" in plan.to_dict()["models"]

    assert plan_pair(tiny["target"], tiny["near"], N_CTX, DeviceMemory(None, 16 * GiB)).self_draft_gpu_layers == 0  # not planned: CPU
    with_self = plan_pair(tiny["target"], None, N_CTX, DeviceMemory(None, 16 * GiB), with_self_draft=True, self_draft_layers=1)
    assert with_self.self_draft is not None and with_self.self_draft.footprint.n_layer == 1
