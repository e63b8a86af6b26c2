"""A GGUF file's header (metadata and tensor index), read without its tensor data.

The vocabulary, the architecture and the tensor shapes all sit at the front of a
GGUF file, so a pair can be judged from a few megabytes, before gigabytes of
weights are fetched. The reader pulls bytes from any `read(n)` source: a local
file, or HTTP range requests against the hub.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.engine.errors import ModelLoadError
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.engine.pair_check import VOCAB_TYPES
from localspec.units import format_bytes

DEFAULT_ALIGNMENT = 32  # GGUF's, where general.alignment is not set

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_CHUNK = 1 << 20


def per_block(value: Any, n_layer: int) -> list[int]:
    """A hyperparameter per block: some GGUF keys hold one number for every block, some a number per block."""
    if isinstance(value, list):
        return [int(v) for v in value[:n_layer]] + [0] * (n_layer - len(value))
    return [int(value or 0)] * n_layer


class _Reader:
    """Buffered, forward-only reads that count every byte fetched."""

    def __init__(self, read: Callable[[int], bytes], source: str) -> None:
        self._read = read
        self._source = source
        self._buffer = b""
        self._pos = 0
        self.bytes_read = 0

    def take(self, n: int) -> bytes:
        while len(self._buffer) - self._pos < n:
            more = self._read(max(_CHUNK, n))
            if not more:
                raise ModelLoadError(f"{self._source} ends inside its GGUF header: the file is truncated. Download it again.")
            self.bytes_read += len(more)
            self._buffer = self._buffer[self._pos :] + more
            self._pos = 0
        data = self._buffer[self._pos : self._pos + n]
        self._pos += n
        return data

    @property
    def offset(self) -> int:
        """Bytes consumed so far from the start of the file."""
        return self.bytes_read - (len(self._buffer) - self._pos)

    def scalar(self, kind: int) -> Any:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        (length,) = struct.unpack("<Q", self.take(8))
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = struct.unpack("<IQ", self.take(12))
            if item_kind in _SCALARS:
                fmt = _SCALARS[item_kind]
                return list(struct.unpack(f"<{count}{fmt[1]}", self.take(count * struct.calcsize(fmt))))
            return [self.value(item_kind) for _ in range(count)]
        if kind not in _SCALARS:
            raise ModelLoadError(f"{self._source} has an unknown GGUF value type {kind}: not a valid GGUF file.")
        return self.scalar(kind)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int = 0  # where its data starts, from the start of the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    header_bytes: int  # where the header ends: what a reader must fetch at least
    bytes_read: int  # what this read actually fetched (whole chunks)

    @property
    def data_offset(self) -> int:
        """Where the tensor data begins: the header's end, rounded up to the file's alignment."""
        alignment = int(self.metadata.get("general.alignment") or DEFAULT_ALIGNMENT)
        return -(-self.header_bytes // alignment) * alignment

    @property
    def file_size(self) -> int:
        """The size the file must have at least: the end of its last tensor's data."""
        return self.data_offset + max((t.offset + tensor_bytes(t) for t in self.tensors), default=0)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def arch_value(self, key: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    # --- the Vocabulary protocol of localspec.engine.pair_check ---------------------

    @property
    def vocab_type(self) -> int:
        return VOCAB_TYPES.get(str(self.metadata.get("tokenizer.ggml.model", "no_vocab")), -1)

    @property
    def bos(self) -> int:
        return int(self.metadata.get("tokenizer.ggml.bos_token_id", -1))

    @property
    def eos(self) -> int:
        return int(self.metadata.get("tokenizer.ggml.eos_token_id", -1))

    @property
    def add_bos(self) -> bool:
        return bool(self.metadata.get("tokenizer.ggml.add_bos_token", self.vocab_type == VOCAB_TYPES["llama"]))

    @property
    def add_eos(self) -> bool:
        return bool(self.metadata.get("tokenizer.ggml.add_eos_token", False))

    @property
    def n_vocab(self) -> int:
        return len(self.metadata.get("tokenizer.ggml.tokens", ()))

    def token_text(self, token: int) -> str:
        return self.metadata["tokenizer.ggml.tokens"][token]


def read_header(read: Callable[[int], bytes], source: str) -> GGUFHeader:
    """Parse the header from a stream positioned at the start of a GGUF file."""
    reader = _Reader(read, source)
    magic = reader.take(4)
    if magic != b"GGUF":
        raise ModelLoadError(f"{source} is not a GGUF file (it starts with {magic!r}, not b'GGUF').")
    version, n_tensors, n_kv = struct.unpack("<IQQ", reader.take(20))
    if version < 2:
        raise ModelLoadError(f"{source} is GGUF version {version}; llama.cpp reads version 2 and later. Convert it again.")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string()
        (kind,) = struct.unpack("<I", reader.take(4))
        metadata[key] = reader.value(kind)
    tensors = []
    for _ in range(n_tensors):
        name = reader.string()
        (n_dims,) = struct.unpack("<I", reader.take(4))
        shape = struct.unpack(f"<{n_dims}Q", reader.take(8 * n_dims))
        ggml_type, offset = struct.unpack("<IQ", reader.take(12))
        tensors.append(TensorInfo(name, tuple(shape), ggml_type, offset))
    return GGUFHeader(version, metadata, tensors, reader.offset, reader.bytes_read)


def tensor_bytes(tensor: TensorInfo) -> int:
    try:
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.ggml_type)]
    except (ValueError, KeyError):
        return tensor.n_elements  # a type newer than the gguf package: one byte a weight, more than any quantization takes
    return tensor.n_elements // block_size * type_size


def read_local_header(path: Path) -> GGUFHeader:
    """The header of a local file, which must hold every byte of tensor data its header describes."""
    check_gguf_file(path)  # the loader's own words: not found, a directory, a device, not a GGUF
    with open(path, "rb") as f:
        header = read_header(f.read, str(path))
    check_complete(path, header)
    return header


def check_complete(path: Path, header: GGUFHeader) -> None:
    """A file cut short (an interrupted copy, a truncated upload) passes every header check; its size does not."""
    size = path.stat().st_size
    if size < header.file_size:
        raise IncompleteGGUFError(
            f"{path} is incomplete: {incomplete_detail(header.file_size, size)}. Download or copy it again (`localspec pull` resumes).",
            header.file_size, size,
        )


class IncompleteGGUFError(ModelLoadError):
    """A GGUF file shorter than its header says: cut short in a copy or an upload."""

    def __init__(self, message: str, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected, self.actual = expected, actual


def incomplete_detail(expected: int, actual: int) -> str:
    return f"its header describes {format_bytes(expected)} of data but the file holds {format_bytes(actual)} ({100 * actual / expected:.0f}%)"
