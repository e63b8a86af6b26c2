"""The pair catalog: localspec's shipped `models.toml`, overlaid by the user's own.

A pair is a target and a draft that share a tokenizer. The shipped catalog is the
repository's top-level models.toml, shipped inside the package as
localspec/catalog/models.toml (a copy a test keeps identical: a symlink breaks on
Windows checkouts and in some wheel builds); users add
or override pairs in `models.toml` in their config directory. Every problem in
either file is reported with the file, the line, the pair and the field, and
what was expected instead, because a user editing TOML by hand deserves better
than a KeyError.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from localspec import paths
from localspec.catalog.toml_lines import TomlLines
from localspec.engine import defaults
from localspec.errors import LocalspecError, UsageError
from localspec.gguf.split import SplitNameError, split_parts

TAGS = ("code", "chat", "reasoning", "multilingual")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

_PAIR_FIELDS = {
    "id": "a short name of lowercase letters, digits, '.', '-' or '_', such as \"qwen2.5-coder-7b\"",
    "title": "a one-line title in quotes",
    "description": "a sentence in quotes",
    "tags": f"a list drawn from {', '.join(TAGS)}",
    "target": "a [pair.target] table",
    "draft": "a [pair.draft] table (left out: the target alone, which drafts by prompt lookup or from itself)",
    "draft_max": "an integer from 1 to 32: the most tokens to draft per step",
    "draft_p_min": "a number from 0 to 1: stop drafting below this draft confidence",
    "memory_gib": f"a positive number: GiB of RAM or VRAM the pair needs at a {defaults.N_CTX}-token context",
    "notes": "text in quotes",
    "other_tokenizer": "true where the draft's tokenizer is not the target's (it drafts through text), else leave it out",
}
_MODEL_FIELDS = {
    "repo": "a Hugging Face repository id such as \"Qwen/Qwen2.5-Coder-7B-Instruct-GGUF\"",
    "file": "a .gguf file name inside the repository (the first part of a split set)",
    "path": "the path of a local .gguf file",
    "size": "the file size in bytes, an integer (all parts together for a split set)",
    "quantization": "the quantization name in quotes, such as \"Q4_K_M\"",
    "license": "the license id in quotes, such as \"apache-2.0\"",
    "sha256": "the file's sha256 as 64 lowercase hex digits",
}


class CatalogError(LocalspecError):
    """A models.toml that cannot be used, located to the line."""


class UnknownPairError(CatalogError, UsageError):
    """A pair id the catalog does not have: the user's typo, so the command line exits 2 for it."""


@dataclass(frozen=True)
class ModelRef:
    """One model of a pair: a file on the hub (repo + file) or on the local disk (path)."""

    repo: str | None = None
    file: str | None = None
    path: Path | None = None
    size: int | None = None
    quantization: str | None = None
    license: str | None = None
    sha256: str | None = None

    @property
    def is_local(self) -> bool:
        return self.path is not None

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else f"{self.repo}/{self.file}"

    @property
    def files(self) -> list[str]:
        """Every file to fetch: the one GGUF, or all parts of a split set, in order."""
        if self.file is None:
            return []
        return split_parts(self.file)


def hub_file_ref(text: str) -> ModelRef | None:
    """OWNER/REPO/FILE.gguf (the file may sit in a folder of the repository) as a hub reference; None if `text` is not one."""
    parts = text.strip().split("/")
    if len(parts) < 3 or not parts[-1].endswith(".gguf") or any(part in ("", ".", "..") for part in parts):
        return None
    repo = "/".join(parts[:2])
    if not _REPO.match(repo) or ".." in repo or "--" in repo:  # the hub's own rules for a repository id
        return None
    return ModelRef(repo=repo, file="/".join(parts[2:]))


def pair_id_problem(pair_id: str) -> str | None:
    """What is wrong with a pair id the user typed, in the words models.toml's own check uses; None where it is usable."""
    return None if _ID.match(pair_id) else f"The id {pair_id!r} is not usable: give {_PAIR_FIELDS['id']}."


def model_ref(text: str) -> ModelRef | None:
    """What the user typed for a model: a local path (one that exists, or is written as a path: absolute, ./ or ~),
    else OWNER/REPO/FILE.gguf on the hub; None if it is neither. The command line and the app's form share this rule."""
    text = text.strip()
    if not text:
        return None
    path = Path(text).expanduser()
    if path.is_absolute() or text.startswith((".", "~")) or path.exists():
        return ModelRef(path=path)
    return hub_file_ref(text)


@dataclass(frozen=True)
class Pair:
    id: str
    title: str
    target: ModelRef
    draft: ModelRef | None  # None: the target alone (auto drafts by prompt lookup; the self drafter cuts a draft from it)
    description: str = ""
    tags: tuple[str, ...] = ()
    draft_max: int | None = None
    draft_p_min: float | None = None
    memory_gib: float | None = None
    notes: str = ""
    other_tokenizer: bool = False  # the draft's tokenizer is not the target's: it drafts through text (the bridged drafter)
    source: str = ""  # the file that defined it, for messages

    @property
    def models(self) -> tuple[tuple[str, ModelRef], ...]:
        """(role, model) for the target, then the draft where the pair has one."""
        return (("target", self.target),) if self.draft is None else (("target", self.target), ("draft", self.draft))


