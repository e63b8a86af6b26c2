"""How many layers of the target and of the draft go on the GPU, decided from the GGUF headers before any load.

A header gives every tensor's shape and type, so the weights of each layer, the
KV cache per token and the compute buffer are known without reading a byte of
the weights. The policy: the draft goes fully on the GPU first, because
drafting is a chain of one-token steps where only latency counts; the target
fills what is left, keeping headroom for the driver and for estimates that run
short. The user can fix either count. A pair that fits in neither RAM nor VRAM
is refused with the numbers before gigabytes are read.

Placement follows llama.cpp 0.3.36 (src/llama-model.cpp, load_tensors):
n_gpu_layers counts n_layer + 1 layers. The output layer (output norm and
head) is offloaded first, then the repeating blocks from the last one
backwards; the token embedding always stays on the CPU, and each block's KV
cache lives where the block does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.engine.drafters.self_draft import default_layers
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.engine.llama.head_context import HEAD_UBATCH
from localspec.engine.llama.memory import CHECKPOINTS, RECURRENT_SNAPSHOTS, MemoryKind, checkpoints_kept
from localspec.engine.llama.model import DEFAULT_N_BATCH
from localspec.errors import LocalspecError
from localspec.gguf import recurrent_state, sliding_window
from localspec.gguf.header import GGUFHeader, per_block, read_local_header, tensor_bytes
from localspec.gguf.memory_kind import memory_kind
from localspec.gguf.split import split_parts
from localspec.gguf.summary import ModelSummary
from localspec.units import format_bytes

# GPU memory the planner leaves free: a share of what is free, and never less than a floor.
HEADROOM_SHARE = 0.10
HEADROOM_MIN_BYTES = 256 * 2**20

_BLOCK = re.compile(r"^blk\.(\d+)\.")


class PairTooBigError(LocalspecError):
    """The pair needs more memory than RAM and VRAM hold together."""


@dataclass(frozen=True)
class ModelFootprint:
    """One model's memory, in the pieces llama.cpp places separately, at one context size."""

    label: str
    quantization: str
    block_bytes: tuple[int, ...]  # weights of each repeating block, blk.0 first
    block_kv_bytes: tuple[int, ...]  # each block's cache at n_ctx: its KV cells, or its recurrent states and their snapshots
    input_bytes: int  # the token embedding (and small unplaced tensors): always on the CPU
    output_bytes: int  # output norm and head: the first layer llama.cpp offloads
    compute_bytes: int  # llama.cpp's compute buffer; it sits with the output layer
    head_copy_bytes: int = 0  # a head tied to the embedding: on the GPU it needs its own copy; on the CPU it shares the file's
    checkpoint_bytes: int = 0  # recurrent states (and a window's cells) saved at prompt-pass ends (llama/checkpoints.py): in RAM
    # The fewest first blocks a cut of it (the self draft) may keep: a hybrid's up to its first block that attends, since
    # llama.cpp cannot load a hybrid whose blocks are all recurrent (it aborts: GGML_ASSERT(buffer), a cache of no cells).
    cut_floor: int = 1

    @property
    def n_layer(self) -> int:
        return len(self.block_bytes)

    @property
    def n_offloadable(self) -> int:
        """llama.cpp's count of layers that can go on the GPU: the blocks and the output layer."""
        return self.n_layer + 1

    @property
    def weight_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + sum(self.block_bytes)

    @property
    def kv_bytes(self) -> int:
        return sum(self.block_kv_bytes)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.compute_bytes + self.checkpoint_bytes

    def first_blocks(self, n: int) -> ModelFootprint:
        """The self-draft cut from this model: its first n blocks, with the same embedding, output layer and compute buffer."""
        return replace(self, label=f"{self.label} (first {n} blocks)", block_bytes=self.block_bytes[:n], block_kv_bytes=self.block_kv_bytes[:n])

    def _first_block_on_gpu(self, gpu_layers: int) -> int:
        return self.n_layer - min(max(gpu_layers - 1, 0), self.n_layer)

    def gpu_bytes(self, gpu_layers: int) -> int:
        """What `n_gpu_layers = gpu_layers` puts on the GPU."""
        if gpu_layers <= 0:
            return 0
        first = self._first_block_on_gpu(gpu_layers)
        return (self.output_bytes + self.head_copy_bytes + self.compute_bytes
                + sum(self.block_bytes[first:]) + sum(self.block_kv_bytes[first:]))

    def ram_bytes(self, gpu_layers: int) -> int:
        """What stays in RAM: the embedding, and everything not on the GPU."""
        first = self._first_block_on_gpu(gpu_layers)
        output = self.output_bytes + self.compute_bytes if gpu_layers <= 0 else 0
        return self.input_bytes + output + sum(self.block_bytes[:first]) + sum(self.block_kv_bytes[:first]) + self.checkpoint_bytes


