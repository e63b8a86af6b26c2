"""What can go wrong between localspec and the hub, phrased for the user."""

from __future__ import annotations

from localspec.errors import LocalspecError


class HubError(LocalspecError):
    """A download or a remote read failed; the message says why and what to do."""


class HubUnreachableError(HubError):
    """The hub cannot be reached (no network, or HF_HUB_OFFLINE): only files already here can be used."""


class DownloadCancelled(HubError):
    """The user stopped a download; the partial file is kept so that the next pull resumes."""


class HashMismatchError(HubError):
    """The bytes that arrived are not the file the hub announced; the bad file was removed."""
