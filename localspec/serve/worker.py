"""One generation at a time, in arrival order: the engine's single thread, fed by the HTTP handlers.

llama.cpp's calls block, and one loaded pair serves one generation at a time, so
every job runs on this one thread. A handler submits a job and reads its events
from an asyncio queue; a client that goes away sets the job's cancel event, and
the decode loop stops within one step (a job still waiting is skipped).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only
    from localspec.engine.engine import Engine

JobRun = Callable[["Job"], Iterator[Any]]


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
    run: JobRun
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


class Worker(Protocol):
    """What the routes need of a worker: this one-at-a-time worker, or the batch's slots (serve/batch_worker.py)."""

    def submit(self, run: JobRun) -> Job: ...

    def stop(self) -> None: ...

    @property
    def waiting(self) -> int: ...

    @property
    def processing(self) -> int: ...

    def slots(self, engine: Engine) -> list[SlotView]: ...


class GenerationWorker:
    def __init__(self) -> None:
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self.running: Job | None = None
        self._last_task = 0
        self._arrived = 0
        self._thread = threading.Thread(target=self._serve, name="localspec-generation", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def processing(self) -> int:
        return 1 if self.running is not None else 0

    def slots(self, engine: Engine) -> list[SlotView]:
        running = self.running
        return [SlotView(0, running.number if running else self._last_task, engine.target.n_ctx, running is not None,
                         engine.target.n_past)]

    def submit(self, run: JobRun) -> Job:
        """Called on the event loop: queue `run`, to start when every earlier job has ended."""
        self._arrived += 1  # only the event loop's thread submits
        job = Job(run, asyncio.get_running_loop(), self._arrived)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """The server stops: the running job and every queued one are cancelled (their handlers hear how they ended)."""
        for job in [self.running, *list(self._jobs.queue)]:
            if job is not None:
                job.cancel.set()
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            if job.cancel.is_set():  # its client left while it waited
                job.put(END)
                continue
            self.running = job
            self._last_task = job.number
            try:
                for event in job.run(job):
                    job.put(event)
            except Exception as exc:  # noqa: BLE001 (reported to the client; the server goes on)
                job.put(JobFailed(exc))
            finally:
                self.running = None
                job.put(END)