def footprint(headers: list[GGUFHeader], n_ctx: int, label: str, n_batch: int = DEFAULT_N_BATCH,
              cache_type: GGMLQuantizationType = GGMLQuantizationType.F16, n_seq: int = 1) -> ModelFootprint:
    """A model's footprint from its header (and a split set's later parts), holding `n_seq` sequences (one context's
    cells shared by all of them; a recurrent state each). F16 is llama.cpp's KV cache type, which the engine keeps."""
    first = headers[0]
    tensors = [t for h in headers for t in h.tensors]
    blocks_found = [int(m[1]) for t in tensors if (m := _BLOCK.match(t.name))]
    n_layer = int(first.arch_value("block_count") or (max(blocks_found) + 1 if blocks_found else 0))
    block_bytes = [0] * n_layer
    input_bytes = output_bytes = 0
    for tensor in tensors:
        size = tensor_bytes(tensor)
        match = _BLOCK.match(tensor.name)
        if match and int(match[1]) < n_layer:
            block_bytes[int(match[1])] += size
        elif match or tensor.name.startswith("output"):
            output_bytes += size  # extra blocks (next-token heads) are built with the output layer
        else:
            input_bytes += size
    tied = not any(t.name == "output.weight" for t in tensors)
    head_copy = sum(tensor_bytes(t) for t in tensors if t.name == "token_embd.weight") if tied else 0

    n_embd = int(first.arch_value("embedding_length") or 0)
    n_head = per_block(first.arch_value("attention.head_count"), n_layer)
    n_head_kv = per_block(first.arch_value("attention.head_count_kv") or first.arch_value("attention.head_count"), n_layer)
    head_dim = n_embd // max(n_head) if n_layer and max(n_head) else 0
    key_length = int(first.arch_value("attention.key_length") or head_dim)
    value_length = int(first.arch_value("attention.value_length") or head_dim)
    block_size, type_size = GGML_QUANT_SIZES[cache_type]
    # A window block keeps its window's cells only (the engine opens llama.cpp's small window cache), at its own width.
    windowed = sliding_window.window_blocks(first, n_layer)
    window_cells = sliding_window.window_cells(sliding_window.window(first), n_ctx, n_batch)
    key_swa = int(first.arch_value("attention.key_length_swa") or key_length)
    value_swa = int(first.arch_value("attention.value_length_swa") or value_length)
    attention = [(window_cells * heads * (key_swa + value_swa) if swa else n_ctx * heads * (key_length + value_length))
                 * type_size // block_size for heads, swa in zip(n_head_kv, windowed)]
    # A recurrent block keeps a state per sequence in place of cells, in 1 + snapshots copies (llama/memory.py); a
    # checkpoint copies a sequence's states into RAM.
    recurrent = recurrent_state.recurrent_blocks(first, n_layer)
    kind = memory_kind(first.architecture)
    state = recurrent_state.state_row_bytes(first) * n_seq
    copies = 1 + (RECURRENT_SNAPSHOTS if kind is MemoryKind.SNAPSHOTS else 0)
    attends = recurrent_state.attending_blocks(first, recurrent)
    block_kv = [(kv if attending else 0) + (state * copies if flag else 0) for kv, attending, flag in zip(attention, attends, recurrent)]
    cut_floor = attends.index(True) + 1 if any(recurrent) and True in attends else 1
    # A checkpoint of a hybrid with a window holds the sequence's window cells too: at most the window cache's.
    window_cells_bytes = n_seq * sum(kv for kv, swa, flag in zip(attention, windowed, recurrent) if swa and not flag)
    checkpoint_bytes = (CHECKPOINTS if checkpoints_kept(kind) else 0) * (state * sum(recurrent) + window_cells_bytes)

    # The compute buffer, as llama.cpp reserves it for a full batch: the attention mask (f16, n_ctx per token) and the
    # larger of the head's logits and a block's feed-forward activations. Within 2% of the sizes llama.cpp reports
    # for the Qwen2.5 pair and the test suite's tiny models.
    n_vocab = first.n_vocab or int(first.arch_value("vocab_size") or 0)
    n_ff = max(per_block(first.arch_value("feed_forward_length"), n_layer) or [0])
    activations = max(n_vocab + 2 * n_embd, 2 * n_ff + 4 * n_embd)
    compute = n_batch * (2 * n_ctx + 4 * activations)
    if first.arch_value("nextn_predict_layers"):  # the engine loads a target's MTP layers, and their head a context of its own
        compute += min(HEAD_UBATCH, n_batch) * (2 * n_ctx + 4 * activations)  # (its cells are the MTP block's, counted above)
    return ModelFootprint(label, ModelSummary.from_headers(first).quantization, tuple(block_bytes), tuple(block_kv),
                          input_bytes, output_bytes, compute, head_copy, checkpoint_bytes, cut_floor)


def read_footprint(path: Path, n_ctx: int, n_seq: int = 1) -> ModelFootprint:
    """From the local file's header; a split set's first part brings the other parts' tensors."""
    check_gguf_file(path)  # the loader's own messages for a missing file, a directory, or not a GGUF
    parts = [path.parent / Path(name).name for name in split_parts(path.name)]
    return footprint([read_local_header(part) for part in parts], n_ctx, path.name, n_seq=n_seq)


def pair_footprint_bytes(target: Path, draft: Path | None, n_ctx: int) -> int:
    """RAM or VRAM both models take at `n_ctx`, from their headers: what a catalog pair's memory_gib estimates, for a
    pair of the user's own files, which has none."""
    return sum(read_footprint(path, n_ctx).total_bytes for path in (target, draft) if path is not None)


@dataclass(frozen=True)
class DeviceMemory:
    """What the planner may use. localspec.machine.device measures it; tests pass made-up sizes."""

    gpu_free: int | None  # bytes free on the GPUs llama.cpp offloads to; None: this build has no GPU offload
    ram_available: int | None  # None: unknown, so not checked
    unified: bool = False  # the GPU's memory is system RAM (Apple Silicon): what the GPU takes, RAM loses

    @property
    def gpu_headroom(self) -> int:
        return min(self.gpu_free or 0, max(HEADROOM_MIN_BYTES, int((self.gpu_free or 0) * HEADROOM_SHARE)))

    @property
    def gpu_budget(self) -> int:
        return (self.gpu_free or 0) - self.gpu_headroom


@dataclass(frozen=True)
class Placement:
    """One model's share of the plan."""

    role: str
    footprint: ModelFootprint
    gpu_layers: int  # n_gpu_layers for llama.cpp, 0 to footprint.n_offloadable
    user_set: bool  # the user's own count, not the planner's

    @property
    def gpu_bytes(self) -> int:
        return self.footprint.gpu_bytes(self.gpu_layers)

    @property
    def ram_bytes(self) -> int:
        return self.footprint.ram_bytes(self.gpu_layers)

    @property
    def where(self) -> str:
        if self.gpu_layers == 0:
            return "on the CPU"
        if self.gpu_layers == self.footprint.n_offloadable:
            return "on the GPU"
        return f"split ({self.gpu_layers}/{self.footprint.n_offloadable} layers on the GPU)"

    def to_dict(self) -> dict[str, Any]:
        f = self.footprint
        return {
            "model": f.label, "gpu_layers": self.gpu_layers, "offloadable_layers": f.n_offloadable, "set_by": "user" if self.user_set else "planner",
            "gpu_bytes": self.gpu_bytes, "ram_bytes": self.ram_bytes,
            "weight_bytes": f.weight_bytes, "kv_bytes": f.kv_bytes, "compute_bytes": f.compute_bytes,
        }


@dataclass(frozen=True)
class MemoryPlan:
    n_ctx: int
    memory: DeviceMemory
    target: Placement
    draft: Placement | None
    warnings: tuple[str, ...] = ()
    self_draft: Placement | None = None  # planned only where the self drafter will run
    self_draft_floor: int = 1  # the fewest blocks the self draft may keep (ModelFootprint.cut_floor of the target)
    # The GPU-type devices (ggml_backend_dev_t) each model may use; None: all of them, llama.cpp's default. Set where
    # RPC servers are attached (machine.remote_plan), so that a model uses the servers chosen for it and no other.
    target_devices: tuple[int, ...] | None = None
    draft_devices: tuple[int, ...] | None = None

    @property
    def placements(self) -> list[Placement]:
        """In the order they get the GPU: the draft first, the self-draft last (it takes only what the target leaves)."""
        return [p for p in (self.draft, self.target, self.self_draft) if p is not None]

    @property
    def self_draft_gpu_layers(self) -> int:
        """0 (the CPU) when the plan has no self-draft: a model the plan never counted must not take GPU memory."""
        return self.self_draft.gpu_layers if self.self_draft is not None else 0

    @property
    def gpu_bytes(self) -> int:
        return sum(p.gpu_bytes for p in self.placements)

    @property
    def ram_bytes(self) -> int:
        return sum(p.ram_bytes for p in self.placements)

    @property
    def draft_gpu_layers(self) -> int | None:
        return self.draft.gpu_layers if self.draft is not None else None

    @property
    def verdict(self) -> str:
        if self.memory.gpu_free is None:
            return "CPU only (no GPU offload in this build)"
        if all(p.gpu_layers == p.footprint.n_offloadable for p in self.placements):
            return "all on the GPU"
        if not any(p.gpu_layers for p in self.placements):
            return "all on the CPU (the GPU is too small)"
        return ", ".join(f"{p.role} {p.where}" for p in self.placements)

    @property
    def amounts(self) -> str:
        """Where the plan puts the bytes, against what is free."""
        ram = f"RAM {format_bytes(self.ram_bytes)}"
        if self.memory.ram_available is not None:
            ram += f" of {format_bytes(self.memory.ram_available)} available"
        if self.memory.gpu_free is None:
            return ram
        return f"GPU {format_bytes(self.gpu_bytes)} of {format_bytes(self.memory.gpu_free)} free, {ram}"

    def describe(self) -> str:
        return f"{self.verdict}: {self.amounts}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "n_ctx": self.n_ctx,
            "gpu_free_bytes": self.memory.gpu_free, "gpu_headroom_bytes": self.memory.gpu_headroom,
            "ram_available_bytes": self.memory.ram_available, "unified_memory": self.memory.unified,
            "gpu_bytes": self.gpu_bytes, "ram_bytes": self.ram_bytes,
            "models": {p.role: p.to_dict() for p in self.placements}, "warnings": list(self.warnings),
        }


