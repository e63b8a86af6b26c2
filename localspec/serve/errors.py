"""Every failure as OpenAI's error shape with the status a client expects; the server itself never stops for one."""

from __future__ import annotations

import sys

from fastapi.responses import JSONResponse

from localspec.engine.errors import ChatTemplateError, PromptTooLongError
from localspec.engine.fim import FimUnsupportedError
from localspec.errors import LocalspecError, UsageError
from localspec.serve.payloads import error_body


class ServerNotReady(LocalspecError):
    """The pair is still loading (or failed to load)."""


class ServerStopping(ServerNotReady):
    """The server stopped before the request's turn came (a 503: nothing was started, so sending it again is safe)."""


def error_response(error: BaseException) -> JSONResponse:
    if isinstance(error, PromptTooLongError):
        return JSONResponse(error_body(str(error), "exceed_context_size_error", 400), status_code=400)
    if isinstance(error, UsageError | ChatTemplateError):
        return JSONResponse(error_body(str(error)), status_code=400)
    if isinstance(error, FimUnsupportedError):
        return JSONResponse(error_body(str(error), "not_supported_error", 501), status_code=501)
    if isinstance(error, ServerNotReady):
        return JSONResponse(error_body(str(error), "unavailable_error", 503), status_code=503)
    if isinstance(error, ConnectionAbortedError):
        return JSONResponse(error_body("The client disconnected before the answer began.", "client_closed", 499), status_code=499)
    if isinstance(error, LocalspecError):
        return JSONResponse(error_body(str(error), "server_error", 500), status_code=500)
    print(f"localspec serve: internal error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    return JSONResponse(error_body(f"Internal error ({type(error).__name__}: {error}). The server goes on; "
                                   "please report this with the request that caused it.", "server_error", 500), status_code=500)
