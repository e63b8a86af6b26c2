"""Split GGUF sets: llama.cpp's gguf-split names the parts `NAME-00001-of-00003.gguf`, and a loader is given the first.

Both the catalog (which parts to download) and the memory planner (which parts to read) need the whole set.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from localspec.errors import LocalspecError

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


class SplitNameError(LocalspecError):
    """A part of a split set other than the first was named."""


def split_parts(file: str) -> list[str]:
    """`x-00001-of-00003.gguf` -> its three parts; any other name -> itself."""
    match = _SPLIT.match(PurePosixPath(file).name)
    if match is None:
        return [file]
    if int(match["index"]) != 1:
        raise SplitNameError(f"{file} is not the first part of its split set: name the -00001-of-{match['count']} file.")
    count = int(match["count"])
    parent = str(PurePosixPath(file).parent)
    prefix = "" if parent == "." else parent + "/"
    return [f"{prefix}{match['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
