"""The server's one worker: the decode loop's thread, fed by the HTTP handlers, with one slot or N (`--parallel N`).

Jobs queue in arrival order; whenever a slot is free the next job takes it (its
prompt built and checked on this thread, beside the engine), and joins the batch
at the next step. Each request is drafted by its drafter's object (the
engine's, which keeps what it learns, and serves every slot running it); one
slot runs every drafter, several those that run in a batch (the registry's
`batchable`). Every llama.cpp call
stays on this one thread; a handler hears its job's events through the job's
queue, and a client that leaves sets the job's cancel event, which frees its
slot at the next step.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import replace

from localspec.engine.batch.scheduler import BatchScheduler
from localspec.engine.batch.slot import SlotRequest
from localspec.engine.engine import Engine
from localspec.engine.events import Finished, TokenEvent
from localspec.serve.jobs import Deadline, GenerationJob, Started
from localspec.serve.options import refuse_unbatchable
from localspec.serve.worker import END, Job, JobFailed, SlotView


class BatchWorker:
    def __init__(self) -> None:
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._scheduler: BatchScheduler | None = None
        self._ready = threading.Event()
        self._tasks: dict[int, int] = {}  # slot -> arrival number of its running (else last) job
        self._running: dict[int, Job] = {}  # slot -> the job it runs (or ran last: cancelling an ended job does nothing)
        self._arrived = 0
        self.stopping = False  # the server is stopping: what it cancels now was cut by the shutdown, not by its client
        self._thread = threading.Thread(target=self._serve, name="localspec-batch", daemon=True)
        self._thread.start()

    def attach(self, scheduler: BatchScheduler) -> None:
        """The pair is loaded: start serving (no job arrives before, since the routes answer 503 while loading)."""
        self._scheduler = scheduler
        self._ready.set()

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def processing(self) -> int:
        scheduler = self._scheduler
        return 0 if scheduler is None else len(scheduler.slots) - scheduler.n_free

    def slots(self, engine: Engine) -> list[SlotView]:
        scheduler = self._scheduler
        if scheduler is None:
            return []
        return [SlotView(slot.seq, self._tasks.get(slot.seq, 0), scheduler.share, slot.busy, len(slot.cached)) for slot in scheduler.slots]

    def submit(self, run: GenerationJob) -> Job:
        """Called on the event loop: queue the job, to take the first free slot after every earlier job has."""
        self._arrived += 1
        job = Job(run, asyncio.get_running_loop(), self._arrived)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """The server stops: every job, in a slot or queued, is cancelled; a slot's ends at the scheduler's next step
        (its handler hears Finished), a queued one when the thread reaches it."""
        self.stopping = True
        for job in [*self._running.values(), *list(self._jobs.queue)]:
            if job is not None:
                job.cancel.set()
        self._jobs.put(None)
        self._ready.set()

    def _serve(self) -> None:
        self._ready.wait()
        scheduler = self._scheduler
        while scheduler is not None:
            wait = not scheduler.busy  # idle: sleep until a job comes; busy: take what is there and step on
            while scheduler.n_free:
                try:
                    job = self._jobs.get(block=wait)
                except queue.Empty:
                    break
                wait = False
                if job is None:
                    self._stop_all(scheduler)
                    return
                self._admit(scheduler, job)
            try:
                scheduler.step()
            except Exception as exc:  # noqa: BLE001 (a bug must not stop the server: its requests hear it, the next ones run)
                scheduler.abort(exc)

    def _admit(self, scheduler: BatchScheduler, job: Job) -> None:
        if job.cancel.is_set():  # its client left while it waited
            job.put(END)
            return
        work = job.run
        try:
            prompt, thinking_open = work.prompt(work.engine.target)
            scheduler.check_fits(prompt)
            if len(scheduler.slots) > 1:
                refuse_unbatchable(work.drafter)
            drafter = work.engine.drafter(work.drafter)
        except Exception as exc:  # noqa: BLE001 (reported to the client; the server goes on)
            job.put(JobFailed(exc))
            job.put(END)
            return
        config = replace(work.config, max_tokens=0) if work.warm_only else work.config
        try:
            slot = scheduler.add(SlotRequest(prompt, config, drafter, _emitter(job, work), _failer(job), job.cancel))
        except Exception as exc:  # noqa: BLE001 (reported to the client; the server goes on)
            job.put(JobFailed(exc))
            job.put(END)
            return
        job.slot = slot.seq  # before Started: the handler reads it once the job has started
        self._tasks[slot.seq] = job.number
        self._running[slot.seq] = job
        job.put(Started(len(prompt), thinking_open))

    @staticmethod
    def _stop_all(scheduler: BatchScheduler) -> None:
        for slot in scheduler.slots:
            if slot.generation is not None:
                slot.generation.request.cancel.set()
        if scheduler.busy:
            scheduler.step()  # the cancelled slots end (their handlers hear Finished)


def _emitter(job: Job, work: GenerationJob) -> Callable[[TokenEvent | Finished], None]:
    deadline = Deadline(work.time_limit_ms, job.cancel)

    def emit(event: TokenEvent | Finished) -> None:
        if isinstance(event, Finished):
            work.on_finish(work.route, event, job.number, job.slot, deadline.expired)
            job.put(event)
            job.put(END)
            return
        job.put(event)
        deadline.check(event.text)

    return emit


def _failer(job: Job) -> Callable[[BaseException], None]:
    def fail(error: BaseException) -> None:
        job.put(JobFailed(error))
        job.put(END)

    return fail
