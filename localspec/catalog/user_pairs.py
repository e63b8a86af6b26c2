"""Adding a pair to the user's models.toml, as the app's "add pair" form does.

The new table is appended to what the file already holds (comments and all),
and the whole result is parsed before it is written, so a mistake is reported
and the file on disk is never left broken.
"""

from __future__ import annotations

import json
from pathlib import Path

from localspec.catalog.models_toml import CatalogError, Pair, model_ref, parse_catalog


def model_table(role: str, spec: str) -> str:
    """`spec` is a local .gguf path, or OWNER/REPO/FILE.gguf on the hub."""
    ref = model_ref(spec)
    if ref is None:
        raise CatalogError(f"The {role} {spec.strip()!r} is neither a local .gguf path nor OWNER/REPO/FILE.gguf.")
    if ref.path is not None:
        return f"[pair.{role}]\npath = {json.dumps(str(ref.path))}\n"
    return f"[pair.{role}]\nrepo = {json.dumps(ref.repo)}\nfile = {json.dumps(ref.file)}\n"


def add_user_pair(file: Path, pair_id: str, title: str, target: str, draft: str) -> Pair:
    existing = file.read_text(encoding="utf-8") if file.exists() else ""
    block = f"\n[[pair]]\nid = {json.dumps(pair_id.strip())}\ntitle = {json.dumps(title.strip() or pair_id.strip())}\n"
    block += model_table("target", target) + model_table("draft", draft)
    text = existing.rstrip("\n") + "\n" + block if existing.strip() else block.lstrip("\n")
    catalog = parse_catalog(text, str(file), base_dir=file.parent, require_default=False)
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_suffix(".toml.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(file)
    return catalog.pairs[pair_id.strip()]
