"""The header reader sees what llama.cpp sees, from the front of the file only."""

from __future__ import annotations

import gguf
import pytest

from localspec.engine.errors import ModelLoadError, PairMismatchError
from localspec.engine.llama.model import Model
from localspec.engine.pair_check import check_pair
from localspec.gguf.header import read_header, read_local_header


def _same_vocabulary_facts(header, model: Model) -> None:
    vocab = model.vocab
    assert header.vocab_type == vocab.vocab_type
    assert (header.bos, header.eos, header.add_bos, header.add_eos) == (vocab.bos, vocab.eos, vocab.add_bos, vocab.add_eos)
    assert header.n_vocab == vocab.n_vocab == model.n_vocab
    for token in (0, 5, 100, vocab.n_vocab // 2, vocab.n_vocab - 1):
        assert header.token_text(token) == vocab.token_text(token)


def test_tiny_header_matches_the_gguf_package_and_llama_cpp(tiny):
    header = read_local_header(tiny["target"])
    reference = gguf.GGUFReader(tiny["target"])
    assert header.architecture == "llama"
    assert [t.name for t in header.tensors] == [t.name for t in reference.tensors]
    assert [t.shape for t in header.tensors] == [tuple(int(d) for d in t.shape) for t in reference.tensors]
    assert header.arch_value("block_count") == 2
    assert header.header_bytes < tiny["target"].stat().st_size
    with Model(tiny["target"]) as model:
        _same_vocabulary_facts(header, model)
        assert header.n_params == model.n_params


def test_pair_check_runs_on_headers(tiny):
    check_pair(read_local_header(tiny["target"]), read_local_header(tiny["near"]))
    with pytest.raises(PairMismatchError, match="token 100 is"):
        check_pair(read_local_header(tiny["target"]), read_local_header(tiny["other_vocab"]))


def test_header_reads_count_their_bytes(tiny):
    data = tiny["target"].read_bytes()
    offset = 0

    def read(n: int) -> bytes:
        nonlocal offset
        chunk = data[offset : offset + min(n, 4096)]  # a source that returns short reads, as a network would
        offset += len(chunk)
        return chunk

    header = read_header(read, "stream")
    assert header.bytes_read == offset
    assert header.header_bytes <= header.bytes_read
    assert header.metadata == read_local_header(tiny["target"]).metadata


def test_truncated_and_foreign_files(tmp_path, tiny):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny["target"].read_bytes()[:3000])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_local_header(cut)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_local_header(other)


def test_real_pair_headers_match_llama_cpp(real_models):
    target, draft = real_models
    headers = [read_local_header(path) for path in real_models]
    check_pair(*headers)
    assert headers[0].architecture == "qwen2"
    assert headers[0].header_bytes < 10 * 2**20  # the vocabulary is a few MB of a ~1 GB file
    with Model(target) as model:
        _same_vocabulary_facts(headers[0], model)
