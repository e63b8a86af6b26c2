"""One table of drafters: every front door and the README read it, and each row builds the drafter it names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from localspec.bench.runner import BENCH_DRAFTERS, parse_drafters
from localspec.cli.main import build_parser
from localspec.engine.drafters.registry import DEFAULT, DRAFTERS, PairParts, Part, Supports, spec
from localspec.engine.engine import Engine, EngineConfig
from localspec.engine.errors import EngineError
from localspec.errors import UsageError
from localspec.session.generation_request import Asked, resolve
from localspec.session.settings import Settings, SettingsError

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_command_line_offers_exactly_the_registry():
    generate = build_parser()._subparsers._group_actions[0].choices["generate"]  # type: ignore[union-attr]
    drafter = next(action for action in generate._actions if action.dest == "drafter")
    # Not given, the drafter is the request resolver's default, as the server's and the app's are.
    assert list(drafter.choices) == list(DRAFTERS) and drafter.default is None and f"(default {DEFAULT})" in drafter.help
    assert resolve(Asked(), parts=PairParts.before_load(False), context=512).drafter == DEFAULT
    for row in DRAFTERS.values():
        assert row.description in drafter.help


def test_the_settings_accept_every_registered_drafter_and_no_other():
    for name in DRAFTERS:
        assert Settings().with_changes(drafter=name).drafter == name
    with pytest.raises(SettingsError, match="drafter must be one of auto, model"):
        Settings().with_changes(drafter="draft-model")


def test_the_bench_sweeps_every_fixed_drafter():
    fixed = {name for name, row in DRAFTERS.items() if row.drafts and Supports.CHOOSES_K not in row.supports}
    assert set(BENCH_DRAFTERS) == fixed == set(DRAFTERS) - {"auto", "none"}
    without_draft = parse_drafters(None, PairParts.of())
    assert without_draft == [name for name in BENCH_DRAFTERS if not PairParts.of().lacks(DRAFTERS[name])]
    assert "model" not in without_draft and "mtp" not in without_draft and "eagle3" not in without_draft
    with pytest.raises(UsageError, match="tree needs a draft model"):
        parse_drafters("ngram,tree", PairParts.of())
    with pytest.raises(UsageError, match="mtp needs a target with MTP layers"):
        parse_drafters("mtp", PairParts.of(Part.DRAFT_MODEL, Part.TARGET_TOKENIZER))
    assert "mtp" in parse_drafters(None, PairParts.of(Part.MTP_LAYERS))


def test_the_readme_lists_the_registry_in_order():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("and `--drafter`:") : text.index("- `none`")] + "- `none`"
    assert re.findall(r"^- `([a-z0-9]+)`", section, flags=re.MULTILINE) == list(DRAFTERS)


def test_unknown_names_are_a_clear_error():
    with pytest.raises(EngineError, match="Unknown drafter 'draft-model': choose one of auto, model, ngram"):
        spec("draft-model")


def test_each_row_builds_the_drafter_it_names_and_needs_a_draft_model_only_where_it_says(tiny, tmp_path):
    with Engine(EngineConfig(tiny["target"], tiny["same"], self_draft_dir=tmp_path)) as paired:
        for name, row in DRAFTERS.items():
            if not row.requires & {Part.MTP_LAYERS, Part.EAGLE3_HEAD}:  # tests/test_mtp.py and test_eagle3.py build those
                assert paired.decoder(name).drafter.name == name
    with Engine(EngineConfig(tiny["target"], None, self_draft_dir=tmp_path)) as alone:
        for name, row in DRAFTERS.items():
            if row.needs_draft_model:
                with pytest.raises(EngineError, match="need a draft model"):
                    alone.decoder(name)
            elif Part.MTP_LAYERS in row.requires:  # the tiny target keeps none (tests/test_mtp.py builds one that does)
                with pytest.raises(EngineError, match="carries no MTP layers"):
                    alone.decoder(name)
            elif Part.EAGLE3_HEAD in row.requires:
                with pytest.raises(EngineError, match="needs an EAGLE-3 head"):
                    alone.decoder(name)
            else:
                assert alone.decoder(name).drafter.name == name


def test_the_target_holds_a_second_sequence_only_once_the_tree_is_used(tiny):
    with Engine(EngineConfig(tiny["target"], tiny["same"])) as engine:
        for name, row in DRAFTERS.items():
            if name != "tree" and name != "self" and not row.requires & {Part.MTP_LAYERS, Part.EAGLE3_HEAD}:
                engine.decoder(name)
        assert engine.target.n_seq == 1
        engine.decoder("tree")
        assert engine.target.n_seq == 2


def _names_a_drafter(node: ast.expr) -> bool:
    """`drafter`, `mode.drafter`, `settings.drafter`...: an expression that holds a drafter's name."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "drafter" in name


def test_no_front_door_compares_a_drafter_by_its_name():
    """What a drafter needs and supports is the registry's data (drafts, chain, constrained, self_draft, sample_match,
    reference, chooses_k...): the bench, the session, the command line, the server and the app ask it, so a new drafter
    is one module and one row."""
    package = Path(__file__).resolve().parent.parent / "localspec"
    found = []
    for folder in ("bench", "session", "cli", "serve", "tui"):
        for path in sorted((package / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    sides = [node.left, *node.comparators]
                    named = [side.value for side in sides if isinstance(side, ast.Constant) and side.value in DRAFTERS]
                    if named and any(_names_a_drafter(side) for side in sides):
                        found.append(f"{path.relative_to(package)}:{node.lineno} compares with {named[0]!r}")
    assert not found, "\n".join(found)
