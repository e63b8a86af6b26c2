"""The FastAPI application: the routes, the API key, and one error shape for every failure.

FastAPI and uvicorn are the stack llama-cpp-python's and vLLM's servers use: request
bodies validated from type hints, streaming responses, and a server that notices a
client going away (which cancels its generation). CORS is open to any origin, as
llama-server's is, so a web page on another origin can call it (with the key, where one is set).
"""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from localspec import __version__
from localspec.errors import LocalspecError
from localspec.serve import llama_routes, openai_routes
from localspec.serve.errors import error_response
from localspec.serve.payloads import error_body
from localspec.serve.state import ServerState
from localspec.serve.streaming import JobError

OPEN_PATHS = ("/health", "/v1/health")  # a load balancer or an editor may probe these without the key


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="localspec", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.localspec = state
    app.include_router(openai_routes.router)
    app.include_router(llama_routes.router)
    app.add_middleware(JsonBodies)
    if state.options.api_key:
        app.add_middleware(ApiKey, key=state.options.api_key)
    # Outermost (added last): a browser's preflight is answered before the key is asked for, since a preflight carries
    # none, and a refusal (401) still carries the CORS headers, so the page can read why. Any origin, as llama-server.
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])

    @app.exception_handler(JobError)
    async def job_failed(_request: Request, exc: JobError) -> JSONResponse:
        return error_response(exc.error)

    @app.exception_handler(LocalspecError)
    async def refused(_request: Request, exc: LocalspecError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(_validation_message(exc)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"No route {request.method} {request.url.path}." if exc.status_code in (404, 405) else str(exc.detail)
        return JSONResponse(error_body(message, "not_found_error" if exc.status_code == 404 else "invalid_request_error",
                                       exc.status_code), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    return app


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    if first.get("type") == "json_invalid":
        return f"The request body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})."
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    return f"Invalid request: {where}: {first.get('msg', 'invalid value')}."


class JsonBodies:
    """Every body is read as JSON, whatever its Content-Type says, as llama-server reads it: `curl -d` sends
    application/x-www-form-urlencoded, and such a request got a 400 (this server takes no forms)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = [(name, value) for name, value in scope["headers"] if name.lower() != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


class ApiKey:
    """Every route but /health needs `Authorization: Bearer KEY` (or llama.cpp's `X-Api-Key: KEY`).

    Plain ASGI, not BaseHTTPMiddleware: that one wraps responses in a way that hides a client's disconnect
    from a streaming handler, which must notice it to stop generating.
    """

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value for name, value in scope["headers"]}
        scheme, _, token = headers.get(b"authorization", b"").strip().partition(b" ")
        given = token.strip() if scheme.lower() == b"bearer" else headers.get(b"x-api-key", b"")  # RFC 7235: any case
        if hmac.compare_digest(given, self.key):
            await self.app(scope, receive, send)
            return
        refusal = JSONResponse(error_body("Invalid or missing API key: send 'Authorization: Bearer KEY'.", "authentication_error",
                                          "invalid_api_key"), status_code=401)
        await refusal(scope, receive, send)
