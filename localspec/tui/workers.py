"""The work that must not run on the UI thread: loading, generating, downloading, checking.

Each function runs in a thread worker and reports only through `post`, which
posts a message to the app. None of them touches a widget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from textual.message import Message

from localspec.catalog.models_toml import Pair
from localspec.catalog.pair_files import check_pair_headers, pull_pair
from localspec.engine.chat import Message as ChatMessage
from localspec.engine.errors import LoadCancelled
from localspec.errors import LocalspecError
from localspec.hub.config import HubConfig
from localspec.hub.download import Downloader
from localspec.hub.errors import DownloadCancelled, HubUnreachableError
from localspec.session.chat import AnswerUpdate, LoadedPair, load_pair, stream_answer
from localspec.session.history import History
from localspec.session.settings import Settings
from localspec.tui import messages as m

Post = Callable[[Message], object]


def load(post: Post, pair: Pair, target: Path, draft: Path | None, settings: Settings, cancel: threading.Event) -> None:
    try:
        loaded = load_pair(pair, target, draft, settings, lambda stage: post(m.PairLoadStage(pair.id, stage)), cancel)
    except LoadCancelled as exc:
        post(m.PairLoadFailed(pair.id, str(exc), cancelled=True))
        return
    except LocalspecError as exc:
        post(m.PairLoadFailed(pair.id, str(exc)))
        return
    except MemoryError:
        post(m.PairLoadFailed(pair.id, "Out of memory while loading the pair. Pick a smaller pair or quantization, or lower the context size."))
        return
    post(m.PairLoaded(loaded))


def answer(post: Post, loaded: LoadedPair, chat: list[ChatMessage], settings: Settings, history: History, message_id: int,
           cancel: threading.Event, counts: tuple[int, int], drawn: threading.Event) -> None:
    """`drawn` is set by the app once it has drawn the last update; until then, updates wait and merge."""

    def send(update: AnswerUpdate) -> None:
        drawn.clear()
        post(m.AnswerProgress(message_id, update))

    try:
        result = stream_answer(loaded, chat, settings, history, message_id, cancel, send, counts, ready=drawn.is_set,
                               on_stage=lambda stage: post(m.AnswerStage(message_id, stage)))
    except LocalspecError as exc:
        post(m.AnswerFailed(message_id, str(exc)))
        return
    post(m.AnswerDone(message_id, result))


def download(post: Post, config: HubConfig, pair: Pair, cancel: threading.Event) -> None:
    downloader = Downloader(config, on_progress=lambda progress: post(m.DownloadProgressed(progress)), cancel=cancel)
    try:
        pull_pair(downloader, pair)
    except DownloadCancelled as exc:
        post(m.DownloadFailed(pair.id, str(exc), cancelled=True))
        return
    except HubUnreachableError as exc:
        post(m.DownloadFailed(pair.id, str(exc), cancelled=False, unreachable=True))
        return
    except LocalspecError as exc:
        post(m.DownloadFailed(pair.id, str(exc), cancelled=False))
        return
    post(m.DownloadDone(pair.id))


def check(post: Post, config: HubConfig, pair: Pair) -> None:
    try:
        result = check_pair_headers(config, pair.target, pair.draft)
    except LocalspecError as exc:
        post(m.CheckFailed(pair.id, str(exc)))
        return
    post(m.CheckDone(pair.id, result))
