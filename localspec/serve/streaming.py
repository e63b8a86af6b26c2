"""Reading a job's events in a handler: the first one settles the HTTP status; a client that leaves cancels the job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request

from localspec.engine.events import Finished, TokenEvent
from localspec.serve.errors import ServerStopping
from localspec.serve.jobs import Started
from localspec.serve.payloads import error_body
from localspec.serve.worker import END, Job, JobFailed

DISCONNECT_POLL_S = 0.25


class JobError(Exception):
    """The job failed before it started generating: the handler answers with an HTTP error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def started(job: Job, request: Request, stopping: Callable[[], bool]) -> tuple[Started, AsyncIterator[TokenEvent | Finished]]:
    """Wait for the prompt to be built (the job may first wait in the queue); its generation events follow."""
    events = _watched(job, request)
    first = await anext(events, None)
    if isinstance(first, JobFailed):
        raise JobError(first.error)
    if not isinstance(first, Started):  # the client left while the job waited, or the server is stopping
        raise JobError(ServerStopping("The server is stopping: this request was not started. Send it again once the server is back.")
                       if stopping() else ConnectionAbortedError("the client disconnected"))
    return first, events


async def _watched(job: Job, request: Request) -> AsyncIterator[Any]:
    """The job's events until it ends. A client that disconnects, or a handler that stops reading (a stream the client
    closed), cancels the job: the decode loop stops within one step and the next queued request starts."""
    try:
        while True:
            try:
                item = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                continue
            if item is END:
                return
            yield item
    finally:
        job.cancel.set()  # a no-op once the job has ended


async def collected(events: AsyncIterator[TokenEvent | Finished]) -> tuple[str, Finished]:
    """A whole answer, for a response that is not streamed: its text and how it ended."""
    text, finished = "", None
    async for event in events:
        if isinstance(event, JobFailed):
            raise JobError(event.error)
        if isinstance(event, TokenEvent):
            text += event.text
        else:
            finished = event
    if finished is None:
        raise JobError(ConnectionAbortedError("the client disconnected"))
    return text, finished


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)}\n\n"


def sse_failure(failed: JobFailed) -> str:
    """A generation that failed after its stream began: the status is sent, so the error goes as the last event."""
    return sse(error_body(str(failed.error), "server_error", 500))
