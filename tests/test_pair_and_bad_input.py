"""The pair check refuses incompatible drafts, and bad files get clear errors, never tracebacks."""

from __future__ import annotations

import shutil

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.drafters.registry import DRAFTERS
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import ChatTemplateError, EngineError, ModelLoadError
from localspec.engine.generation_config import GenerationConfig
from localspec.engine.llama.model import Model
from localspec.engine.pair_check import check_pair, compare_tokenizers
from localspec.gguf.header import read_local_header
from tests.conftest import cli, run
from tests.lossless import assert_lossless
from tests.tiny_models import TinySpec, vocabulary, write_tiny_model


def test_compatible_pair_passes(tiny):
    with Model(tiny["target"]) as target, Model(tiny["unrelated"]) as draft:
        check_pair(target.vocab, draft.vocab)  # different weights, same tokenizer: usable (if useless)


def test_another_vocabulary_is_named_and_drafts_only_through_text(tiny):
    other = vocabulary("other")
    with Engine(EngineConfig(tiny["target"], tiny["other_vocab"])) as engine:
        assert engine.tokenizers_differ == f"token 100 is {vocabulary()[100]!r} in the target but {other[100]!r} in the draft"
        with pytest.raises(EngineError, match="has another tokenizer than the target .* --drafter bridged"):
            engine.drafter("model")
        assert engine.parts.lacks(DRAFTERS["hybrid"]) == "a draft with the target's tokenizer"
        assert not engine.parts.lacks(DRAFTERS["bridged"]) and "drafts through text" in engine.drafting_note


def test_a_different_eos_is_another_tokenizer(tmp_path, tiny):
    draft = write_tiny_model(tmp_path / "eos.gguf", TinySpec(seed=5, eos=1))
    with Engine(EngineConfig(tiny["target"], draft)) as engine:
        assert engine.tokenizers_differ == "eos differs (target 2, draft 1)"


def test_a_draft_without_a_bos_id_over_the_targets_vocabulary_drafts_natively(tmp_path, tiny):
    """Qwen3.5-0.8B's case: its file lacks a BOS id, which llama.cpp refuses against the target's; where neither adds a BOS
    and every id is the same text, the draft drafts natively, and says which difference was accepted and why."""
    draft = write_tiny_model(tmp_path / "no-bos.gguf", TinySpec(seed=3, base_seed=1, noise=0.1, bos=None))
    with Engine(EngineConfig(tiny["target"], draft)) as engine:
        assert engine.draft is not None and engine.draft.vocab.bos != engine.target.vocab.bos  # llama.cpp's default id
        assert engine.tokenizers_differ == ""
        assert engine.tokenizers_tolerated.startswith(f"bos differs (target 0, draft {engine.draft.vocab.bos}), accepted: "
                                                      f"neither model puts a BOS in its prompts and all {len(vocabulary())} ids")
        assert "no-bos.gguf drafts natively: bos differs" in engine.drafting_note
        assert not engine.parts.lacks(DRAFTERS["model"])
        prompt = chat_prompt_tokens(engine.target, [Message("user", "tell me about the sea")])
        config = GenerationConfig(max_tokens=48)
        assert_lossless(run(engine.plain, prompt, config), run(engine.decoder("model"), prompt, config))
    headers = compare_tokenizers(read_local_header(tiny["target"]), read_local_header(draft))
    assert headers.difference == "" and headers.tolerated.startswith("bos differs (target 0, draft none), accepted")


def test_a_draft_without_a_bos_id_whose_tokens_differ_still_goes_through_text(tmp_path, tiny):
    draft = write_tiny_model(tmp_path / "other-no-bos.gguf", TinySpec(seed=4, vocab="other", bos=None))
    with Engine(EngineConfig(tiny["target"], draft)) as engine:
        assert engine.tokenizers_differ.startswith("bos differs (target 0, draft ")
        assert engine.tokenizers_tolerated == ""
        assert engine.parts.lacks(DRAFTERS["model"]) == "a draft with the target's tokenizer"


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="Model file not found"):
        Model(tmp_path / "nope.gguf")


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ModelLoadError, match="is a directory"):
        Model(tmp_path)


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"<html>Not found</html>")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        Model(path)


def test_truncated_gguf(tmp_path, tiny):
    path = tmp_path / "truncated.gguf"
    shutil.copy(tiny["target"], path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(ModelLoadError, match="truncated or damaged"):
        Model(path)


def test_model_without_chat_template(tiny):
    with Model(tiny["no_template"]) as model:
        with pytest.raises(ChatTemplateError, match="--raw"):
            chat_prompt_tokens(model, [Message("user", "hi")])


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "Model file not found"),
        ("not_gguf", "is not a GGUF file"),
        ("truncated", "the file is truncated. Download it again"),  # the memory planner reads the header first
        ("mismatch", "has another tokenizer than the target (token 100 is"),  # --drafter model: its ids would be misread
        ("no_template", "has no chat template"),
    ],
)
def test_cli_reports_bad_input_without_traceback(tmp_path, tiny, case, expected):
    target, draft = tiny["target"], tiny["near"]
    if case == "missing":
        target = tmp_path / "missing.gguf"
    elif case == "not_gguf":
        target = tmp_path / "x.gguf"
        target.write_text("hello")
    elif case == "truncated":
        target = tmp_path / "t.gguf"
        target.write_bytes(tiny["target"].read_bytes()[:5000])
    elif case == "mismatch":
        draft = tiny["other_vocab"]
    elif case == "no_template":
        target, draft = tiny["no_template"], tiny["target"]
    drafter = ["--drafter", "model"] if case == "mismatch" else []
    result = cli("generate", "--target", str(target), "--draft", str(draft), "--prompt", "hi", "--max-tokens", "4", *drafter)
    assert result.returncode == (2 if case == "mismatch" else 1)  # a drafter these models cannot run is the command line's to change
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_raw_prompt_works_without_template(tiny):
    result = cli("generate", "--target", str(tiny["no_template"]), "--prompt", "hi", "--raw", "--max-tokens", "4", "--json")
    assert result.returncode == 0, result.stderr
