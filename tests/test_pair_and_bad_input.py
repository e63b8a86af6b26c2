"""The pair check refuses incompatible drafts, and bad files get clear errors, never tracebacks."""

from __future__ import annotations

import shutil

import pytest

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import ChatTemplateError, ModelLoadError, PairMismatchError
from localspec.engine.llama.model import Model
from localspec.engine.pair_check import check_pair
from tests.conftest import cli
from tests.tiny_models import TinySpec, vocabulary, write_tiny_model


def test_compatible_pair_passes(tiny):
    with Model(tiny["target"]) as target, Model(tiny["unrelated"]) as draft:
        check_pair(target.vocab, draft.vocab)  # different weights, same tokenizer: usable (if useless)


def test_other_vocabulary_is_refused_naming_the_first_mismatch(tiny):
    other = vocabulary("other")
    with pytest.raises(PairMismatchError) as error:
        Engine(EngineConfig(tiny["target"], tiny["other_vocab"]))
    message = str(error.value)
    assert "cannot be used together" in message
    assert f"token 100 is {vocabulary()[100]!r} in the target but {other[100]!r} in the draft" in message


def test_different_eos_is_refused(tmp_path, tiny):
    draft = write_tiny_model(tmp_path / "eos.gguf", TinySpec(seed=5, eos=1))
    with pytest.raises(PairMismatchError, match=r"eos differs \(target 2, draft 1\)"):
        Engine(EngineConfig(tiny["target"], draft))


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
        ("mismatch", "cannot be used together"),
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
    result = cli("generate", "--target", str(target), "--draft", str(draft), "--prompt", "hi", "--max-tokens", "4")
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_raw_prompt_works_without_template(tiny):
    result = cli("generate", "--target", str(tiny["no_template"]), "--prompt", "hi", "--raw", "--max-tokens", "4", "--json")
    assert result.returncode == 0, result.stderr
