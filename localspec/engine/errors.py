"""Errors the engine raises on purpose.

Every message is written for the person at the keyboard: it says what is wrong
and what to do about it, so the CLI and the app can show it as it is.
"""

from __future__ import annotations

from localspec.errors import LocalspecError, UsageError


class EngineError(LocalspecError):
    """Base class of the engine's expected failures."""


class ModelLoadError(EngineError):
    """A GGUF file is missing, is not GGUF, is damaged, or does not fit in memory."""


class PairMismatchError(EngineError):
    """The draft's vocabulary differs from the target's, so its tokens mean something else."""


class ChatTemplateError(EngineError):
    """The target has no usable chat template."""


class PromptTooLongError(EngineError):
    """The prompt leaves no room in the context for an answer."""


class DeviceLostError(EngineError):
    """A device holding part of a model stopped answering mid-decode (an RPC server that quit): the answer ends."""


class LoadCancelled(EngineError):
    """The user stopped loading a pair; whatever was loaded has been released."""


class DrafterChoiceError(EngineError, UsageError):
    """The drafter asked for cannot run on the models loaded (no draft model, another tokenizer, no MTP layers, no
    EAGLE-3 head): the choice is the user's to change, so the command line exits 2 and the server answers 400."""


class SamplingSettingsError(EngineError, UsageError):
    """A sampling value (temperature, top-k, top-p, min-p) out of its range; `setting` names it as the user types it."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting
