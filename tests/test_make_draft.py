"""make-draft: a self-draft GGUF cut from the target's first blocks, checked as a pair and drafting losslessly."""

from __future__ import annotations

from localspec.engine.chat import Message, chat_prompt_tokens
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.generation_config import GenerationConfig
from tests.conftest import run
from tests.drafting import REPEATING, drafter_stats
from tests.lossless import assert_lossless


def test_make_draft_writes_a_gguf_that_loads_passes_the_pair_check_and_drafts(tiny, tmp_path):
    from localspec.engine.llama.model import Model
    from tests.conftest import cli

    out = tmp_path / "self.gguf"
    done = cli("make-draft", "--layers", "1", str(tiny["target"]), str(out))
    assert done.returncode == 0, done.stderr
    assert "the first 1 of 2 blocks" in done.stdout
    with Model(out) as made:
        assert made.n_layer == 1 and made.n_vocab > 0
    with Engine(EngineConfig(tiny["target"], out)) as engine:  # the pair check runs on load
        stats = drafter_stats(engine, "model")
        prompt = chat_prompt_tokens(engine.target, [Message("user", REPEATING)])
        assert_lossless(run(engine.plain, prompt, GenerationConfig(max_tokens=80)),
                        run(engine.speculative, prompt, GenerationConfig(max_tokens=80, draft_max=6)))
    assert stats.draft_n > 0 and stats.n_steps > 0
    again = cli("make-draft", "--layers", "1", str(tiny["target"]), str(out))
    assert again.returncode == 2 and "already exists" in again.stderr  # a path given on the command line: a usage error
    bad = cli("make-draft", "--layers", "2", str(tiny["target"]), str(tmp_path / "x.gguf"))
    assert bad.returncode == 2 and "between 1 and 1" in bad.stderr and not (tmp_path / "x.gguf").exists()  # the user's value
    typo = cli("make-draft", "--layers", "1", str(tiny["target"]), str(tmp_path / "no-such" / "folder" / "x.gguf"))
    assert typo.returncode == 2 and "is not an existing folder" in typo.stderr and not (tmp_path / "no-such").exists()
