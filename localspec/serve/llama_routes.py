"""llama.cpp's own routes, as llama.vim, llama.vscode and llama.cpp's web UI call them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from localspec import __version__
from localspec.engine.chat import render_messages
from localspec.engine.drafters import registry
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.fim import fim_prompt
from localspec.engine.llama.model import Model
from localspec.engine.stats import decisions_by_source
from localspec.errors import UsageError
from localspec.serve.jobs import Started
from localspec.serve.openai_routes import server
from localspec.serve.payloads import error_body, localspec_stats, timings
from localspec.serve.requests import ChatRequest, DetokenizeRequest, InfillRequest, NativeCompletionRequest, TokenizeRequest
from localspec.serve.state import ServerState
from localspec.serve.streaming import collected, sse, sse_failure, started
from localspec.serve.worker import Job, JobFailed, SlotView
from localspec.session.structured_output import offered_tools

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
async def health(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.localspec
    if state.engine is not None:
        return JSONResponse({"status": "ok"})
    if state.load_error:
        return JSONResponse(error_body(state.load_error, "server_error", 500), status_code=500)
    return JSONResponse(error_body("Loading model", "unavailable_error", 503), status_code=503)


@router.get("/props")
async def props(request: Request) -> dict[str, Any]:
    state, engine = server(request)
    return {
        "default_generation_settings": {"n_ctx": state.request_context, "model": state.options.alias,
                                        "params": state.standing_params()},
        "total_slots": state.options.parallel, "model_path": str(engine.config.target), "chat_template": engine.target.chat_template() or "",
        "build_info": f"localspec {__version__}", "modalities": {"vision": False, "audio": False},
        "localspec": {"draft_path": str(engine.config.draft) if engine.config.draft else None, "drafter": state.options.drafter,
                      "plain_per_second": 1000.0 / state.plain_ms_per_token if state.plain_ms_per_token else None,
                      "memory": engine.target.memory.value, "drafting_note": engine.drafting_note or None},
    }


@router.get("/slots")
async def slots(request: Request) -> list[dict[str, Any]]:
    """llama.cpp's shape, a row per slot, with the speculation each has done (its running request's, else its last's)."""
    state, engine = server(request)
    params = state.standing_params()
    return [{"id": view.id, "id_task": view.task, "n_ctx": view.n_ctx, "speculative": engine.draft is not None or registry.spec(state.options.drafter).drafts,
             "is_processing": view.busy, "params": params, "localspec": _slot_stats(state, view)}
            for view in state.worker.slots(engine)]


def _slot_stats(state: ServerState, view: SlotView) -> dict[str, Any]:
    stats = state.slot_totals.get(view.id)
    return {"drafter": stats.drafter if stats else state.options.drafter, "tokens_cached": view.tokens_cached,
            "draft_n": stats.draft_n if stats else 0, "draft_n_accepted": stats.draft_n_accepted if stats else 0,
            "acceptance_rate": stats.acceptance_rate if stats and stats.draft_n else None,
            "acceptance_by_position": stats.acceptance_by_position if stats else [],
            "acceptance_by_source": stats.acceptance_by_source if stats else {},
            "decisions_by_source": decisions_by_source(stats) if stats else {}}


@router.post("/apply-template")
async def apply_template(body: ChatRequest, request: Request) -> dict[str, Any]:
    """llama-server's: the prompt a chat request would become, rendered by the model's template and not generated from."""
    _, engine = server(request)
    tools = offered_tools(body.tools, body.tool_choice)
    return {"prompt": render_messages(engine.target, [message.as_template_dict() for message in body.messages], tools)}


@router.post("/v1/embeddings")
@router.post("/embeddings")
@router.post("/embedding")
async def embeddings() -> JSONResponse:
    """Not served, and said so with llama-server's status for it (501), not a 404 that reads as a wrong URL."""
    message = ("This server does not compute embeddings: localspec serves text generation with speculative decoding. "
               "Point the client's embeddings at a server started for them (llama-server --embeddings).")
    return JSONResponse(error_body(message, "not_supported_error", 501), status_code=501)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    _, engine = server(request)
    tokens = engine.target.vocab.tokenize(body.content, add_special=body.add_special, parse_special=True)
    if body.with_pieces:
        return {"tokens": [{"id": t, "piece": engine.target.vocab.token_bytes(t).decode("utf-8", errors="replace")} for t in tokens]}
    return {"tokens": tokens}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    _, engine = server(request)
    if any(not 0 <= t < engine.target.n_vocab for t in body.tokens):
        raise UsageError(f"`tokens` must be ids from 0 to {engine.target.n_vocab - 1}.")
    return {"content": engine.target.vocab.text(body.tokens)}


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    state: ServerState = request.app.state.localspec
    return PlainTextResponse(state.metrics.render(state.worker.processing, state.worker.waiting), media_type="text/plain; version=0.0.4")