def _most_layers_within(model: ModelFootprint, budget: int) -> int:
    return max((n for n in range(model.n_offloadable + 1) if model.gpu_bytes(n) <= budget), default=0)


def _place(role: str, model: ModelFootprint, requested: int | None, budget: int, memory: DeviceMemory) -> tuple[Placement, str | None]:
    if memory.gpu_free is None:  # llama.cpp ignores n_gpu_layers without offload; so does the plan
        return Placement(role, model, 0, requested is not None), None
    if requested is None:
        return Placement(role, model, _most_layers_within(model, budget), False), None
    layers = model.n_offloadable if requested < 0 else min(requested, model.n_offloadable)
    placement = Placement(role, model, layers, True)
    if placement.gpu_bytes > budget:
        return placement, (f"the {role}'s {layers} GPU layers need {format_bytes(placement.gpu_bytes)}, more than the "
                           f"{format_bytes(max(budget, 0))} the GPU has free after headroom: loading may fail")
    return placement, None


def plan_memory(target: ModelFootprint, draft: ModelFootprint | None, n_ctx: int, memory: DeviceMemory,
                target_gpu_layers: int | None = None, draft_gpu_layers: int | None = None,
                self_draft: ModelFootprint | None = None) -> MemoryPlan:
    """The draft first, the target with what is left, then the self-draft (if any) with what the target leaves;
    a count the user gave is kept as given (-1 = all)."""
    budget = memory.gpu_budget
    warnings = []
    draft_placement = None
    if draft is not None:
        draft_placement, warning = _place("draft", draft, draft_gpu_layers, budget, memory)
        budget -= draft_placement.gpu_bytes
        warnings += [warning] if warning else []
    target_placement, warning = _place("target", target, target_gpu_layers, budget, memory)
    warnings += [warning] if warning else []
    self_draft_placement = None
    if self_draft is not None:
        self_draft_placement, _ = _place("self-draft", self_draft, None, budget - target_placement.gpu_bytes, memory)
    plan = MemoryPlan(n_ctx, memory, target_placement, draft_placement, tuple(warnings), self_draft_placement)
    needed_in_ram = plan.ram_bytes + (plan.gpu_bytes if memory.unified else 0)
    if memory.ram_available is not None and needed_in_ram > memory.ram_available:
        raise PairTooBigError(_too_big_message(plan, needed_in_ram))
    return plan


