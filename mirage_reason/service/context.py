"""What every route of the service shares: the graph, the settings, the ask service, the bounded graph thread pool
and the whole-store reports, in one :class:`ServiceContext` that each router's factory closes over; and the map
from a ``MirageError`` to its HTTP status."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mirage_kg import (AmbiguousNameError, EndpointError, InputError, MirageError, QueryError, StoreError,
                       UnknownEntityError, UpdateRefusedError, check_read_only, resolve_name)

from mirage_reason.errors import BackendError, ReasonerError
from mirage_reason.service.asks import AskQueueFull
from mirage_reason.service.settings import ServiceSettings

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph, Resolution
    from mirage_reason.service.asks import AskService

__all__ = ["Reports", "RequestTimeout", "ServiceContext", "http_status"]

T = TypeVar("T")


class RequestTimeout(MirageError):
    """A request ran past the server's time limit."""


def http_status(exc: MirageError) -> int:
    """The HTTP status for a MirageError, most specific kind first."""
    for kind, status in ((UnknownEntityError, 404), (AmbiguousNameError, 409), (UpdateRefusedError, 403),
                         (AskQueueFull, 429), (RequestTimeout, 504), (EndpointError, 502), (StoreError, 503),
                         (BackendError, 502), (QueryError, 400), (InputError, 400), (ReasonerError, 500)):
        if isinstance(exc, kind):
            return status
    return 400


class Reports:
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


@dataclass
class ServiceContext:
    """One server's shared state. ``labels_ready`` and ``linker_warm`` are set by the start-up warm-up."""

    kg: KnowledgeGraph
    asks: AskService | None
    settings: ServiceSettings
    labels_ready: threading.Event = field(default_factory=threading.Event)
    linker_warm: threading.Event = field(default_factory=threading.Event)  # the label embeddings and model too
    reports: Reports = field(default_factory=Reports)
    limiter: anyio.CapacityLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(self.settings.kg_threads)

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """``fn(*args)`` on the graph thread pool, bounded in time (waiting for a thread counts)."""
        limit = timeout or self.settings.request_timeout
        try:
            with anyio.fail_after(limit):
                return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter, abandon_on_cancel=True)
        except TimeoutError:
            raise RequestTimeout(f"the request took longer than {limit:g} s; narrow it (smaller k, fewer "
                                 "hops or paths) or retry") from None

    def resolve(self, text: str, what: str = "entity") -> Resolution:
        """A CURIE, an IRI or a name, resolved as the CLI resolves it (``mirage_kg.resolve_name``)."""
        if not text.strip():
            raise InputError(f"{what} is empty; give a CURIE such as HP:0001166 (find one with /v1/search?q=...)")
        return resolve_name(self.kg, text)

    def need_asks(self) -> AskService:
        """The ask service; a 503 when the server was started without a model."""
        if self.asks is None:
            raise StarletteHTTPException(503, "this server was started without a model; asks are off")
        return self.asks

    def check_sparql(self, query: str) -> str:
        """The query's form (SELECT, ASK, ...); an update or a SERVICE call outside the allowed endpoints is refused
        here, before any store sees the query."""
        return check_read_only(query, self.settings.sparql_services)

    async def sparql_result(self, query: str, timeout: float | None) -> dict[str, Any]:
        """A read-only query's result, under the SPARQL time limit (a shorter ``timeout`` wins)."""
        self.check_sparql(query)
        limit = min(timeout or self.settings.sparql_timeout, self.settings.sparql_timeout)
        return await self.run(lambda: self.kg.store.query(query, timeout=limit), timeout=limit + 1)
