"""An OpenAI-compatible chat API on ``serve``: ``POST /v1/chat/completions`` and ``GET /v1/models``, so a chat front
end (Open WebUI, LibreChat) or any ``openai`` SDK program can ask MIRAGE.

The last ``user`` message is the question (MIRAGE answers one question at a time; earlier turns are not read). The
assistant message is the answer, then how grounded it is and the knowledge-graph paths its claims cite, as plain
text a person reads in any chat window. The whole answer record (``Answer.to_json()``: claims with their cited
paths, support, flags, sub-questions, chains, timings) rides along in the extension field ``mirage`` of the
completion (of the last chunk when streaming), which the ``openai`` client keeps (``completion.mirage`` or
``completion.model_extra["mirage"]``). With ``stream: true`` the reasoning steps (sub-questions, searches) stream
as ``delta.reasoning_content`` while the answer is made, then the answer text, then a chunk with
``finish_reason: "stop"``. ``seed`` is honoured; sampling settings (``temperature``, ``max_tokens``, ...) are the
server's and are ignored. Asks go through the same queue, token and limits as ``/v1/ask``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from mirage_kg import InputError, MirageError, UnknownEntityError

from mirage_reason.service.remote import grounding

if TYPE_CHECKING:
    from mirage_reason.service.asks import AskService

__all__ = ["MODEL", "ChatRequest", "chat_router", "grounding", "render_text"]

MODEL = "mirage"
_CREATED = int(time.time())


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The fields of OpenAI's chat request that MIRAGE reads; the rest are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(MODEL, max_length=200)
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=200)
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="one answer per request")
    seed: int | None = None


def _text(message: ChatMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    parts = message.content or []
    return "\n".join(str(p.get("text", "")) for p in parts if p.get("type") in ("text", "input_text"))


def question_of(body: ChatRequest) -> str:
    """The last user message's text; a clear 400 when there is none."""
    for message in reversed(body.messages):
        if message.role == "user":
            text = _text(message).strip()
            if not text:
                raise InputError("the last user message has no text; MIRAGE answers a question in words")
            if len(text) > 4000:
                raise InputError(f"the question is {len(text)} characters; the limit is 4000")
            return text
    raise InputError("no message with role 'user': the last user message is the question")


def render_text(record: Mapping[str, Any]) -> str:
    """What a person reads in a chat window: the answer, how grounded it is, and the paths its claims cite."""
    lines = [str(record.get("answer", "")).strip()]
    lines += ["", grounding(record)]
    cited = [(i, c) for i, c in enumerate(record.get("claims") or [], start=1) if c.get("citations")]
    if cited:
        lines += ["", "Knowledge-graph paths cited:"]
        for i, claim in cited:
            for path in claim["citations"]:
                held = f" [{', '.join(path['sources'])}]" if path.get("sources") else ""
                lines.append(f"[{i}] {path.get('text', '')}{held}")
    for flag in record.get("flags") or []:
        lines.append(f"Note: {flag.get('message', flag.get('code')) if isinstance(flag, Mapping) else flag}")
    lines += ["", "Not medical advice."]
    return "\n".join(lines)


