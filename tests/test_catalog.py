"""models.toml: the shipped catalog is complete and coherent; every kind of mistake is located and explained."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from localspec.catalog.models_toml import TAGS, CatalogError, load_catalog, parse_catalog
from localspec.gguf.split import split_parts

ROOT = Path(__file__).resolve().parents[1]

# A pair's target and draft must come from one family, or their tokenizers differ: each file name's family by its
# longest matching prefix (Qwen3.5 and 3.6 share one vocabulary, Qwen3 another).
FAMILIES = {"qwen2.5-coder": "qwen2.5-coder", "qwen2.5": "qwen2.5", "qwen3": "qwen3", "qwen3.5": "qwen3.5", "qwen3.6": "qwen3.5",
            "llama-3": "llama-3", "gemma-3": "gemma-3", "gemma-4": "gemma-4", "gpt-oss": "gpt-oss",
            "deepseek-r1-distill-qwen": "deepseek-r1-distill-qwen", "phi-4": "phi-4"}


def family(file: str) -> str:
    name = file.lower().removeprefix("meta-")
    return FAMILIES[max((prefix for prefix in FAMILIES if name.startswith(prefix)), key=len)]


def test_shipped_catalog_is_complete_and_each_pair_is_one_family_or_says_it_is_not():
    catalog = load_catalog(user_file=ROOT / "no-such-file.toml")
    assert len(catalog.pairs) >= 10
    assert catalog.default.id == "qwen2.5-coder-1.5b"
    assert catalog.default.target.file == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert catalog.default.draft.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    for pair in catalog.pairs.values():
        assert pair.title and pair.description and pair.notes and pair.tags, pair.id
        assert set(pair.tags) <= set(TAGS)
        assert pair.draft_max and pair.draft_p_min is not None and pair.memory_gib, pair.id
        for ref in (pair.target, pair.draft):
            assert ref.repo and ref.file and ref.size and ref.quantization and ref.license, (pair.id, ref)
            assert ref.quantization.lower().replace("_", "") in ref.file.lower().replace("_", ""), ref.file
        assert (family(pair.target.file) != family(pair.draft.file)) == pair.other_tokenizer, pair.id  # a draft of another family says so
        assert pair.target.size > pair.draft.size, pair.id  # type: ignore[operator]
        # the RAM estimate covers at least both files
        assert pair.memory_gib * 2**30 >= pair.target.size + pair.draft.size, pair.id  # type: ignore[operator]
    # the catalog's families and sizes, as the issue lists them
    ids = set(catalog.pairs)
    assert {"qwen2.5-coder-7b", "qwen2.5-coder-14b", "qwen2.5-coder-32b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
            "llama3.1-8b", "llama3.3-70b", "gemma3-12b", "deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b"} <= ids
    # and the families of 2026 (issue 58): hybrid dense and MoE Qwen3.6, Gemma 4, GPT-OSS, Qwen3-Coder's MoE
    assert {"qwen3.6-35b-a3b", "qwen3.6-27b", "gemma4-31b", "gpt-oss-120b", "qwen3-coder-30b-a3b"} <= ids
    # and a target with no small sibling, drafted through text by a model of another tokenizer (issue 60)
    assert catalog.pairs["phi-4-bridged"].other_tokenizer


def test_the_default_pair_is_the_real_pair_the_tests_use():
    from tests import real_pair

    default = load_catalog(user_file=ROOT / "no-such-file.toml").default
    assert (default.target.size, default.target.sha256) == (real_pair.TARGET.size, real_pair.TARGET.sha256)
    assert (default.draft.size, default.draft.sha256) == (real_pair.DRAFT.size, real_pair.DRAFT.sha256)


def test_the_package_ships_the_top_level_file():
    shipped = resources.files("localspec.catalog").joinpath("models.toml")
    assert not (ROOT / "localspec" / "catalog" / "models.toml").is_symlink()
    assert shipped.read_text("utf-8") == (ROOT / "models.toml").read_text("utf-8"), (
        "localspec/catalog/models.toml differs from the top-level models.toml, the source: cp models.toml localspec/catalog/")


def test_split_sets_expand_to_every_part():
    assert split_parts("q-00001-of-00003.gguf") == ["q-00001-of-00003.gguf", "q-00002-of-00003.gguf", "q-00003-of-00003.gguf"]
    assert split_parts("sub/q-00001-of-00002.gguf") == ["sub/q-00001-of-00002.gguf", "sub/q-00002-of-00002.gguf"]
    assert split_parts("model.gguf") == ["model.gguf"]


PAIR = '''default = "a"

[[pair]]
id = "a"
title = "A"
{extra_pair}
[pair.target]
repo = "org/target-GGUF"
file = "target.gguf"
{extra_target}
[pair.draft]
repo = "org/draft-GGUF"
file = "draft.gguf"
'''


def catalog_text(extra_pair: str = "", extra_target: str = "") -> str:
    return PAIR.format(extra_pair=extra_pair, extra_target=extra_target)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


# (what the file says, the line to blame (a substring of it), what the message must say)
MISTAKES = [
    (catalog_text(extra_pair='draft_maxx = 4'), "draft_maxx", r"pair 'a', field draft_maxx: unknown field 'draft_maxx'; expected one of id, title"),
    (catalog_text(extra_pair='draft_max = 0'), "draft_max", r"field draft_max: draft_max = 0; expected an integer from 1 to 32"),
    (catalog_text(extra_pair='draft_p_min = 1.5'), "draft_p_min", r"field draft_p_min: draft_p_min = 1.5; expected a number from 0 to 1"),
    (catalog_text(extra_pair='memory_gib = -2'), "memory_gib", r"field memory_gib: memory_gib = -2; expected a positive number"),
    (catalog_text(extra_pair='other_tokenizer = "yes"'), "other_tokenizer", r"field other_tokenizer: other_tokenizer = 'yes'; expected true where"),
    (catalog_text(extra_pair='tags = ["code", "vision"]'), "tags", r"field tags: .*; expected a list drawn from code, chat, reasoning, multilingual"),
    (catalog_text(extra_pair='title = 3').replace('title = "A"\n', ''), "title = 3", r"field title: title = 3 is not text"),
    (catalog_text(extra_target='size = "big"'), "size", r"field target.size: size = 'big'; expected the file size in bytes"),
    (catalog_text(extra_target='sha256 = "abc"'), "sha256", r"field target.sha256: sha256 = 'abc'; expected the file's sha256 as 64 lowercase hex digits"),
    (catalog_text(extra_target='quant = "Q4"'), "quant =", r"field target.quant: unknown field 'quant'; expected one of repo, file, path"),
    (catalog_text(extra_target='path = "/x.gguf"'), "[pair.target]", r"field target: neither or both of a hub file and a local path; expected either repo and file, or path"),
    (catalog_text().replace('file = "target.gguf"', 'file = "../../../.ssh/id_rsa.gguf"'), "id_rsa", r"field target.file: file = '../../../.ssh/id_rsa.gguf' would escape the download cache"),
    (catalog_text().replace('file = "target.gguf"', 'file = "/etc/target.gguf"'), "/etc/", r"field target.file: .* would escape the download cache; expected a relative name"),
    (catalog_text().replace('file = "target.gguf"', 'file = "C:\\\\models\\\\t.gguf"'), "C:", r"field target.file: .* would escape the download cache"),
    (catalog_text().replace('file = "target.gguf"', 'file = "target.bin"'), "target.bin", r"field target.file: file = 'target.bin' is not a .gguf file"),
    (catalog_text().replace('file = "target.gguf"', 'file = "t-00002-of-00003.gguf"'), "00002", r"field target.file: .*not the first part of its split set"),
    (catalog_text().replace('repo = "org/target-GGUF"', 'repo = "no-owner"'), "no-owner", r"field target.repo: repo = 'no-owner' is not a repository id; expected a Hugging Face repository id"),
    (catalog_text().replace('file = "target.gguf"\n', ''), "[pair.target]", r"field target: missing field 'file'"),
    (catalog_text().replace('id = "a"', 'id = "Bad Id!"'), "Bad Id", r"pair 'Bad Id!', field id: id 'Bad Id!' is not usable; expected a short name"),
    (catalog_text().replace('title = "A"\n', ''), "[[pair]]", r"pair 'a': missing field 'title'; expected a one-line title"),
    (catalog_text().replace('default = "a"', 'default = "b"'), "default", r"field default: default = 'b' names no pair in this file; expected one of a"),
    (catalog_text().replace('default = "a"', 'colour = "blue"\ndefault = "a"'), "colour", r"field colour: unknown top-level field 'colour'"),
    (catalog_text() + catalog_text().replace('default = "a"', '').replace('id = "a"', 'id = "a"  # again'), "# again",
     r"pair 'a', field id: the id 'a' is used twice in this file; expected each pair id once"),
]


@pytest.mark.parametrize("text,blame,message", MISTAKES, ids=[m[2][:48] for m in MISTAKES])
def test_every_mistake_names_file_line_pair_field_and_what_is_expected(text, blame, message):
    with pytest.raises(CatalogError) as caught:
        parse_catalog(text, "/home/u/.config/localspec/models.toml")
    error = str(caught.value)
    line = line_of(text, blame) if blame != "[[pair]]" or text.count("[[pair]]") == 1 else None
    assert error.startswith(f"/home/u/.config/localspec/models.toml, line {line}"), error
    assert re.search(message, error), error
    assert "expected" in error


def test_a_pair_without_a_draft_is_the_target_alone():
    """Issue 75: `localspec --target F.gguf` keeps a target alone as a pair; its draft is None, not a parse error."""
    catalog = parse_catalog(catalog_text().replace('[pair.draft]\nrepo = "org/draft-GGUF"\nfile = "draft.gguf"\n', ''), "models.toml")
    pair = catalog.pairs["a"]
    assert pair.draft is None and [role for role, _ in pair.models] == ["target"]


def test_syntax_errors_keep_tomllib_position():
    with pytest.raises(CatalogError, match=r"models.toml: not valid TOML: .*line 3"):
        parse_catalog('default = "a"\n[[pair]]\nid = "a\n', "models.toml")


def test_user_pairs_add_to_and_override_the_shipped_ones(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text(
        'default = "mine"\n'
        '[[pair]]\nid = "mine"\ntitle = "Mine"\n'
        '[pair.target]\npath = "models/t.gguf"\n'
        '[pair.draft]\npath = "~/d.gguf"\n'
        '[[pair]]\nid = "qwen2.5-coder-7b"\ntitle = "My 7B"\n'
        '[pair.target]\nrepo = "me/Qwen-7B-GGUF"\nfile = "q.gguf"\n'
        '[pair.draft]\nrepo = "me/Qwen-0.5B-GGUF"\nfile = "d.gguf"\n'
    )
    catalog = load_catalog(user)
    assert catalog.default.id == "mine"
    assert catalog.get("mine").target.path == tmp_path / "models" / "t.gguf"  # relative to the user's file
    assert catalog.get("mine").draft.path == Path.home() / "d.gguf"
    assert catalog.get("qwen2.5-coder-7b").title == "My 7B"
    assert catalog.get("qwen2.5-coder-7b").source == str(user)
    assert "qwen3-8b" in catalog.pairs  # the rest of the shipped catalog is still there
    with pytest.raises(CatalogError, match=r"No pair named 'nope'\. Known pairs: .*mine"):
        catalog.get("nope")


def test_a_user_default_must_name_a_known_pair(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text('default = "ghost"\n')
    with pytest.raises(CatalogError, match=r"default = 'ghost' names no pair; expected one of"):
        load_catalog(user)


def test_one_rule_reads_a_model_the_user_typed(tmp_path):
    from localspec.catalog.models_toml import ModelRef, hub_file_ref, model_ref

    assert model_ref("Qwen/Qwen2.5-GGUF/q4/model.gguf") == ModelRef(repo="Qwen/Qwen2.5-GGUF", file="q4/model.gguf")
    assert model_ref(f"  {tmp_path / 'x.gguf'} ") == ModelRef(path=tmp_path / "x.gguf")  # written as a path: local, existing or not
    assert model_ref("~/m.gguf") == ModelRef(path=Path("~/m.gguf").expanduser())
    for neither in ("owner/model.gguf", "a//b.gguf", "owner/repo/notes.txt", ""):
        assert model_ref(neither) is None and hub_file_ref(neither) is None


def test_the_add_pair_form_says_what_to_change_and_leaves_the_file_alone(tmp_path, tiny):
    """Issue 47: a folder that cannot be written crashed the app; a missing file was saved as a pair; an invalid id was
    reported against a models.toml line the user never typed."""
    from localspec.catalog.user_pairs import add_user_pair

    catalog = tmp_path / "models.toml"
    target, draft = str(tiny["target"]), str(tiny["near"])
    add_user_pair(catalog, "mine", "Mine", target, draft)
    before = catalog.read_text()
    cases = {
        ("My Pair", target, draft): "The id 'My Pair' is not usable: give a short name of lowercase letters",
        ("mine", target, draft): "A pair named 'mine' is already in",
        ("other", str(tmp_path / "missing.gguf"), draft): "is not a file here: check the path",
    }
    for (pair_id, target_spec, draft_spec), says in cases.items():
        with pytest.raises(CatalogError) as raised:
            add_user_pair(catalog, pair_id, "", target_spec, draft_spec)
        assert says in str(raised.value) and "line" not in str(raised.value), str(raised.value)
    assert catalog.read_text() == before
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(CatalogError, match="could not be saved to .*Nothing was changed"):
        add_user_pair(blocked / "models.toml", "mine", "", target, draft)
