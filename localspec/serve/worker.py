"""A job as the server's worker (batch_worker.py) and the HTTP handlers share it.

llama.cpp's calls block, so every job runs on the worker's one thread. A handler
submits a job and reads its events from an asyncio queue; a client that goes
away sets the job's cancel event, and the decode loop stops within one step (a
job still waiting is skipped).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from localspec.serve.jobs import GenerationJob


@dataclass(frozen=True)
class JobFailed:
    """The job raised: the handler turns the exception into an HTTP error."""

    error: BaseException


END = object()  # after a job's last event


@dataclass(frozen=True)
class SlotView:
    """A slot as /slots shows it."""

    id: int
    task: int  # the arrival number of its running (else last) request; 0: none yet
    n_ctx: int  # the context one request may fill
    busy: bool
    tokens_cached: int


@dataclass
class Job:
    run: GenerationJob
    loop: asyncio.AbstractEventLoop
    number: int  # arrival order, from 1: the log and llama.cpp's id_task say it, so the queue's order can be seen
    cancel: threading.Event = field(default_factory=threading.Event)
    slot: int = 0  # the slot it runs in (several with --parallel)
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def put(self, item: Any) -> None:
        """From the worker thread: hand an item to the handler's event loop (which may have closed meanwhile)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is gone (the server is stopping): nobody is listening
            self.cancel.set()