def _usage(record: Mapping[str, Any]) -> dict[str, int]:
    tokens = record.get("tokens") or {}
    prompt, completion = int(tokens.get("prompt", 0)), int(tokens.get("total", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(cid: str, model: str, record: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": render_text(record)},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": _usage(record), "mirage": dict(record)}


def _chunk(cid: str, model: str, delta: dict[str, Any], finish: Literal["stop"] | None = None,
           **extra: Any) -> str:
    data = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _reasoning(event: Mapping[str, Any]) -> str | None:
    """One progress event as a line of reasoning a chat window may show (None for events it need not)."""
    kind = event.get("type")
    if kind == "entities":
        names = ", ".join(str(e.get("label") or e.get("id")) for e in event.get("entities") or [])
        return f"Concepts found in the question: {names or 'none'}\n"
    if kind == "sub_questions":
        return "".join(f"Sub-question: {q}\n" for q in event.get("sub_questions") or [])
    if kind == "search_issued":
        return f"Searching the knowledge graph: {str(event.get('query', '')).strip()}\n"
    if kind == "claims":
        return f"{len(event.get('claims') or [])} claim(s) checked against the graph\n"
    return None


def chat_router(need_asks: Callable[[], AskService], ask_timeout: float) -> APIRouter:
    """The routes; ``need_asks()`` gives the ask service (or raises the 503 of a server without a model)."""
    router = APIRouter()

    def check_model(model: str) -> None:
        if model != MODEL:
            raise UnknownEntityError(f"no model {model!r} here; this server answers as {MODEL!r} (GET /v1/models)")

    @router.get("/v1/models", summary="The models this OpenAI-compatible API answers as")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model()]}

    @router.get("/v1/models/{model}", summary="One model of the OpenAI-compatible API")
    async def model(model: str) -> dict[str, Any]:
        check_model(model)
        return _model()

    @router.post("/v1/chat/completions", summary="OpenAI-compatible chat: the last user message, answered by MIRAGE",
                 responses={200: {"content": {"text/event-stream": {}}, "description":
                                  "a chat.completion (its `mirage` field: the whole answer record), or with "
                                  "stream=true chat.completion.chunk events ending in data: [DONE]"}})
    async def chat(request: Request, body: ChatRequest) -> Any:
        check_model(body.model)
        question = question_of(body)
        overrides = {"seed": body.seed} if body.seed is not None else {}
        service = need_asks()
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        if not body.stream:
            future, _ = service.submit(question, overrides)
            try:
                answer = await asyncio.wait_for(asyncio.wrap_future(future), ask_timeout)
            except TimeoutError:
                future.cancel()
                raise StarletteHTTPException(504, f"the answer took longer than {ask_timeout:g} s") from None
            return _completion(cid, body.model, answer.to_json())
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def sink(_: int, event: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        future, _ = service.submit(question, overrides, sink)  # a full queue raises here: 429, not a stream
        return StreamingResponse(_stream(request, future, events, cid, body.model, ask_timeout),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return router


def _model() -> dict[str, Any]:
    return {"id": MODEL, "object": "model", "created": _CREATED, "owned_by": "mirage-kg"}


async def _stream(request: Request, future: Any, events: asyncio.Queue[dict[str, Any]], cid: str, model: str,
                  timeout: float) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    finished = asyncio.wrap_future(future)
    yield _chunk(cid, model, {"role": "assistant", "content": ""})
    while True:
        getter = asyncio.ensure_future(events.get())
        done, _ = await asyncio.wait({getter, finished}, timeout=min(15.0, max(0.0, deadline - loop.time())),
                                     return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            line = _reasoning(getter.result())
            if line:
                yield _chunk(cid, model, {"reasoning_content": line})
            continue
        getter.cancel()
        if finished in done:
            exc = None if finished.cancelled() else finished.exception()
            if finished.cancelled() or exc is not None:
                message = str(exc) if isinstance(exc, MirageError) else "the ask failed; the server log has details"
                yield f"data: {json.dumps({'error': {'type': type(exc).__name__, 'message': message}})}\n\n"
                return
            record = finished.result().to_json()
            text = render_text(record)
            for start in range(0, len(text), 400):  # a few content deltas, as a chat window expects
                yield _chunk(cid, model, {"content": text[start:start + 400]})
            yield _chunk(cid, model, {}, "stop", usage=_usage(record), mirage=record)
            yield "data: [DONE]\n\n"
            return
        if await request.is_disconnected():
            future.cancel()
            return
        if loop.time() >= deadline:
            yield f"data: {json.dumps({'error': {'type': 'RequestTimeout', 'message': f'no answer after {timeout:g} s'}})}\n\n"
            return
        yield ": still working\n\n"
