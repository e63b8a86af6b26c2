"""Starting the server: it listens at once (GET /health says 503 while the pair loads), then serves until Ctrl-C."""

from __future__ import annotations

import errno
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

from localspec.engine.engine import Engine, EngineConfig
from localspec.errors import LocalspecError, UsageError
from localspec.serve.app import create_app
from localspec.serve.batch_worker import BatchWorker
from localspec.serve.options import ServeOptions
from localspec.serve.state import ServerState
from localspec.session.chat import plain_baseline_ms


def run_server(config: EngineConfig, options: ServeOptions) -> int:
    """Serve `config`'s pair with `options`, already checked against the bind rule (check_bind)."""
    _check_port_free(options.host, options.port)
    state = ServerState(options, worker=BatchWorker())
    loader = threading.Thread(target=_load, args=(state, config), name="localspec-load", daemon=True)
    loader.start()
    url = f"http://{options.host}:{options.port}"
    print(f"localspec serve: {url}/v1 (OpenAI) and {url} (llama.cpp routes) · model {options.alias!r}"
          + (" · API key required" if options.api_key else ""), file=sys.stderr, flush=True)
    server = _Server(uvicorn.Config(create_app(state), host=options.host, port=options.port, log_level="warning", access_log=False),
                     on_exit=state.worker.stop)
    try:
        server.run()
    finally:
        state.worker.stop()
        loader.join(timeout=5)
        if state.engine is not None:
            state.engine.close()
    return 0


class _Server(uvicorn.Server):
    """uvicorn, stopped by the first Ctrl-C or SIGTERM although answers are streaming. uvicorn stops accepting and then
    waits for every response to end, and a stream with no max_tokens ran on for minutes; so the signal first stops the
    worker, which cancels every generation (each stream ends with its last event) and every queued request."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            print("localspec serve: stopping: the answers in flight end now", file=sys.stderr, flush=True)
            self._on_exit()
        super().handle_exit(sig, frame)


def _load(state: ServerState, config: EngineConfig) -> None:
    try:
        def say(stage: str) -> None:
            print(f"localspec serve: {stage}", file=sys.stderr, flush=True)

        engine = Engine(config, on_stage=say)
        state.plain_ms_per_token = plain_baseline_ms(engine, say)
        if state.options.parallel > 1:
            print(f"localspec serve: {state.options.parallel} slots: timing the target's batches", file=sys.stderr, flush=True)
        state.worker.attach(engine.batch(state.options.parallel) if state.options.parallel > 1 else engine.alone())
        state.engine = engine
        rate = f"{1000 / state.plain_ms_per_token:.1f} tok/s plain" if state.plain_ms_per_token else ""
        print(f"localspec serve: ready ({engine.target.description}; {rate})", file=sys.stderr, flush=True)
        if engine.drafting_note:
            print(f"localspec serve: note: {engine.drafting_note}", file=sys.stderr, flush=True)
    except LocalspecError as exc:
        state.load_error = f"The pair could not be loaded: {exc}"
        print(f"localspec serve: {state.load_error}", file=sys.stderr, flush=True)


def _check_port_free(host: str, port: int) -> None:
    """uvicorn would log a bind failure and exit; the user should read which port, and what to do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as exc:  # not an address at all
            raise UsageError(f"--host {host!r} is not an address this machine can listen on ({exc.strerror}). Give an IP "
                             "address such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface, with --api-key).") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"Cannot listen on {host}:{port} ({exc.strerror}): another server is using it. "
                                 "Pick another --port, or stop the other server.") from None
            if exc.errno == errno.EACCES:
                raise UsageError(f"Cannot listen on {host}:{port} ({exc.strerror}): ports below 1024 need administrator "
                                 "rights. Pick a --port of 1024 or more, such as 8080.") from None
            raise UsageError(f"Cannot listen on {host}:{port} ({exc.strerror}): --host must be an address of this machine "
                             "(127.0.0.1 for this machine only, 0.0.0.0 for every interface).") from None
