"""The OpenAI API: /v1/models, /v1/chat/completions and /v1/completions (with `suffix`: fill-in-the-middle)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localspec.engine.chat import render_messages, supports_tools
from localspec.engine.engine import Engine
from localspec.engine.events import Finished, TokenEvent
from localspec.engine.fim import fim_prompt
from localspec.engine.llama.model import Model
from localspec.errors import UsageError
from localspec.serve.answer import THINK_OPEN, AnswerShaper, Delta, ForcedCall, Shaper
from localspec.serve.errors import ServerNotReady
from localspec.serve.payloads import localspec_stats, new_id, now, timings, usage
from localspec.serve.requests import ChatRequest, CompletionRequest, answer_limit
from localspec.serve.state import ServerState
from localspec.serve.streaming import collected, sse, sse_failure, started
from localspec.serve.tool_calls import HERMES_CLOSE
from localspec.serve.worker import JobFailed
from localspec.session.structured_output import tool_request

router = APIRouter()


def server(request: Request) -> tuple[ServerState, Engine]:
    state: ServerState = request.app.state.localspec
    if state.engine is None:
        raise ServerNotReady(state.load_error or "The model is still loading; try again in a moment (GET /health says when).")
    return state, state.engine


@router.get("/v1/models")
@router.get("/models")
async def models(request: Request) -> dict[str, Any]:
    state, engine = server(request)
    meta = {"n_ctx": state.request_context, "n_vocab": engine.target.n_vocab, "target": str(engine.config.target),
            "draft": str(engine.config.draft) if engine.config.draft else None, "drafter": state.options.drafter}
    return {"object": "list", "data": [{"id": state.options.alias, "object": "model", "created": now(), "owned_by": "localspec", "meta": meta}]}


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatRequest, request: Request) -> Any:
    state, engine = server(request)
    asked = tool_request(body.tools, body.tool_choice, body.parallel_tool_calls,
                         body.response_format is not None or body.json_schema is not None or body.grammar is not None)
    tools, forced, parallel = asked.offered, asked.forced_schema, asked.parallel
    if forced is not None:  # the answer is the calls, held to their schema by the JSON-schema grammar
        body = body.model_copy(update={"json_schema": forced})
    elif tools and not parallel:  # one call at most: a Hermes-style answer ends as its first call closes
        body = body.model_copy(update={"stop": [*body.stop_strings, HERMES_CLOSE]})
    drafter, config = state.generation(body, answer_limit(max_completion_tokens=body.max_completion_tokens, max_tokens=body.max_tokens))
    messages = [message.as_template_dict() for message in body.messages]
    if tools and not supports_tools(engine.target):
        raise UsageError(f"The chat template of {engine.target.path.name} does not render tools, so this model cannot be "
                         "offered any: send the request without `tools`, or serve a model whose template supports them.")
    reasoning = THINK_OPEN in (engine.target.chat_template() or "")

    def build(model: Model) -> tuple[list[int], bool]:
        text = render_messages(model, messages, tools)
        return model.vocab.tokenize(text, add_special=False, parse_special=True), reasoning and text.rstrip().endswith(THINK_OPEN)

    config = replace(config, conversation=tuple(messages))  # a draft of another tokenizer renders them its own way
    job = state.worker.submit(state.generation_job("chat" + (", streamed" if body.stream else ""), drafter, build, config))
    start, events = await started(job, request, lambda: state.worker.stopping)
    names = frozenset(str((tool.get("function") or {}).get("name", "")) for tool in tools) if tools else None
    shaper: Shaper = ForcedCall() if forced is not None else AnswerShaper(reasoning, start.thinking_open, names, parallel)
    reply = _Reply(new_id("chatcmpl"), state.options.alias)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_chat_stream(state, reply, shaper, events, include_usage), media_type="text/event-stream")
    text, finished = await collected(events)
    whole, rest = shaper.feed(text), shaper.end()
    content, reasoning_text, calls = whole.content + rest.content, whole.reasoning + rest.reasoning, whole.calls + rest.calls
    message: dict[str, Any] = {"role": "assistant", "content": content if content.strip() or not calls else None}  # not the "\n" between calls
    if reasoning_text:
        message["reasoning_content"] = reasoning_text
    if calls:
        message["tool_calls"] = [call.to_dict() for call in calls]
    finish = "tool_calls" if calls else state.finish_reason(finished)
    return reply.body("chat.completion", [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                      finished, state) | {"usage": usage(finished.stats)}


class _Reply:
    def __init__(self, reply_id: str, model: str) -> None:
        self.id, self.model, self.created = reply_id, model, now()

    def body(self, kind: str, choices: list[dict[str, Any]], finished: Finished | None = None, state: ServerState | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
        if finished is not None and state is not None:
            out |= {"timings": timings(finished.stats), "localspec": localspec_stats(finished.stats, state.plain_ms_per_token)}
        return out


def _chat_delta(delta: Delta, calls_sent: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if delta.reasoning:
        out["reasoning_content"] = delta.reasoning
    if delta.content:
        out["content"] = delta.content
    if delta.calls:
        out["tool_calls"] = [call.to_dict(index=calls_sent + i) for i, call in enumerate(delta.calls)]
    return out


async def _chat_stream(state: ServerState, reply: _Reply, shaper: Shaper, events: AsyncIterator[Any],
                       include_usage: bool) -> AsyncIterator[str]:
    chunk = "chat.completion.chunk"
    yield sse(reply.body(chunk, [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]))
    calls_sent = 0
    async for event in events:
        if isinstance(event, JobFailed):
            yield sse_failure(event)
            return
        delta = shaper.end() if isinstance(event, Finished) else shaper.feed(event.text)
        payload = _chat_delta(delta, calls_sent)
        calls_sent += len(delta.calls)
        if payload:
            yield sse(reply.body(chunk, [{"index": 0, "delta": payload, "finish_reason": None}]))
        if isinstance(event, Finished):
            finish = "tool_calls" if calls_sent else state.finish_reason(event)
            yield sse(reply.body(chunk, [{"index": 0, "delta": {}, "finish_reason": finish}], event, state))
            if include_usage:
                yield sse(reply.body(chunk, []) | {"usage": usage(event.stats)})
            yield sse("[DONE]")


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Any:
    state, engine = server(request)
    n_predict = body.n_predict if body.n_predict is not None and body.n_predict >= 0 else None  # llama.cpp's: -1 is no limit
    drafter, config = state.generation(body, answer_limit(max_tokens=body.max_tokens) if body.max_tokens is not None else n_predict)
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise UsageError(f"`prompt` holds {len(prompt)} prompts; this server answers one per request.")
        prompt = prompt[0]
    if not prompt and body.suffix is None:  # said now, not after a wait in the queue
        raise UsageError("`prompt` is empty: send the text to complete.")
    echoed = ""
    if body.echo:
        echoed = prompt if isinstance(prompt, str) else engine.target.vocab.text([int(t) for t in prompt])

    def build(model: Model) -> tuple[list[int], bool]:
        if isinstance(prompt, list):
            return [int(t) for t in prompt], False
        if body.suffix is not None:  # llama.cpp's server refuses `suffix`; editors send it for autocomplete
            return fim_prompt(model, prompt, body.suffix, n_ctx=state.request_context), False
        return model.vocab.tokenize(prompt, add_special=True, parse_special=True), False  # clients send their own FIM templates

    job = state.worker.submit(state.generation_job("completion" + (", streamed" if body.stream else ""), drafter, build, config))
    _, events = await started(job, request, lambda: state.worker.stopping)
    reply = _Reply(new_id("cmpl"), state.options.alias)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_completion_stream(state, reply, events, include_usage, echoed), media_type="text/event-stream")
    text, finished = await collected(events)
    choice = {"index": 0, "text": echoed + text, "logprobs": None, "finish_reason": state.finish_reason(finished)}
    return JSONResponse(reply.body("text_completion", [choice], finished, state) | {"usage": usage(finished.stats)})


async def _completion_stream(state: ServerState, reply: _Reply, events: AsyncIterator[Any], include_usage: bool,
                             echoed: str) -> AsyncIterator[str]:
    if echoed:
        yield sse(reply.body("text_completion", [{"index": 0, "text": echoed, "logprobs": None, "finish_reason": None}]))
    async for event in events:
        if isinstance(event, JobFailed):
            yield sse_failure(event)
            return
        if isinstance(event, TokenEvent):
            if event.text:
                yield sse(reply.body("text_completion", [{"index": 0, "text": event.text, "logprobs": None, "finish_reason": None}]))
            continue
        choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": state.finish_reason(event)}
        yield sse(reply.body("text_completion", [choice], event, state))
        if include_usage:
            yield sse(reply.body("text_completion", []) | {"usage": usage(event.stats)})
        yield sse("[DONE]")
