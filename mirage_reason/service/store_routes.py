"""The store endpoints under ``/v1/``: read-only SPARQL as JSON (the SPARQL 1.1 Protocol itself is
:mod:`mirage_reason.service.sparql_protocol`), the whole-store reports (stats, validation) and the health check."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from mirage_kg import compute_stats, sparql_json, validate

from mirage_reason.service.context import ServiceContext
from mirage_reason.service.models import ErrorResponse, SparqlRequest, SparqlResponse

__all__ = ["store_router"]

_STILL_RUNNING: dict[int | str, dict[str, Any]] = {
    202: {"description": "still being computed; retry after Retry-After seconds"}}


def store_router(ctx: ServiceContext) -> APIRouter:
    """``/v1/sparql`` (GET and POST), ``/v1/stats``, ``/v1/validation`` and ``/v1/health``."""
    router = APIRouter()
    kg, settings = ctx.kg, ctx.settings

    async def sparql_run(query: str, timeout: float | None) -> dict[str, Any]:
        return sparql_json(await ctx.sparql_result(query, timeout))

    @router.post("/v1/sparql", response_model=SparqlResponse, response_model_exclude_unset=True,
                 summary="A read-only SPARQL query (updates get 403)", responses={403: {"model": ErrorResponse}})
    async def sparql_post(body: SparqlRequest) -> Any:
        return await sparql_run(body.query, body.timeout)

    @router.get("/v1/sparql", response_model=SparqlResponse, response_model_exclude_unset=True,
                summary="A read-only SPARQL query in the query string", responses={403: {"model": ErrorResponse}})
    async def sparql_get(query: str = Query(..., min_length=1), timeout: float | None = Query(None, gt=0)) -> Any:
        return await sparql_run(query, timeout)

    @router.get("/v1/stats", summary="Counts of triples, facts, entities, relations and graphs",
                responses=_STILL_RUNNING)
    async def stats() -> Any:
        return await ctx.reports.get("stats", lambda: compute_stats(kg.store).to_json(), settings.request_timeout)

    @router.get("/v1/validation", summary="The validation report (as `mirage-kg validate --json`)",
                responses=_STILL_RUNNING)
    async def validation() -> Any:
        return await ctx.reports.get("validation", lambda: validate(kg.store).to_json(), settings.request_timeout)

    @router.get("/v1/health", summary="Liveness, the store, and the ask queue")
    async def health() -> dict[str, Any]:
        asks = ctx.asks
        return {"status": "ok", "store": kg.store.location, "labels_ready": ctx.labels_ready.is_set(),
                "linker_warm": ctx.linker_warm.is_set(),
                "asks": asks is not None,
                "asks_waiting": asks.waiting if asks is not None else 0}

    return router
