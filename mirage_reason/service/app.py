"""The FastAPI application: JSON endpoints under ``/v1/`` over one read-only knowledge graph and an ask queue, and
the web app's files at ``/``.

Graph work runs on a bounded thread pool under the request time limit (a request past it gets 504 while its thread
finishes in the background); asks go through :class:`AskService`. Every error is a JSON body
``{"error": {"status", "type", "message"}}``: a MirageError maps to a 4xx by kind, anything unexpected to a plain
500 with no traceback (the traceback goes to the server log)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from mirage_kg import (AmbiguousNameError, EndpointError, InputError, MirageError, QueryError, StoreError,
                       UnknownEntityError, UpdateRefusedError, anchor_json, bridge_json, check_read_only, compress,
                       compute_stats, differential_diagnosis, expand, link_json, resolve_name, sparql_json, validate)

import mirage_reason
from mirage_reason.errors import BackendError, ReasonerError
from mirage_reason.service.asks import AskQueueFull, AskService
from mirage_reason.service.guard import Guard, error_body
from mirage_reason.service.models import (AnchorResponse, AskRequest, AskResponse, BridgeResponse,
                                          ConceptFactsResponse, ConceptPage, ConceptResponse,
                                          DifferentialResponse, EntityResponse,
                                          ErrorResponse, LabelsResponse, LinkResponse, RetrieveResponse,
                                          SearchResponse, SparqlRequest, SparqlResponse)
from mirage_reason.service.settings import ServiceSettings

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph, Resolution

__all__ = ["STATIC_DIR", "create_app"]

log = logging.getLogger("mirage_kg.serve")
STATIC_DIR = FsPath(__file__).resolve().parent / "static"
T = TypeVar("T")
_ERRORS = {404: "not found", 400: "bad request", 401: "unauthorized", 405: "method not allowed"}


class RequestTimeout(MirageError):
    """A request ran past the server's time limit."""


def _status(exc: MirageError) -> int:
    """The HTTP status for a MirageError, most specific kind first."""
    for kind, status in ((UnknownEntityError, 404), (AmbiguousNameError, 409), (UpdateRefusedError, 403),
                         (AskQueueFull, 429), (RequestTimeout, 504), (EndpointError, 502), (StoreError, 503),
                         (BackendError, 502), (QueryError, 400), (InputError, 400), (ReasonerError, 500)):
        if isinstance(exc, kind):
            return status
    return 400


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in
    ((400, "bad input"), (401, "missing or wrong bearer token"), (404, "unknown entity"),
     (409, "ambiguous name"), (504, "the request ran past the time limit"))}


