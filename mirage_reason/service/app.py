"""The FastAPI application: JSON endpoints under ``/v1/`` over one read-only knowledge graph and an ask queue, and
the web app's files at ``/``.

The routes come by area, each from a router factory over one :class:`ServiceContext`: the graph and concept pages
(:mod:`~mirage_reason.service.graph_routes`), SPARQL, reports and health (:mod:`~mirage_reason.service.store_routes`),
asks and their streams (:mod:`~mirage_reason.service.ask_routes`), OpenAI-style chat, the SPARQL 1.1 Protocol and
MCP. Graph work runs on a bounded thread pool under the request time limit (a request past it gets 504 while its
thread finishes in the background); asks go through :class:`AskService`. Every error is a JSON body
``{"error": {"status", "type", "message"}}``: a MirageError maps to a 4xx by kind, anything unexpected to a plain
500 with no traceback (the traceback goes to the server log)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from mirage_kg import MirageError

import mirage_reason
from mirage_reason.service.ask_routes import ask_router
from mirage_reason.service.asks import AskQueueFull, AskService
from mirage_reason.service.context import ServiceContext, http_status
from mirage_reason.service.graph_routes import concept_router, graph_router
from mirage_reason.service.guard import Guard, error_body
from mirage_reason.service.mcp_server import mcp_http_app
from mirage_reason.service.models import ErrorResponse
from mirage_reason.service.openai_chat import chat_router
from mirage_reason.service.settings import ServiceSettings
from mirage_reason.service.sparql_protocol import sparql_router
from mirage_reason.service.store_routes import store_router

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

__all__ = ["STATIC_DIR", "create_app"]

log = logging.getLogger("mirage_kg.serve")
STATIC_DIR = FsPath(__file__).resolve().parent / "static"
_ERRORS = {404: "not found", 400: "bad request", 401: "unauthorized", 405: "method not allowed"}
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in
    ((400, "bad input"), (401, "missing or wrong bearer token"), (404, "unknown entity"),
     (409, "ambiguous name"), (504, "the request ran past the time limit"))}


def create_app(kg: KnowledgeGraph, asks: AskService | None = None,
               settings: ServiceSettings | None = None) -> FastAPI:
    """The service over ``kg`` (opened read-only by the caller). Without ``asks`` the ask endpoints answer 503."""
    ctx = ServiceContext(kg, asks, settings or ServiceSettings())
    settings = ctx.settings

    def warm_labels() -> None:
        """The label index at start, not on the first keystroke (on a large KG that takes longer than a request
        may), then the label embeddings and the embedding model (``warm_linker``)."""
        from mirage_reason.service.warmup import warm_linker

        warm_linker(kg, ctx.labels_ready, ctx.linker_warm)

    mcp_http = mcp_http_app(kg, asks, settings)  # the MCP tools over streamable HTTP; None without the mcp extra

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=warm_labels, name="mirage-labels", daemon=True).start()
        async with mcp_http.router.lifespan_context(mcp_http) if mcp_http is not None else contextlib.nullcontext():
            yield
        if asks is not None:
            asks.close()

    app = FastAPI(lifespan=lifespan, title="MIRAGE-KG", version=mirage_reason.__version__, docs_url=None, redoc_url=None,
                  description="Knowledge-graph lookups (the same JSON as `mirage-kg ... --json`) and MIRAGE answers "
                              "with the graph paths they cite.", responses=_ERROR_RESPONSES)
    _add_error_handlers(app)
    for router in (concept_router(ctx), graph_router(ctx), store_router(ctx), ask_router(ctx)):
        app.include_router(router)
    _add_other_protocols(app, ctx, mcp_http)
    _add_web_app(app)

    app.add_middleware(Guard, settings=settings)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"error": {"status", "type", "message"}}``; a 5xx is logged, a traceback only to the log."""
    @app.exception_handler(MirageError)
    async def mirage_error(_: Request, exc: MirageError) -> JSONResponse:
        status = http_status(exc)
        if status >= 500:
            log.error("%s: %s", type(exc).__name__, exc)
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, AskQueueFull) else None
        body = error_body(status, type(exc).__name__, str(exc))
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return JSONResponse(error_body(422, "RequestValidationError", problems), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else _ERRORS.get(exc.status_code, "error")
        return JSONResponse(error_body(exc.status_code, "HTTPException", message), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body(500, "InternalError", "the server failed on this request; its log has the "
                                       "details"), status_code=500)


def _add_other_protocols(app: FastAPI, ctx: ServiceContext, mcp_http: Any) -> None:
    """Where other tools already are: OpenAI-style chat, the SPARQL 1.1 Protocol, and MCP at ``/mcp`` (501 without
    the mcp extra)."""
    app.include_router(chat_router(ctx.need_asks, ctx.settings.ask_timeout))
    app.include_router(sparql_router(ctx.sparql_result, ctx.check_sparql))
    if mcp_http is not None:
        app.router.routes.extend(mcp_http.routes)  # POST/GET/DELETE /mcp
    else:
        @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
        async def no_mcp() -> JSONResponse:
            return JSONResponse(error_body(501, "MissingExtra", "MCP needs the mcp package: pip install "
                                           "'mirage-kg[mcp]'"), status_code=501)


def _add_web_app(app: FastAPI) -> None:
    """The web app: its page at ``/`` and its files under ``/static``."""
    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
