"""Self-speculative drafts: the target's first N blocks and its output head, written as a GGUF of their own.

A user without a small model of the target's family still gets a draft that
shares the vocabulary exactly, because it is the target, cut short. Without
training the shortened network's guesses are rough (its last hidden state was
never meant to be read out after block N), so its acceptance is low: the bench
reports it as it is. The copy is byte-for-byte for every tensor it keeps, in
the target's own quantization.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import gguf

from localspec.engine.errors import EngineError
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.errors import UsageError


@dataclass(frozen=True)
class SelfDraft:
    path: Path
    n_layers: int
    of_layers: int
    size_bytes: int


def _layer_of(tensor_name: str) -> int | None:
    if not tensor_name.startswith("blk."):
        return None
    return int(tensor_name.split(".")[1])


def _block_count(reader: gguf.GGUFReader) -> tuple[str, str, int]:
    """The architecture, its block-count key, and that key's value (0 when the file has none)."""
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    return arch, key, int(reader.fields[key].contents()) if key in reader.fields else 0


def _read_whole(target: Path) -> gguf.GGUFReader:
    """The target's reader, once its header and every tensor's bytes are known to be in the file: a download cut short
    made gguf's reader fail with a numpy ValueError, or left the draft to fail half-written."""
    damaged = (f"{target} is not a whole GGUF file (it is {target.stat().st_size:,} bytes: a download cut short, or a damaged "
               "copy). Download it again.")
    try:
        reader = gguf.GGUFReader(target)
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError):  # gguf's reader ran past the end
        raise EngineError(damaged) from None
    if any(tensor.data_offset + tensor.n_bytes > target.stat().st_size for tensor in reader.tensors):
        raise EngineError(damaged)
    return reader


def make_self_draft(target: Path, out: Path, n_layers: int, floor: int = 1) -> SelfDraft:
    """Write `out`: the target's metadata with block_count = n_layers, its first n_layers blocks, and the rest (embeddings, head).
    `floor`: the fewest blocks the cut may keep (a hybrid's up to its first block that attends)."""
    check_gguf_file(target)
    reader = _read_whole(target)
    arch, block_count_key, total = _block_count(reader)
    if not total:
        raise EngineError(f"{target.name} has no {block_count_key}: it is not a layered language model, so no draft can be cut from it.")
    if not 1 <= n_layers < total:
        raise UsageError(f"A self-draft of {n_layers} blocks cannot be cut: {target.name} has {total} blocks, and the draft keeps "
                         f"between 1 and {total - 1} of them (--layers, or the self-draft layers setting).")
    _check_floor(target, total, n_layers, floor)

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        sub_kind = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == block_count_key:
            value = n_layers
        elif field.name == f"{arch}.nextn_predict_layers":
            value = 0  # the target's MTP blocks come after its last block, so the draft keeps none
        elif field.name.startswith(f"{arch}.") and isinstance(value, list) and len(value) == total:
            value = value[:n_layers]  # per-layer settings (some architectures list head counts per block)
        elif field.name == gguf.Keys.General.NAME:
            value = f"{value} (first {n_layers} of {total} blocks)"
        if kind == gguf.GGUFValueType.ARRAY and not value:
            continue  # gguf cannot write an empty array; llama.cpp reads a missing key as one
        writer.add_key_value(field.name, value, kind, sub_type=sub_kind)
    kept = [t for t in reader.tensors if (layer := _layer_of(t.name)) is None or layer < n_layers]
    for tensor in kept:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in kept:
            writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
        writer.close()
        os.replace(partial, out)  # a half-written draft never carries the final name
    finally:
        partial.unlink(missing_ok=True)
    return SelfDraft(out, n_layers, total, out.stat().st_size)


def _check_floor(target: Path, total: int, n_layers: int | None, floor: int) -> None:
    """A clear refusal where a cut would keep no block that attends of a hybrid (`floor`: the fewest blocks that keep one):
    llama.cpp aborts the process loading such a file (GGML_ASSERT(buffer): a cache of no cells)."""
    if floor >= total:
        raise UsageError(f"No self-draft can be cut from {target.name}: of its {total} blocks, the first that attends is block "
                         f"{floor - 1}, and a draft of a hybrid model must keep one (llama.cpp cannot load it otherwise) while "
                         "leaving a block out. Use another drafter (--drafter auto, ngram, or a draft model).")
    if n_layers is not None and n_layers < floor:
        raise UsageError(f"A self-draft of {n_layers} block{'s' if n_layers > 1 else ''} of {target.name} would keep no block that "
                         f"attends (its first is block {floor - 1}), and llama.cpp cannot load a hybrid model without one: "
                         f"keep {floor} blocks or more (--layers, --self-layers, or the self-draft blocks setting).")


def default_layers(n_layer: int, floor: int = 1) -> int:
    """A quarter of the blocks: the draft then costs about a quarter of a target pass, plus the output head; at least
    `floor` (a hybrid's cut keeps a block that attends)."""
    return max(1, floor, n_layer // 4)


def _cut_plan(target: Path, n_layers: int | None, cache_dir: Path, floor: int = 1) -> tuple[Path, int, int]:
    """Where the self-draft with `n_layers` blocks (None: the default) is kept, its block count, and the target's.
    `floor`: the fewest blocks it may keep (the memory plan reads it from the header: a hybrid's cut needs a block
    that attends, or llama.cpp aborts loading it)."""
    check_gguf_file(target)
    _, _, total = _block_count(gguf.GGUFReader(target))
    _check_floor(target, total, n_layers, floor)
    layers = n_layers if n_layers is not None else default_layers(total, floor)
    stat = target.stat()
    identity = hashlib.sha256(f"{target.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir / f"{target.stem}.{identity}.first{layers}.gguf", layers, total


def self_draft_path(target: Path, n_layers: int | None, cache_dir: Path, floor: int = 1) -> Path:
    """Where the self-draft for `target` is kept, made or not (to say so before making it)."""
    return _cut_plan(target, n_layers, cache_dir, floor)[0]


def cached_self_draft(target: Path, n_layers: int | None, cache_dir: Path, floor: int = 1) -> SelfDraft:
    """The self-draft for `target` with `n_layers` blocks (None: the default), made once and kept in `cache_dir`."""
    out, layers, total = _cut_plan(target, n_layers, cache_dir, floor)
    if out.is_file():
        return SelfDraft(out, layers, total, out.stat().st_size)
    return make_self_draft(target, out, layers, floor)