@dataclass(frozen=True)
class Catalog:
    pairs: dict[str, Pair]
    default_id: str
    sources: tuple[str, ...] = field(default=())

    def get(self, pair_id: str) -> Pair:
        try:
            return self.pairs[pair_id]
        except KeyError:
            known = ", ".join(sorted(self.pairs))
            raise UnknownPairError(f"No pair named {pair_id!r}. Known pairs: {known}. Run `localspec list` to see them all.") from None

    @property
    def default(self) -> Pair:
        return self.pairs[self.default_id]


def shipped_catalog_text() -> str:
    return resources.files("localspec.catalog").joinpath("models.toml").read_text(encoding="utf-8")


def user_catalog_path() -> Path:
    return paths.config_dir() / "models.toml"


def load_catalog(user_file: Path | None = None) -> Catalog:
    """The shipped pairs, with the user's file (if any) adding pairs or replacing them by id."""
    shipped = parse_catalog(shipped_catalog_text(), "models.toml (shipped with localspec)")
    user_file = user_file if user_file is not None else user_catalog_path()
    if not user_file.is_file():
        return shipped
    try:
        text = user_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{user_file}: cannot be read ({exc}). Fix or remove the file.") from exc
    user = parse_catalog(text, str(user_file), base_dir=user_file.parent, require_default=False)
    pairs = {**shipped.pairs, **user.pairs}
    default_id = user.default_id or shipped.default_id
    if default_id not in pairs:
        raise CatalogError(f"{user_file}: default = {default_id!r} names no pair; expected one of {', '.join(sorted(pairs))}.")
    return Catalog(pairs, default_id, shipped.sources + user.sources)


def parse_catalog(text: str, source: str, base_dir: Path | None = None, require_default: bool = True) -> Catalog:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{source}: not valid TOML: {exc}. Fix the syntax at that spot.") from exc
    parser = _Parser(source, TomlLines(text), base_dir)
    return parser.catalog(data, require_default)