def create_app(kg: KnowledgeGraph, asks: AskService | None = None,
               settings: ServiceSettings | None = None) -> FastAPI:
    """The service over ``kg`` (opened read-only by the caller). Without ``asks`` the ask endpoints answer 503."""
    settings = settings or ServiceSettings()
    labels_ready = threading.Event()
    linker_warm = threading.Event()  # the label embeddings and the embedding model loaded too (or off)

    def warm_labels() -> None:
        """The label index at start, not on the first keystroke (on a large KG that takes longer than a request
        may), then the label embeddings and the embedding model (``warm_linker``)."""
        from mirage_reason.service.warmup import warm_linker

        warm_linker(kg, labels_ready, linker_warm)

    mcp_http = _mcp_http(kg, asks, settings)  # the MCP tools over streamable HTTP; None without the mcp extra

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
    limiter = anyio.CapacityLimiter(settings.kg_threads)
    reports = _Reports()

    async def run(fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """``fn(*args)`` on the graph thread pool, bounded in time (waiting for a thread counts)."""
        limit = timeout or settings.request_timeout
        try:
            with anyio.fail_after(limit):
                return await anyio.to_thread.run_sync(fn, *args, limiter=limiter, abandon_on_cancel=True)
        except TimeoutError:
            raise RequestTimeout(f"the request took longer than {limit:g} s; narrow it (smaller k, fewer "
                                 "hops or paths) or retry") from None

    def resolve(text: str, what: str = "entity") -> Resolution:
        """A CURIE, an IRI or a name, resolved as the CLI resolves it (``mirage_kg.resolve_name``)."""
        if not text.strip():
            raise InputError(f"{what} is empty; give a CURIE such as HP:0001166 (find one with /v1/search?q=...)")
        return resolve_name(kg, text)

    # -- errors --------------------------------------------------------------------------------------------------
    @app.exception_handler(MirageError)
    async def mirage_error(_: Request, exc: MirageError) -> JSONResponse:
        status = _status(exc)
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

    # -- the graph -----------------------------------------------------------------------------------------------
    @app.get("/v1/entity", response_model=EntityResponse, summary="One entity by CURIE or IRI")
    async def entity(id: str = Query(..., max_length=2000, description="CURIE, IRI or exact name")) -> Any:
        def work() -> dict[str, Any]:
            found = resolve(id, "id").entity
            return {"entity": found.to_json(), "iri": found.iri, "degree": kg.degrees([found.iri])[found.iri]}

        return await run(work)

    @app.get("/v1/concept", response_model=ConceptResponse, summary="What a concept's page shows")
    async def concept(id: str = Query(..., max_length=2000, description="CURIE, IRI or exact name"),
                      limit: int = Query(20, ge=1, le=500, description="children and annotations in the first page")
                      ) -> Any:
        return await run(lambda: kg.concept(resolve(id, "id").entity, limit).to_json())

    @app.get("/v1/concept/facts", response_model=ConceptFactsResponse, summary="A page of a concept's facts")
    async def concept_facts(id: str = Query(..., max_length=2000), relation: str | None = Query(None, max_length=500),
                            direction: str = Query("both", pattern="^(forward|backward|both|out|in)$"),
                            offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_facts(resolve(id, "id").entity, relation, direction, offset,
                                                  limit).to_json())

    @app.get("/v1/concept/children", response_model=ConceptPage, summary="A page of a concept's subclasses")
    async def concept_children(id: str = Query(..., max_length=2000), offset: int = Query(0, ge=0),
                               limit: int = Query(20, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_children(resolve(id, "id").entity, offset, limit).to_json())

    @app.get("/v1/concept/annotations", response_model=ConceptPage,
             summary="A page of the annotations on a concept's edges (frequency, evidence, references)")
    async def concept_annotations(id: str = Query(..., max_length=2000), offset: int = Query(0, ge=0),
                                  limit: int = Query(20, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_annotations(resolve(id, "id").entity, offset, limit).to_json())

    @app.get("/v1/search", response_model=SearchResponse, summary="Label search for autocomplete")
    async def search(q: str = Query(..., min_length=1, max_length=200),
                     limit: int = Query(10, ge=1, le=50)) -> Any:
        matches = await run(kg.linker.complete, q, limit)
        return {"query": q, "matches": [m.to_json() for m in matches]}

    @app.get("/v1/labels", response_model=LabelsResponse, summary="Labels of entities and relations by id")
    async def labels(id: list[str] = Query(default=[]), relation: list[str] = Query(default=[])) -> Any:
        if len(id) + len(relation) > settings.max_labels:
            raise InputError(f"at most {settings.max_labels} ids per request")

        def work() -> dict[str, Any]:
            names = kg.labels([expand(i) for i in id])
            rels = kg.relations([expand(r) for r in relation])
            return {"entities": {compress(k): v for k, v in names.items()},
                    "relations": {compress(k): {"label": r.label, "inverse_label": r.inverse_label}
                                  for k, r in rels.items()}}

        return await run(work)

    @app.get("/v1/anchor", response_model=AnchorResponse, summary="An entity's typed neighbourhood")
    async def anchor(entity: str = Query(..., max_length=2000, description="CURIE, IRI or exact name"),
                     k: int = Query(10, ge=1, le=settings.max_k, description="neighbours per relation and direction"),
                     relation: list[str] = Query(default=[], description="only these relations (repeatable)"),
                     direction: str = Query("both", pattern="^(forward|backward|both|out|in)$"),
                     rank_by: str | None = Query(None, max_length=500)) -> Any:
        def work() -> dict[str, Any]:
            resolved = resolve(entity)
            center = resolved.entity
            steps = kg.anchor(center, k=k, relations=relation or None, direction=direction, rank_by=rank_by)
            return {**anchor_json(center, steps), "resolved": resolved.to_json()}

        return await run(work)

    @app.get("/v1/bridge", response_model=BridgeResponse, summary="Every path of at most max_hops edges")
    async def bridge(source: str = Query(..., max_length=2000), target: str = Query(..., max_length=2000),
                     max_hops: int = Query(3, ge=1, le=settings.max_hops),
                     max_paths: int = Query(20, ge=1, le=settings.max_paths),
                     relation: list[str] = Query(default=[])) -> Any:
        def work() -> dict[str, Any]:
            from_a, from_b = resolve(source, "source"), resolve(target, "target")
            a, b = from_a.entity, from_b.entity
            paths = kg.bridge(a, b, max_hops=max_hops, max_paths=max_paths, relations=relation or None)
            hubs = [(kg.entity(iri), edges) for iri, edges in paths.capped]
            return {**bridge_json(a, b, paths, hubs), "resolved": [from_a.to_json(), from_b.to_json()]}

        return await run(work)

    @app.get("/v1/link", response_model=LinkResponse, summary="Mentions of KG entities in a text, ranked")
    async def link(text: str = Query(..., min_length=1, max_length=2000), top: int = Query(5, ge=1, le=20),
                   whole: bool = Query(False, description="take the text as one mention")) -> Any:
        def work() -> dict[str, Any]:
            if whole:
                from mirage_kg import Mention

                candidates = kg.linker.link_one(text, top=top)
                return link_json([Mention(text, 0, len(text), tuple(candidates))] if candidates else [])
            return link_json(kg.link(text, top=top))

        return await run(work)

    @app.get("/v1/retrieve", response_model=RetrieveResponse, summary="LLM-free evidence for a question")
    async def retrieve(question: str = Query(..., min_length=1, max_length=4000),
                       budget: int = Query(100, ge=1, le=500)) -> Any:
        return (await run(kg.retrieve, question, budget)).to_json()

    @app.get("/v1/differential", response_model=DifferentialResponse,
             summary="Conditions ranked by how much of the findings each explains (no model)")
    async def differential(findings: str = Query(..., min_length=1, max_length=4000),
                           top: int = Query(10, ge=1, le=50)) -> Any:
        return (await run(lambda: differential_diagnosis(kg, findings, top=top))).to_json()

    async def sparql_result(query: str, timeout: float | None) -> dict[str, Any]:
        check_read_only(query, settings.sparql_services)  # refused here (updates, SERVICE), before any store
        limit = min(timeout or settings.sparql_timeout, settings.sparql_timeout)
        return await run(lambda: kg.store.query(query, timeout=limit), timeout=limit + 1)

    async def sparql_run(query: str, timeout: float | None) -> dict[str, Any]:
        return sparql_json(await sparql_result(query, timeout))

    @app.post("/v1/sparql", response_model=SparqlResponse, response_model_exclude_unset=True,
              summary="A read-only SPARQL query (updates get 403)", responses={403: {"model": ErrorResponse}})
    async def sparql_post(body: SparqlRequest) -> Any:
        return await sparql_run(body.query, body.timeout)

    @app.get("/v1/sparql", response_model=SparqlResponse, response_model_exclude_unset=True,
             summary="A read-only SPARQL query in the query string", responses={403: {"model": ErrorResponse}})
    async def sparql_get(query: str = Query(..., min_length=1), timeout: float | None = Query(None, gt=0)) -> Any:
        return await sparql_run(query, timeout)

    @app.get("/v1/stats", summary="Counts of triples, facts, entities, relations and graphs",
             responses={202: {"description": "still being computed; retry after Retry-After seconds"}})
    async def stats() -> Any:
        return await reports.get("stats", lambda: compute_stats(kg.store).to_json(), settings.request_timeout)

    @app.get("/v1/validation", summary="The validation report (as `mirage-kg validate --json`)",
             responses={202: {"description": "still being computed; retry after Retry-After seconds"}})
    async def validation() -> Any:
        return await reports.get("validation", lambda: validate(kg.store).to_json(), settings.request_timeout)

    # -- asks ----------------------------------------------------------------------------------------------------
    def need_asks() -> AskService:
        if asks is None:
            raise StarletteHTTPException(503, "this server was started without a model; asks are off")
        return asks

    async def ask_json(question: str, overrides: dict[str, Any], cache: bool = True) -> JSONResponse:
        service = need_asks()
        key = service.cache_key(question, overrides)
        if cache and (kept := service.answers.get(key)) is not None:
            return JSONResponse(kept)  # said in the record: "cache": {"served_from", "key"}
        future, _ = service.submit(question, overrides)
        try:
            answer = await asyncio.wait_for(asyncio.wrap_future(future), settings.ask_timeout)
        except TimeoutError:
            service.cancel(future)
            raise RequestTimeout(f"the answer took longer than {settings.ask_timeout:g} s") from None
        # the record exactly as `ask --json` prints it, key order included (AskResponse documents it)
        record = answer.to_json()
        service.answers.put(key, record)
        return JSONResponse(record)

    def ask_stream(request: Request, question: str, overrides: dict[str, Any]) -> StreamingResponse:
        service = need_asks()
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def sink(_: int, event: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        future, place = service.submit(question, overrides, sink)  # a full queue raises here: 429, not a stream
        return StreamingResponse(_sse(request, future, events, place, settings.ask_timeout,
                                      lambda: service.cancel(future)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/ask", summary="Answer a question with MIRAGE",
              response_model=AskResponse, responses={
                  200: {"content": {"text/event-stream": {}},
                        "description": "the answer as JSON, or with stream=true server-sent events: queued, "
                                       "started, entities, sub_questions, search, chain_done, claims, answer, done "
                                       "(or error)"},
                  429: {"model": ErrorResponse, "description": "the ask queue is full; see Retry-After"},
                  503: {"model": ErrorResponse, "description": "no model"}})
    async def ask_post(request: Request, body: AskRequest) -> Any:
        if body.stream or "text/event-stream" in request.headers.get("accept", ""):
            return ask_stream(request, body.question, body.overrides())
        return await ask_json(body.question, body.overrides(), body.cache)

    @app.get("/v1/ask/stream", summary="Answer a question as server-sent events (for EventSource)",
             response_class=StreamingResponse, responses={429: {"model": ErrorResponse}})
    async def ask_get(request: Request, question: str = Query(..., min_length=1, max_length=4000),
                      n_q: int | None = Query(None, ge=1, le=8), n_r: int | None = Query(None, ge=0, le=10),
                      k: int | None = Query(None, ge=1, le=50), max_hops: int | None = Query(None, ge=1, le=4),
                      samples: int | None = Query(None, ge=1, le=4), seed: int | None = None) -> Any:
        overrides = AskRequest(question=question, n_q=n_q, n_r=n_r, k=k, max_hops=max_hops, samples=samples,
                               seed=seed).overrides()
        return ask_stream(request, question, overrides)

    @app.get("/v1/health", summary="Liveness, the store, and the ask queue")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "store": kg.store.location, "labels_ready": labels_ready.is_set(),
                "linker_warm": linker_warm.is_set(),
                "asks": asks is not None,
                "asks_waiting": asks.waiting if asks is not None else 0}

    # -- where other tools already are: OpenAI-style chat, the SPARQL 1.1 Protocol, MCP -------------------------
    from mirage_reason.service.openai_chat import chat_router
    from mirage_reason.service.sparql_protocol import sparql_router

    app.include_router(chat_router(need_asks, settings.ask_timeout))
    app.include_router(sparql_router(sparql_result, lambda q: check_read_only(q, settings.sparql_services)))
    if mcp_http is not None:
        app.router.routes.extend(mcp_http.routes)  # POST/GET/DELETE /mcp
    else:
        @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
        async def no_mcp() -> JSONResponse:
            return JSONResponse(error_body(501, "MissingExtra", "MCP needs the mcp package: pip install "
                                           "'mirage-kg[mcp]'"), status_code=501)

    # -- the web app ---------------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    app.add_middleware(Guard, settings=settings)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


def _mcp_http(kg: KnowledgeGraph, asks: AskService | None, settings: ServiceSettings) -> Any:
    """The MCP server's streamable-HTTP app (its route is served at ``/mcp``), or None when ``mcp`` is not
    installed. Its DNS-rebinding check (Host and Origin must be loopback) is on when serving on loopback."""
    try:
        from mcp.server.transport_security import TransportSecuritySettings
    except ImportError:
        return None
    from mirage_reason.service.mcp_server import build_mcp

    server = build_mcp(kg, asks, request_timeout=settings.request_timeout, sparql_timeout=settings.sparql_timeout,
                       ask_timeout=settings.ask_timeout, max_k=settings.max_k, max_hops=settings.max_hops,
                       max_paths=settings.max_paths, sparql_services=settings.sparql_services)
    loopback = settings.host in ("127.0.0.1", "localhost", "::1")
    security = None if loopback else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(streamable_http_path="/mcp", host=settings.host, transport_security=security)


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
            exc = finished.exception() if not finished.cancelled() else None
            if exc is None and not finished.cancelled():
                yield _event("done", {"type": "done"})
            else:
                status = _status(exc) if isinstance(exc, MirageError) else 500
                message = str(exc) if isinstance(exc, MirageError) else "the ask failed; the server log has details"
                if exc is not None and not isinstance(exc, MirageError):
                    log.error("ask failed", exc_info=exc)
                yield _event("error", {"type": "error", **error_body(status, type(exc).__name__, message)["error"]})
            return
        if await request.is_disconnected():
            return  # the caller cancels the ask
        if loop.time() >= deadline:
            yield _event("error", {"type": "error", **error_body(504, "RequestTimeout",
                                                                 f"no answer after {timeout:g} s")["error"]})
            return
        yield ": still working\n\n"  # a comment line keeps proxies from closing an idle stream


class _Reports:
    """Whole-store reports (stats, validation) computed once in the background: the store is read-only, so they
    cannot go stale. A request waits up to the time limit, then gets 202 and Retry-After while the work goes on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, asyncio.Future[Any]] = {}

    async def get(self, name: str, compute: Callable[[], Any], limit: float) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            job = self._jobs.get(name)
            if job is None or (job.done() and job.exception() is not None):
                job = self._jobs[name] = loop.run_in_executor(None, compute)
        try:
            return await asyncio.wait_for(asyncio.shield(job), max(0.1, limit - 1.0))
        except TimeoutError:
            return JSONResponse({"status": "running", "report": name}, status_code=202,
                                headers={"Retry-After": "5"})

