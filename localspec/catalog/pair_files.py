"""A catalog pair's files: where they are, whether they are complete, getting and removing them.

The pair check runs before any download: both GGUF headers are read (a few
megabytes, by range request, or from disk when a file is already here) and the
engine's own vocabulary rules decide, so an incompatible pair costs seconds, not
gigabytes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from localspec.catalog.models_toml import Catalog, CatalogError, ModelRef, Pair
from localspec.engine.drafters.registry import bridge_note
from localspec.engine.errors import PairMismatchError
from localspec.engine.pair_check import EAGLE3_ARCHITECTURE, TokenizerComparison, check_eagle3_head, compare_tokenizers
from localspec.gguf.header import GGUFHeader, read_local_header
from localspec.gguf.memory_kind import memory_kind
from localspec.gguf.summary import ModelSummary
from localspec.hub import cache
from localspec.hub.config import HubConfig
from localspec.hub.download import Downloader, FileRequest
from localspec.hub.remote import read_remote_header, remote_file

# What a pair without a draft model does, in the check's words (`localspec check`, the models screen).
TARGET_ALONE = "no draft model, so auto drafts by prompt lookup or decodes plainly, and the self drafter cuts a draft from the target"


@dataclass(frozen=True)
class ModelState:
    ref: ModelRef
    present: list[Path]  # the files on disk, in part order
    missing: list[str]  # the files (or the local path) not on disk

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def bytes_on_disk(self) -> int:
        return sum(cache.size_on_disk(p) for p in self.present)

    @property
    def first_file(self) -> Path | None:
        return self.present[0] if self.complete and self.present else None


def model_state(config: HubConfig, ref: ModelRef) -> ModelState:
    if ref.path is not None:
        return ModelState(ref, [ref.path], []) if ref.path.is_file() else ModelState(ref, [], [str(ref.path)])
    assert ref.repo is not None
    present: list[Path] = []
    missing: list[str] = []
    for file in ref.files:
        path = cache.cached_path(config, ref.repo, file)
        if path is not None:
            present.append(path)
        else:
            missing.append(file)
    return ModelState(ref, present, missing)


def pair_states(config: HubConfig, pair: Pair) -> tuple[ModelState, ...]:
    """The target's state, then the draft's where the pair has one."""
    return tuple(model_state(config, ref) for _, ref in pair.models)


def pair_size(states: tuple[ModelState, ...]) -> int:
    """Bytes the pair takes: the catalog's size for hub files, the size on disk for local ones (0: unknown)."""
    return sum(state.bytes_on_disk if state.ref.is_local else state.ref.size or 0 for state in states)


def download_status(states: tuple[ModelState, ...]) -> str:
    """"yes", "target only", "draft only" or "no": what `list` and the models screen show."""
    if all(state.complete for state in states):
        return "yes"
    return "target only" if states[0].complete else "draft only" if any(state.complete for state in states) else "no"


def local_pair_paths(config: HubConfig, pair: Pair) -> tuple[Path, Path | None]:
    """The target's and the draft's first files (None: a target alone), or an error that says how to get them."""
    found: list[Path] = []
    for role, ref in pair.models:
        state = model_state(config, ref)
        if state.first_file is None:
            if ref.is_local:
                raise CatalogError(f"The {role} of pair {pair.id!r} is not at {ref.path}. Fix the path in {pair.source}.")
            raise CatalogError(f"Pair {pair.id!r} is not downloaded yet ({role} {ref.label} is missing). Run `localspec pull {pair.id}`.")
        found.append(state.first_file)
    return found[0], found[1] if len(found) > 1 else None


def requests_for(ref: ModelRef) -> list[FileRequest]:
    assert ref.repo is not None
    return [FileRequest(ref.repo, file) for file in ref.files]


def pull_pair(downloader: Downloader, pair: Pair) -> tuple[Path, Path | None]:
    """Download what is missing of the pair (hub files only; local paths must already exist)."""
    requests: list[FileRequest] = []
    for _, ref in pair.models:
        if ref.is_local:
            if not model_state(downloader.config, ref).complete:
                raise CatalogError(f"Pair {pair.id!r} names a local file that does not exist: {ref.path}. Fix the path in {pair.source}.")
        else:
            requests += requests_for(ref)
    downloader.pull(requests)
    return local_pair_paths(downloader.config, pair)


@dataclass(frozen=True)
class HeaderReport:
    """One model's header and what reading it cost."""

    label: str
    summary: ModelSummary
    header: GGUFHeader
    bytes_read: int
    file_size: int | None
    remote: bool


