"""`localspec make-draft`: cut a self-speculative draft from a target's first blocks and its output head."""

from __future__ import annotations

import argparse

from localspec.engine.drafters.self_draft import make_self_draft
from localspec.errors import UsageError
from localspec.machine.memory_plan import read_footprint


def run_make_draft(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise UsageError(f"{args.out} already exists: choose another name, or delete it first.")
    if not args.out.parent.is_dir():  # as cp refuses: a typo in the folder should not grow a new tree
        raise UsageError(f"{args.out.parent} is not an existing folder: create it first, or write the draft elsewhere.")
    floor = read_footprint(args.target, n_ctx=512).cut_floor  # a hybrid's cut keeps a block that attends (its header says which)
    made = make_self_draft(args.target, args.out, args.layers, floor)
    print(f"wrote {made.path}: the first {made.n_layers} of {made.of_layers} blocks, {made.size_bytes / 1e6:.0f} MB")
    print(f"use it as a draft: localspec generate --target {args.target} --draft {made.path} --drafter model --prompt ...")
    return 0