class _Parser:
    def __init__(self, source: str, lines: TomlLines, base_dir: Path | None) -> None:
        self.source = source
        self.lines = lines
        self.base_dir = base_dir

    def fail(self, problem: str, expected: str, pair_index: int | None = None, pair_id: str | None = None,
             section: str | None = None, key: str | None = None) -> CatalogError:
        line = self.lines.line_of(pair_index, section, key)
        where = f"{self.source}, line {line}" if line else self.source
        if pair_index is not None:
            name = f"pair {pair_id!r}" if pair_id else f"pair #{pair_index + 1}"
            dotted = ".".join(part for part in (section, key) if part)
            where += f", {name}" + (f", field {dotted}" if dotted else "")
        elif key:
            where += f", field {key}"
        return CatalogError(f"{where}: {problem}; expected {expected}.")

    def catalog(self, data: dict[str, Any], require_default: bool) -> Catalog:
        for key in data:
            if key not in ("default", "pair"):
                raise self.fail(f"unknown top-level field {key!r}", "only `default = \"PAIR-ID\"` and [[pair]] tables", key=key)
        raw_pairs = data.get("pair", [])
        if not isinstance(raw_pairs, list) or not all(isinstance(p, dict) for p in raw_pairs):
            raise self.fail("`pair` is not a list of tables", "[[pair]] tables", key="pair")
        pairs: dict[str, Pair] = {}
        for index, raw in enumerate(raw_pairs):
            pair = self.pair(index, raw)
            if pair.id in pairs:
                raise self.fail(f"the id {pair.id!r} is used twice in this file", "each pair id once", index, pair.id, key="id")
            pairs[pair.id] = pair
        default = data.get("default", "")
        if not isinstance(default, str):
            raise self.fail("default is not a string", "the id of a pair, in quotes", key="default")
        if default and default not in pairs and require_default:
            raise self.fail(f"default = {default!r} names no pair in this file", f"one of {', '.join(sorted(pairs))}", key="default")
        if require_default and not default:
            raise self.fail("no default pair", "`default = \"PAIR-ID\"` at the top of the file")
        return Catalog(pairs, default, (self.source,))

    def pair(self, index: int, raw: dict[str, Any]) -> Pair:
        pair_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        ctx: dict[str, Any] = {"pair_index": index, "pair_id": pair_id}
        for key in raw:
            if key not in _PAIR_FIELDS:
                raise self.fail(f"unknown field {key!r}", f"one of {', '.join(_PAIR_FIELDS)}", key=key, **ctx)
        for required in ("id", "title", "target"):
            if required not in raw:
                raise self.fail(f"missing field {required!r}", _PAIR_FIELDS[required], **ctx)
        if pair_id is None or not _ID.match(pair_id):
            raise self.fail(f"id {raw['id']!r} is not usable", _PAIR_FIELDS["id"], key="id", **ctx)
        text = {key: self.string(raw, key, ctx) for key in ("title", "description", "notes")}
        tags = raw.get("tags", [])
        if not isinstance(tags, list) or any(tag not in TAGS for tag in tags):
            raise self.fail(f"tags {tags!r} are not all known", _PAIR_FIELDS["tags"], key="tags", **ctx)
        draft_max = raw.get("draft_max")
        if draft_max is not None and (not isinstance(draft_max, int) or isinstance(draft_max, bool) or not 1 <= draft_max <= 32):
            raise self.fail(f"draft_max = {draft_max!r}", _PAIR_FIELDS["draft_max"], key="draft_max", **ctx)
        other_tokenizer = raw.get("other_tokenizer", False)
        if not isinstance(other_tokenizer, bool):
            raise self.fail(f"other_tokenizer = {other_tokenizer!r}", _PAIR_FIELDS["other_tokenizer"], key="other_tokenizer", **ctx)
        return Pair(
            id=pair_id,
            title=text["title"],
            description=text["description"],
            notes=text["notes"],
            tags=tuple(tags),
            target=self.model(raw["target"], "target", ctx),
            draft=self.model(raw["draft"], "draft", ctx) if "draft" in raw else None,
            draft_max=draft_max,
            draft_p_min=self.number(raw, "draft_p_min", ctx, 0.0, 1.0),
            memory_gib=self.number(raw, "memory_gib", ctx, 0.0, None),
            other_tokenizer=other_tokenizer,
            source=self.source,
        )

    def string(self, raw: dict[str, Any], key: str, ctx: dict[str, Any], section: str | None = None) -> str:
        value = raw.get(key, "")
        if not isinstance(value, str):
            raise self.fail(f"{key} = {value!r} is not text", (_MODEL_FIELDS if section else _PAIR_FIELDS)[key], section=section, key=key, **ctx)
        return value

    def number(self, raw: dict[str, Any], key: str, ctx: dict[str, Any], low: float, high: float | None) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value and (high is None or value <= high)
        if not ok or (high is None and value == low):
            raise self.fail(f"{key} = {value!r}", _PAIR_FIELDS[key], key=key, **ctx)
        return float(value)

    def model(self, raw: Any, section: str, ctx: dict[str, Any]) -> ModelRef:
        if not isinstance(raw, dict):
            raise self.fail(f"{section} is not a table", f"a [pair.{section}] table with repo and file, or path", key=section, **ctx)
        for key in raw:
            if key not in _MODEL_FIELDS:
                raise self.fail(f"unknown field {key!r}", f"one of {', '.join(_MODEL_FIELDS)}", section=section, key=key, **ctx)
        where = dict(section=section, **ctx)
        has_hub = "repo" in raw or "file" in raw
        if has_hub == ("path" in raw):
            raise self.fail("neither or both of a hub file and a local path", "either repo and file, or path", **where)
        values = {key: self.string(raw, key, ctx, section) for key in ("repo", "file", "path", "quantization", "license", "sha256") if key in raw}
        size = raw.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
            raise self.fail(f"size = {size!r}", _MODEL_FIELDS["size"], key="size", **where)
        sha256 = values.get("sha256")
        if sha256 is not None and not _SHA256.match(sha256):
            raise self.fail(f"sha256 = {sha256!r}", _MODEL_FIELDS["sha256"], key="sha256", **where)
        if "path" in values:
            return ModelRef(path=self.local_path(values["path"], where), size=size, quantization=values.get("quantization"),
                            license=values.get("license"), sha256=sha256)
        for key in ("repo", "file"):
            if key not in values:
                raise self.fail(f"missing field {key!r}", _MODEL_FIELDS[key], **where)
        if not _REPO.match(values["repo"]):
            raise self.fail(f"repo = {values['repo']!r} is not a repository id", _MODEL_FIELDS["repo"], key="repo", **where)
        self.check_file_name(values["file"], where)
        try:
            split_parts(values["file"])
        except SplitNameError as exc:
            raise self.fail(str(exc).rstrip("."), "the -00001-of-NNNNN part", key="file", **where) from None
        return ModelRef(repo=values["repo"], file=values["file"], size=size, quantization=values.get("quantization"),
                        license=values.get("license"), sha256=sha256)

    def check_file_name(self, file: str, where: dict[str, Any]) -> None:
        """A file name must stay inside its repository's folder in the cache: no absolute path, no `..`."""
        posix = PurePosixPath(file.replace("\\", "/"))
        if posix.is_absolute() or re.match(r"^[A-Za-z]:", file) or ".." in posix.parts or not file.strip():
            raise self.fail(f"file = {file!r} would escape the download cache", "a relative name inside the repository, without '..'",
                            key="file", **where)
        if not file.endswith(".gguf"):
            raise self.fail(f"file = {file!r} is not a .gguf file", _MODEL_FIELDS["file"], key="file", **where)

    def local_path(self, text: str, where: dict[str, Any]) -> Path:
        path = Path(text).expanduser()
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        if path.suffix != ".gguf":
            raise self.fail(f"path = {text!r} is not a .gguf file", _MODEL_FIELDS["path"], key="path", **where)
        return path