@dataclass(frozen=True)
class PairCheck:
    target: HeaderReport
    draft: HeaderReport | None  # None: a target alone, which needs no check
    problem: str | None  # None: the pair can draft (an EAGLE-3 head must be made for the target)
    seconds: float
    tokenizers_differ: str = ""  # how the draft's tokenizer is not the target's: it drafts through text (bridged)
    tokenizers_tolerated: str = ""  # a difference llama.cpp refuses that the check accepted, and why (pair_check.py)

    @property
    def compatible(self) -> bool:
        return self.problem is None

    @property
    def verdict(self) -> str:
        """Whether and how the draft can draft for the target (or that there is none), in the one wording `check` and the app's
        models screen say."""
        if self.draft is None:
            return f"a target alone: {TARGET_ALONE}."
        if not self.compatible:
            return f"incompatible: {self.problem}"
        target, draft = self.target.summary, self.draft.summary
        if draft.architecture == EAGLE3_ARCHITECTURE:
            return ("compatible: the draft is an EAGLE-3 head made for a target of this shape (it reads three of its layers); "
                    "--drafter eagle3, or auto, drafts with it.")
        if self.tokenizers_differ:
            return f"compatible through text: {bridge_note(self.tokenizers_differ)}"
        if self.tokenizers_tolerated:
            return f"compatible: the draft drafts natively; {self.tokenizers_tolerated}."
        return (f"compatible: the draft shares the target's {target.vocab_type} vocabulary "
                f"({draft.n_vocab} and {target.n_vocab} tokens, identical text from id 5).")

    @property
    def notes(self) -> list[str]:
        """What the target's own file means for drafting (a hybrid's capped drafts, MTP layers), for a usable pair."""
        if not self.compatible:
            return []
        target = self.target.summary
        notes = []
        if reason := memory_kind(target.architecture).reason:
            notes.append(f"the target ({target.architecture}) is a recurrent or hybrid model: {reason}.")
        if target.mtp_note:
            notes.append(f"the target: {target.mtp_note}.")
        return notes

    @property
    def reports(self) -> tuple[tuple[str, HeaderReport], ...]:
        """(role, report) for the target, then the draft where there is one."""
        return (("target", self.target),) if self.draft is None else (("target", self.target), ("draft", self.draft))


def read_model_header(config: HubConfig, ref: ModelRef) -> HeaderReport:
    """From disk when the files are here, else the first bytes over HTTP; a split set's later parts add their tensors."""
    state = model_state(config, ref)
    if state.complete:
        headers = [read_local_header(p) for p in state.present]
        size = sum(p.stat().st_size for p in state.present)
        remote = False
    else:
        if ref.is_local:
            assert ref.path is not None
            read_local_header(ref.path)  # raises the loader's own words: not found, a directory, incomplete
            raise CatalogError(f"Local model file not found: {ref.path}. Fix the path, or download it first.")
        assert ref.repo is not None
        headers, size = [], 0
        for file in ref.files:
            info = remote_file(config, ref.repo, file)
            header, _ = read_remote_header(config, info)
            headers.append(header)
            size += info.size or 0
        remote = True
    summary = ModelSummary.from_headers(headers[0], headers[1:])
    return HeaderReport(ref.label, summary, headers[0], sum(h.bytes_read for h in headers), size or None, remote)


def check_pair_headers(config: HubConfig, target: ModelRef, draft: ModelRef | None) -> PairCheck:
    start = time.perf_counter()
    target_report = read_model_header(config, target)
    if draft is None:  # a target alone: its header read is the whole check
        return PairCheck(target_report, None, None, time.perf_counter() - start)
    draft_report = read_model_header(config, draft)
    target_header, draft_header = target_report.header, draft_report.header
    problem, comparison = None, TokenizerComparison()
    if draft_header.architecture == EAGLE3_ARCHITECTURE:  # a head over the target's layers, not a model of its own
        try:
            check_eagle3_head(target.label, int(target_header.arch_value("block_count") or 0),
                              int(target_header.arch_value("embedding_length") or 0), draft.label,
                              list(draft_header.arch_value("target_layers") or []), draft_header.arch_value("target_hidden_size"))
        except PairMismatchError as exc:
            problem = str(exc)
    else:
        comparison = compare_tokenizers(target_header, draft_header)
    return PairCheck(target_report, draft_report, problem, time.perf_counter() - start, comparison.difference, comparison.tolerated)


@dataclass(frozen=True)
class Removal:
    """What removing a pair deletes, worked out before anything is deleted, so the user can be asked first."""

    files: list[tuple[str, str, int]]  # repo, file, bytes on disk
    partials: list[tuple[Path, int]]  # unfinished downloads in the pair's repositories, resumable but useless once it is gone
    kept: list[tuple[str, str]]  # label, the other pair that still uses it

    @property
    def total_bytes(self) -> int:
        return sum(size for *_, size in self.files) + sum(size for _, size in self.partials)

    @property
    def empty(self) -> bool:
        return not self.files and not self.partials


def plan_removal(config: HubConfig, catalog: Catalog, pair: Pair) -> Removal:
    """The pair's downloaded files and partial downloads, keeping any file that another downloaded pair still uses."""
    files: list[tuple[str, str, int]] = []
    kept: list[tuple[str, str]] = []
    repos: set[str] = set()
    for _, ref in pair.models:
        if ref.is_local:
            continue  # the user's own file: never ours to delete
        assert ref.repo is not None
        repos.add(ref.repo)
        user = next((other.id for other in catalog.pairs.values() if other.id != pair.id and _uses(other, ref)
                     and all(model_state(config, r).complete for _, r in other.models)), None)
        if user is not None:
            kept.append((ref.label, user))
            continue
        for file in ref.files:
            path = cache.cached_path(config, ref.repo, file)
            if path is not None:
                files.append((ref.repo, file, cache.size_on_disk(path)))
    partials = [(path, path.stat().st_size) for repo in sorted(repos) for path in cache.partial_downloads(config, repo)]
    return Removal(files, partials, kept)


def carry_out(config: HubConfig, removal: Removal) -> list[tuple[str, int]]:
    """Delete what `removal` lists; (label, bytes freed) for each."""
    freed = [(f"{repo}/{file}", cache.remove(config, repo, file)) for repo, file, _ in removal.files]
    for path, size in removal.partials:
        path.unlink(missing_ok=True)
        freed.append((f"partial download {path.name}", size))
    return freed


def _uses(pair: Pair, ref: ModelRef) -> bool:
    return any(r.repo == ref.repo and r.file == ref.file for _, r in pair.models)
