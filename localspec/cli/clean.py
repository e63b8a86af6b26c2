"""`localspec clean`: delete what localspec made for itself (self-drafts, measured costs); never a download or a chat."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from localspec import paths
from localspec.cli.confirm import confirmed
from localspec.units import format_bytes


def own_caches() -> list[tuple[str, Path, int]]:
    """Each cache localspec fills on its own: (what, where, bytes). Everything in them is remade when needed."""
    caches = [("self-drafts", paths.self_draft_dir()), ("measured costs", paths.cost_cache_dir())]
    return [(what, where, _size(where)) for what, where in caches]


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def describe_caches() -> str:
    caches = own_caches()
    parts = ", ".join(f"{what} {format_bytes(size)}" for what, _, size in caches)
    return f"{format_bytes(sum(size for *_, size in caches))} ({parts}); `localspec clean` removes them"


def run_clean(args: argparse.Namespace) -> int:
    caches = [(what, where, size) for what, where, size in own_caches() if size]
    if not caches:
        print("Nothing to clean: localspec has no self-drafts or measured costs cached.")
        return 0
    total = sum(size for *_, size in caches)
    if not confirmed(f"delete the {' and the '.join(what for what, *_ in caches)} ({format_bytes(total)}; remade when needed)",
                     args.yes, "localspec clean"):
        print("Nothing was deleted.")
        return 1
    for what, where, size in caches:
        shutil.rmtree(where)
        print(f"removed {what} ({format_bytes(size)}) from {where}")
    return 0