def plan_pair(target: Path, draft: Path | None, n_ctx: int, memory: DeviceMemory,
              target_gpu_layers: int | None = None, draft_gpu_layers: int | None = None,
              with_self_draft: bool = False, self_draft_layers: int | None = None, n_seq: int = 1) -> MemoryPlan:
    """The plan for two local files, read from their headers only, each holding `n_seq` sequences (a server's slots);
    with the self-draft too where it will run."""
    target_footprint = read_footprint(target, n_ctx, n_seq)
    draft_footprint = read_footprint(draft, n_ctx, n_seq) if draft is not None else None
    self_draft = None
    if with_self_draft:
        blocks = self_draft_layers if self_draft_layers is not None else default_layers(target_footprint.n_layer, target_footprint.cut_floor)
        self_draft = target_footprint.first_blocks(min(blocks, target_footprint.n_layer))
    plan = plan_memory(target_footprint, draft_footprint, n_ctx, memory, target_gpu_layers, draft_gpu_layers, self_draft)
    return replace(plan, self_draft_floor=target_footprint.cut_floor)


def _smaller_context(plan: MemoryPlan, needed_in_ram: int, kv: int) -> str:
    """The context that would fit, as a power of two: the KV caches and compute buffers grow about in proportion to it
    (once it advised --ctx-size 24999999999 as "half" of an impossible 49999999999)."""
    assert plan.memory.ram_available is not None
    per_token = (kv + sum(p.footprint.compute_bytes for p in plan.placements)) / plan.n_ctx
    room = plan.memory.ram_available - (needed_in_ram - per_token * plan.n_ctx)  # what the weights leave in RAM
    fits = int(room / per_token) if per_token > 0 and room > 0 else 0
    if fits < 512:
        return "a smaller context does not help enough (the weights alone nearly fill the RAM); "
    size = 1 << (min(fits, plan.n_ctx - 1).bit_length() - 1)
    return f"a smaller context (the KV caches take {format_bytes(kv)}; about --ctx-size {size} fits); "


