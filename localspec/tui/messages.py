"""What the workers tell the app. Workers only post these; widgets change on the app's own thread."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from localspec.catalog.pair_files import PairCheck
from localspec.hub.progress import DownloadProgress
from localspec.session.chat import AnswerResult, AnswerUpdate, LoadedPair


@dataclass
class PairLoadStage(Message):
    pair_id: str
    stage: str


@dataclass
class PairLoaded(Message):
    loaded: LoadedPair


@dataclass
class PairLoadFailed(Message):
    pair_id: str
    error: str
    cancelled: bool = False  # the user stopped it: said as information, not as an error


@dataclass
class AnswerProgress(Message):
    message_id: int
    update: AnswerUpdate


@dataclass
class AnswerStage(Message):
    """What an answer waits on before its first token (the drafter's first preparation, the prompt's read)."""

    message_id: int
    stage: str


@dataclass
class AnswerDone(Message):
    message_id: int
    result: AnswerResult


@dataclass
class AnswerFailed(Message):
    message_id: int
    error: str


@dataclass
class DownloadProgressed(Message):
    progress: DownloadProgress


@dataclass
class DownloadDone(Message):
    pair_id: str


@dataclass
class DownloadFailed(Message):
    pair_id: str
    error: str
    cancelled: bool
    unreachable: bool = False  # no network or HF_HUB_OFFLINE: the app then says how to use local files


@dataclass
class CheckDone(Message):
    pair_id: str
    result: PairCheck


@dataclass
class CheckFailed(Message):
    pair_id: str
    error: str


@dataclass
class StorageNotice(Message):
    """The history stopped saving to disk (kept in memory), or saves again."""

    text: str
