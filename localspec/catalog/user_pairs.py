"""Adding a pair to the user's models.toml, as the app's "add pair" form does.

The new table is appended to what the file already holds (comments and all),
and the whole result is parsed before it is written, so a mistake is reported
and the file on disk is never left broken.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from pathlib import Path

from localspec.catalog.models_toml import CatalogError, Pair, load_catalog, model_ref, pair_id_problem, parse_catalog


def model_table(role: str, spec: str) -> str:
    """`spec` is a local .gguf path (which must exist), or OWNER/REPO/FILE.gguf on the hub."""
    ref = model_ref(spec)
    if ref is None:
        raise CatalogError(f"The {role} {spec.strip()!r} is neither a local .gguf path nor OWNER/REPO/FILE.gguf.")
    if ref.path is not None:
        if not ref.path.is_file():
            raise CatalogError(f"The {role} {str(ref.path)!r} is not a file here: check the path, or give OWNER/REPO/FILE.gguf on the hub.")
        return f"[pair.{role}]\npath = {json.dumps(str(ref.path.absolute()))}\n"  # models.toml reads a relative path from its own folder
    return f"[pair.{role}]\nrepo = {json.dumps(ref.repo)}\nfile = {json.dumps(ref.file)}\n"


def add_user_pair(file: Path, pair_id: str, title: str, target: str, draft: str) -> Pair:
    """Append the pair to `file` and return it (an empty `draft`: the target alone); a CatalogError says what to change,
    and the file is then untouched."""
    pair_id = pair_id.strip()
    problem = pair_id_problem(pair_id)
    if problem:
        raise CatalogError(problem)
    try:
        existing = file.read_text(encoding="utf-8") if file.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{file} could not be read ({exc}); the pair was not added.") from exc
    if existing.strip() and pair_id in parse_catalog(existing, str(file), base_dir=file.parent, require_default=False).pairs:
        raise CatalogError(f"A pair named {pair_id!r} is already in {file}: give this one another id.")
    block = f"\n[[pair]]\nid = {json.dumps(pair_id)}\ntitle = {json.dumps(title.strip() or pair_id)}\n"
    block += model_table("target", target) + (model_table("draft", draft) if draft.strip() else "")
    text = existing.rstrip("\n") + "\n" + block if existing.strip() else block.lstrip("\n")
    catalog = parse_catalog(text, str(file), base_dir=file.parent, require_default=False)
    temporary = file.with_suffix(".toml.tmp")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(file)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a half-written temporary file, where there is one
            temporary.unlink(missing_ok=True)
        raise CatalogError(f"The pair could not be saved to {file} ({exc.strerror or exc}): check that folder's permissions "
                           "and free space. Nothing was changed.") from exc
    return catalog.pairs[pair_id]


def pair_for_files(file: Path, target: Path, draft: Path | None) -> tuple[Pair, bool]:
    """The pair of these local files (`localspec --target F.gguf [--draft D.gguf]`): the catalog's, where a pair already
    names exactly them, else a new one added to `file` as the app's form adds it; and whether it was added."""
    catalog = load_catalog(file)
    wanted = [path.resolve() for path in (target, draft) if path is not None]
    for pair in catalog.pairs.values():
        if all(ref.path is not None for _, ref in pair.models) and [ref.path.resolve() for _, ref in pair.models if ref.path] == wanted:
            return pair, False
    base = re.sub(r"[^a-z0-9._-]+", "-", target.stem.lower()).strip("-._") or "local"
    pair_id = next(candidate for n in itertools.count(1) if (candidate := base if n == 1 else f"{base}-{n}") not in catalog.pairs)
    title = f"{target.name} with {draft.name}" if draft is not None else f"{target.name} alone"
    return add_user_pair(file, pair_id, title, str(target.absolute()), str(draft.absolute()) if draft is not None else ""), True
