"""The ask endpoints: ``POST /v1/ask`` (the answer record as ``ask --json`` prints it, or server-sent events) and
``GET /v1/ask/stream`` (the events, for ``EventSource``). Asks go through :class:`AskService`'s queue; a stream
reports its place in line, each progress event as it happens, then ``done`` or ``error``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mirage_kg import MirageError

from mirage_reason.service.context import RequestTimeout, ServiceContext, http_status
from mirage_reason.service.guard import error_body
from mirage_reason.service.models import AskRequest, AskResponse, ErrorResponse

__all__ = ["ask_json", "ask_router", "ask_stream"]

log = logging.getLogger("mirage_kg.serve")


def ask_router(ctx: ServiceContext) -> APIRouter:
    """``POST /v1/ask`` and ``GET /v1/ask/stream``; without an ask service both answer 503."""
    router = APIRouter()

    @router.post("/v1/ask", summary="Answer a question with MIRAGE",
                 response_model=AskResponse, responses={
                     200: {"content": {"text/event-stream": {}},
                           "description": "the answer as JSON, or with stream=true server-sent events: queued, "
                                          "started, entities, sub_questions, search, chain_done, claims, answer, "
                                          "done (or error)"},
                     429: {"model": ErrorResponse, "description": "the ask queue is full; see Retry-After"},
                     503: {"model": ErrorResponse, "description": "no model"}})
    async def ask_post(request: Request, body: AskRequest) -> Any:
        if body.stream or "text/event-stream" in request.headers.get("accept", ""):
            return ask_stream(ctx, request, body.question, body.overrides())
        return await ask_json(ctx, body.question, body.overrides(), body.cache)

    @router.get("/v1/ask/stream", summary="Answer a question as server-sent events (for EventSource)",
                response_class=StreamingResponse, responses={429: {"model": ErrorResponse}})
    async def ask_get(request: Request, question: str = Query(..., min_length=1, max_length=4000),
                      n_q: int | None = Query(None, ge=1, le=8), n_r: int | None = Query(None, ge=0, le=10),
                      k: int | None = Query(None, ge=1, le=50), max_hops: int | None = Query(None, ge=1, le=4),
                      samples: int | None = Query(None, ge=1, le=4), seed: int | None = None) -> Any:
        overrides = AskRequest(question=question, n_q=n_q, n_r=n_r, k=k, max_hops=max_hops, samples=samples,
                               seed=seed).overrides()
        return ask_stream(ctx, request, question, overrides)

    return router


async def ask_json(ctx: ServiceContext, question: str, overrides: dict[str, Any], cache: bool = True
                   ) -> JSONResponse:
    """The answer record, from the answer cache when ``cache`` allows, else asked under the ask time limit."""
    service = ctx.need_asks()
    key = service.cache_key(question, overrides)
    if cache and (kept := service.answers.get(key)) is not None:
        return JSONResponse(kept)  # said in the record: "cache": {"served_from", "key"}
    future, _ = service.submit(question, overrides)
    try:
        answer = await asyncio.wait_for(asyncio.wrap_future(future), ctx.settings.ask_timeout)
    except TimeoutError:
        service.cancel(future)
        raise RequestTimeout(f"the answer took longer than {ctx.settings.ask_timeout:g} s") from None
    # the record exactly as `ask --json` prints it, key order included (AskResponse documents it)
    record = answer.to_json()
    service.answers.put(key, record)
    return JSONResponse(record)


def ask_stream(ctx: ServiceContext, request: Request, question: str, overrides: dict[str, Any]
               ) -> StreamingResponse:
    """The ask as server-sent events; a full queue raises here (429), before any stream starts."""
    service = ctx.need_asks()
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def sink(_: int, event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, event)

    future, place = service.submit(question, overrides, sink)
    return StreamingResponse(_sse(request, future, events, place, ctx.settings.ask_timeout,
                                  lambda: service.cancel(future)),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _event(kind: str, data: dict[str, Any]) -> str:
    body = json.dumps(data, ensure_ascii=False)
    return f"event: {kind}\ndata: {body}\n\n"


async def _sse(request: Request, future: Any, events: asyncio.Queue[dict[str, Any]], place: int,
               timeout: float, cancel: Callable[[], None]) -> AsyncIterator[str]:
    """The event stream of one ask: its place in line, each progress event as it happens, then done or error.
    A client that goes away (the stream closed or cancelled under us) cancels the ask: no new model request."""
    try:
        async for chunk in _sse_events(request, future, events, place, timeout):
            yield chunk
    finally:
        if not future.done():
            cancel()


async def _sse_events(request: Request, future: Any, events: asyncio.Queue[dict[str, Any]], place: int,
                      timeout: float) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    finished = asyncio.wrap_future(future)
    yield _event("queued", {"type": "queued", "place": place})
    while True:
        getter = asyncio.ensure_future(events.get())
        remaining = deadline - loop.time()
        done, _ = await asyncio.wait({getter, finished}, timeout=min(15.0, max(0.0, remaining)),
                                     return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            event = getter.result()
            yield _event(str(event.get("type", "progress")), event)
            if await request.is_disconnected():
                return  # the caller cancels the ask
            continue
        getter.cancel()
        if finished in done:
            while not events.empty():  # what the worker said just before it finished
                event = events.get_nowait()
                yield _event(str(event.get("type", "progress")), event)
            yield _ending(finished)
            return
        if await request.is_disconnected():
            return  # the caller cancels the ask
        if loop.time() >= deadline:
            yield _event("error", {"type": "error", **error_body(504, "RequestTimeout",
                                                                 f"no answer after {timeout:g} s")["error"]})
            return
        yield ": still working\n\n"  # a comment line keeps proxies from closing an idle stream


def _ending(finished: asyncio.Future[Any]) -> str:
    """The last event of a finished ask: ``done``, or ``error`` with the status its exception maps to (an
    unexpected one is logged and named only as a failure)."""
    exc = finished.exception() if not finished.cancelled() else None
    if exc is None and not finished.cancelled():
        return _event("done", {"type": "done"})
    status = http_status(exc) if isinstance(exc, MirageError) else 500
    message = str(exc) if isinstance(exc, MirageError) else "the ask failed; the server log has details"
    if exc is not None and not isinstance(exc, MirageError):
        log.error("ask failed", exc_info=exc)
    return _event("error", {"type": "error", **error_body(status, type(exc).__name__, message)["error"]})