def _too_big_message(plan: MemoryPlan, needed_in_ram: int) -> str:
    memory = plan.memory
    parts = ", ".join(
        f"{p.role} {format_bytes(p.footprint.total_bytes)} (weights {format_bytes(p.footprint.weight_bytes)}, "
        f"KV cache {format_bytes(p.footprint.kv_bytes)}, compute {format_bytes(p.footprint.compute_bytes)})"
        for p in plan.placements
    )
    gpu = ("This build has no GPU offload" if memory.gpu_free is None else
           f"The GPU takes {format_bytes(plan.gpu_bytes)} of it ({format_bytes(memory.gpu_free)} free)")
    kv = sum(p.footprint.kv_bytes for p in plan.placements)
    assert memory.ram_available is not None
    return (
        f"The pair does not fit in this machine's memory at a {plan.n_ctx}-token context: it needs "
        f"{format_bytes(sum(p.footprint.total_bytes for p in plan.placements))}: {parts}. {gpu}, so "
        f"{format_bytes(needed_in_ram)} must go in RAM, where {format_bytes(memory.ram_available)} is available. Options: "
        f"a smaller quantization (the target is {plan.target.footprint.quantization}); "
        f"{_smaller_context(plan, needed_in_ram, kv)}"
        f"or a smaller pair (`localspec list` shows what each pair needs)."
    )
