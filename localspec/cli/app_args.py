"""`localspec --pair ID` and `localspec --target F.gguf [--draft D.gguf]`: the pair the app opens on, checked before it starts.

Files become a pair in the user's models.toml, as the app's "add pair" form makes one (or the pair that already names
exactly them), so the history, the models screen and `--pair` know them by an id afterwards.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from localspec.catalog.models_toml import load_catalog, user_catalog_path
from localspec.catalog.user_pairs import pair_for_files
from localspec.engine.llama.gguf_file import check_gguf_file
from localspec.errors import UsageError


@dataclass(frozen=True)
class AppOpening:
    pair_id: str | None  # None: the last pair used
    notice: str | None = None  # what the app says once it is up


def app_opening(args: argparse.Namespace) -> AppOpening:
    """The pair named on the command line, or the files made a pair; a UsageError (exit 2) for what was typed wrong."""
    if args.app_pair and (args.app_target or args.app_draft):
        raise UsageError("Give --pair, or --target (and --draft), not both.")
    if args.app_draft is not None and args.app_target is None:
        raise UsageError("--draft needs --target: give localspec --target F.gguf --draft D.gguf.")
    if args.app_pair:
        return AppOpening(load_catalog().get(args.app_pair).id)
    if args.app_target is None:
        return AppOpening(None)
    for option, path in (("--target", args.app_target), ("--draft", args.app_draft)):
        if path is not None:
            _check_model_path(option, path)
    catalog_file = user_catalog_path()
    pair, added = pair_for_files(catalog_file, args.app_target, args.app_draft)
    if not added:
        return AppOpening(pair.id)
    return AppOpening(pair.id, f"These files are pair {pair.id!r} now, saved to {catalog_file}: `localspec --pair {pair.id}` "
                               "opens it again, and F2 lists it.")


def _check_model_path(option: str, path: Path) -> None:
    if not path.exists():
        raise UsageError(f"{option} {path}: there is no such file. Check the path.")
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder: give the .gguf file inside it.")
    if path.suffix != ".gguf":
        raise UsageError(f"{option} {path}: the app keeps pairs of .gguf files, and this name does not end in .gguf. "
                         "Rename the file, or give a link to it that ends in .gguf.")
    check_gguf_file(path)  # a device or pipe, or not GGUF: the loader's own words (exit 1, as for generate)