@router.post("/completion")
@router.post("/completions")  # llama-server's native route too (/v1/completions is OpenAI's)
async def completion(body: NativeCompletionRequest, request: Request) -> Any:
    state, _ = server(request)
    prompt = body.prompt
    if not prompt:  # said now, not after a wait in the queue (it waited 50 s behind other requests)
        raise UsageError("`prompt` is empty: send the text to complete.")

    def build(model: Model) -> tuple[list[int], bool]:
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return [int(t) for t in prompt], False
        text = "".join(str(t) for t in prompt) if isinstance(prompt, list) else prompt
        return model.vocab.tokenize(text, add_special=True, parse_special=True), False

    return await _native(state, request, body, build, body.n_predict, "completion")


@router.post("/infill")
async def infill(body: InfillRequest, request: Request) -> Any:
    state, _ = server(request)
    extra = [(chunk.filename, chunk.text) for chunk in body.input_extra]

    def build(model: Model) -> tuple[list[int], bool]:
        return fim_prompt(model, body.input_prefix, body.input_suffix, extra, body.prompt, state.request_context), False

    return await _native(state, request, body, build, body.n_predict, "infill", body.t_max_predict_ms)


async def _native(state: ServerState, request: Request, body: NativeCompletionRequest | InfillRequest, build: Any,
                  n_predict: int, route: str, time_limit_ms: int = 0) -> Any:
    drafter, config = state.generation(body, n_predict if n_predict > 0 else None)
    label = route + (", streamed" if body.stream else "")
    job = state.worker.submit(state.generation_job(label, drafter, build, config, time_limit_ms, warm_only=n_predict == 0))
    start, events = await started(job, request, lambda: state.worker.stopping)
    if body.stream:
        return StreamingResponse(_native_stream(state, start, events, job, body.response_fields), media_type="text/event-stream")
    text, finished = await collected(events)
    return picked(_final(state, start, finished, text, job), body.response_fields)


def picked(answer: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """llama.cpp's response_fields: only the fields named, each under its path as a flat key ("timings/prompt_n": 12);
    a path that leads nowhere is left out. No fields named: the whole answer."""
    if not fields:
        return answer
    out = {}
    for path in fields:
        value: Any = answer
        for key in path.split("/"):
            value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
        if value is not _MISSING:
            out[path] = value
    return out


_MISSING = object()


def _final(state: ServerState, start: Started, finished: Finished, content: str, job: Job) -> dict[str, Any]:
    stats = finished.stats
    return {"index": 0, "content": content, "stop": True, "id_slot": job.slot, "id_task": job.number, "model": state.options.alias,
            "stop_type": state.stop_type(finished),
            "stopping_word": finished.stop_word, "tokens_predicted": stats.predicted_n, "tokens_evaluated": start.prompt_n,
            "tokens_cached": stats.prompt_n + stats.predicted_n,  # llama.cpp's: the tokens the slot holds, prompt and answer
            "truncated": False, "timings": timings(stats), "localspec": localspec_stats(stats, state.plain_ms_per_token)}


async def _native_stream(state: ServerState, start: Started, events: AsyncIterator[Any], job: Job,
                         fields: list[str]) -> AsyncIterator[str]:
    predicted = 0
    async for event in events:
        if isinstance(event, JobFailed):
            yield sse_failure(event)
            return
        if isinstance(event, TokenEvent):
            predicted += 1 if event.token >= 0 else 0
            if event.text:  # llama-server's partial result, key for key
                yield sse({"index": 0, "content": event.text, "tokens": [event.token] if event.token >= 0 else [], "stop": False,
                           "id_slot": job.slot, "tokens_predicted": predicted, "tokens_evaluated": start.prompt_n})
            continue
        yield sse(picked(_final(state, start, event, "", job), fields))
