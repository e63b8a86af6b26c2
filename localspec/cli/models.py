"""The model commands' work: `pull`, `list`, `rm` and `check` (their arguments are defined in cli.py).

They share one shape: resolve what the user named (a catalog pair, a hub
REPO/FILE, or local paths), act through `pair_files` and the hub package, and
print plain text. The app calls the same functions from its workers.
"""

from __future__ import annotations

import argparse
import sys

from localspec.catalog.models_toml import Catalog, ModelRef, Pair, hub_file_ref, load_catalog, model_ref, user_catalog_path
from localspec.catalog.pair_files import (
    HeaderReport,
    PairCheck,
    carry_out,
    check_pair_headers,
    download_status,
    pair_states,
    plan_removal,
    pull_pair,
    requests_for,
)
from localspec.cli.confirm import confirmed
from localspec.cli.progress_bar import ProgressBar
from localspec.errors import UsageError
from localspec.gguf.split import split_parts
from localspec.hub.config import HubConfig
from localspec.hub.download import Downloader
from localspec.units import format_bytes


def run_model_command(args: argparse.Namespace) -> int:
    config = HubConfig.from_env()
    if args.command == "pull":
        return _pull(config, args)
    if args.command == "list":
        return _list(config, load_catalog())
    if args.command == "rm":
        return _rm(config, args.pair, args.yes)
    return _check(config, args)


def _hub_file(text: str) -> ModelRef:
    ref = hub_file_ref(text)
    if ref is None:
        raise UsageError(f"{text!r} is neither a pair id nor OWNER/REPO/FILE.gguf. Run `localspec list` for the pair ids.")
    return ref


def _model(role: str, text: str) -> ModelRef:
    ref = model_ref(text)
    if ref is None:
        raise UsageError(f"--{role} {text!r} is neither a local .gguf path nor OWNER/REPO/FILE.gguf.")
    return ref


def _pull(config: HubConfig, args: argparse.Namespace) -> int:
    downloader = Downloader(config, on_progress=ProgressBar())
    if "/" in args.name:
        ref = _hub_file(args.name)
        split_parts(ref.file or "")  # refuses a later part of a split set with a clear message
        paths = downloader.pull(requests_for(ref))
        print(paths[0])
        return 0
    pair = load_catalog().get(args.name)
    if not args.skip_check and download_status(pair_states(config, pair)) != "yes":
        result = check_pair_headers(config, pair.target, pair.draft)
        _print_check(result)
        if not result.compatible:
            return 1
    target, draft = pull_pair(downloader, pair)
    print(f"{pair.id} is ready:\n  target {target}" + (f"\n  draft  {draft}" if draft else ""))
    return 0


def _list(config: HubConfig, catalog: Catalog) -> int:
    print(f"{'':2}{'pair':<30} {'downloaded':<12} {'on disk':>9} {'needs':>9}  tags")
    for pair in catalog.pairs.values():
        states = pair_states(config, pair)
        status = download_status(states)
        on_disk = sum(s.bytes_on_disk for s in states)
        needs = f"{pair.memory_gib:.1f} GiB" if pair.memory_gib else "?"
        marker = "* " if pair.id == catalog.default_id else "  "
        print(f"{marker}{pair.id:<30} {status:<12} {format_bytes(on_disk) if on_disk else '-':>9} {needs:>9}  {', '.join(pair.tags)}")
        if status == "yes" and states[0].first_file is not None:
            print(f"{'':4}{states[0].first_file.parent}")
    print(f"\n* the default pair. Hub files live in {config.cache_dir}.")
    print(f"Add or override pairs in {user_catalog_path()}.")
    return 0


def _rm(config: HubConfig, pair_id: str, yes: bool) -> int:
    catalog = load_catalog()
    removal = plan_removal(config, catalog, catalog.get(pair_id))
    for label, user in removal.kept:
        print(f"kept    {label}: pair {user!r} uses it too")
    if removal.empty:
        if not removal.kept:
            print(f"{pair_id}: nothing downloaded to remove.")
        return 0
    what = f"{len(removal.files)} file(s)" + (f" and {len(removal.partials)} partial download(s)" if removal.partials else "")
    if not confirmed(f"delete {what} of {pair_id}, {format_bytes(removal.total_bytes)}", yes, f"localspec rm {pair_id}"):
        print("Nothing was deleted.")
        return 1
    for label, size in carry_out(config, removal):
        print(f"removed {label} ({format_bytes(size)})")
    return 0


def _check(config: HubConfig, args: argparse.Namespace) -> int:
    if args.pair and (args.target or args.draft):
        raise UsageError("Give a pair id, or --target and --draft, not both.")
    if args.pair:
        pair: Pair = load_catalog().get(args.pair)
        target, draft = pair.target, pair.draft
    elif args.target and args.draft:
        target, draft = _model("target", args.target), _model("draft", args.draft)
    else:
        raise UsageError("Give a pair id (`localspec check PAIR`), or both --target and --draft.")
    result = check_pair_headers(config, target, draft)
    _print_check(result)
    return 0 if result.compatible else 1


def _print_check(result: PairCheck) -> None:
    for role, report in result.reports:
        print(f"{role:<7}{report.label}")
        print(f"{'':7}{report.summary.describe()}")
        print(f"{'':7}{_read_note(report)}")
    total_read = sum(report.bytes_read for _, report in result.reports)
    total_size = sum(report.file_size or 0 for _, report in result.reports)
    share = f" of {format_bytes(total_size)} ({100 * total_read / total_size:.2f}%)" if total_size else ""
    print(f"read {format_bytes(total_read)}{share} in {result.seconds:.2f} s")
    if result.compatible:
        print(result.verdict)
        for note in result.notes:
            print(f"note: {note}")
    else:
        print(result.verdict, file=sys.stderr)


def _read_note(report: HeaderReport) -> str:
    where = "header read over HTTP" if report.remote else "header read from disk"
    size = f" of {format_bytes(report.file_size)}" if report.file_size else ""
    return f"{where}: {format_bytes(report.bytes_read)}{size}"
