"""The graph endpoints under ``/v1/``: one entity and what its concept page shows, label search, labels by id, an
entity's neighbourhood, the paths between two entities, linking, LLM-free retrieval and the differential. Each
answers the same JSON as the matching ``mirage-kg ... --json`` command, computed on the graph thread pool."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from mirage_kg import InputError, anchor_json, bridge_json, compress, differential_diagnosis, expand, link_json

from mirage_reason.service.context import ServiceContext
from mirage_reason.service.models import (AnchorResponse, BridgeResponse, ConceptFactsResponse, ConceptPage,
                                          ConceptResponse, DifferentialResponse, EntityResponse, LabelsResponse,
                                          LinkResponse, RetrieveResponse, SearchResponse)

__all__ = ["concept_router", "graph_router"]

_DIRECTION = "^(forward|backward|both|out|in)$"


def concept_router(ctx: ServiceContext) -> APIRouter:
    """``/v1/entity`` and the pages of ``/v1/concept``: the concept page of the web app reads these."""
    router = APIRouter()
    kg, run, resolve = ctx.kg, ctx.run, ctx.resolve

    @router.get("/v1/entity", response_model=EntityResponse, summary="One entity by CURIE or IRI")
    async def entity(id: str = Query(..., max_length=2000, description="CURIE, IRI or exact name")) -> Any:
        def work() -> dict[str, Any]:
            found = resolve(id, "id").entity
            return {"entity": found.to_json(), "iri": found.iri, "degree": kg.degrees([found.iri])[found.iri]}

        return await run(work)

    @router.get("/v1/concept", response_model=ConceptResponse, summary="What a concept's page shows")
    async def concept(id: str = Query(..., max_length=2000, description="CURIE, IRI or exact name"),
                      limit: int = Query(20, ge=1, le=500, description="children and annotations in the first page")
                      ) -> Any:
        return await run(lambda: kg.concept(resolve(id, "id").entity, limit).to_json())

    @router.get("/v1/concept/facts", response_model=ConceptFactsResponse, summary="A page of a concept's facts")
    async def concept_facts(id: str = Query(..., max_length=2000), relation: str | None = Query(None, max_length=500),
                            direction: str = Query("both", pattern=_DIRECTION),
                            offset: int = Query(0, ge=0), limit: int = Query(50, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_facts(resolve(id, "id").entity, relation, direction, offset,
                                                  limit).to_json())

    @router.get("/v1/concept/children", response_model=ConceptPage, summary="A page of a concept's subclasses")
    async def concept_children(id: str = Query(..., max_length=2000), offset: int = Query(0, ge=0),
                               limit: int = Query(20, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_children(resolve(id, "id").entity, offset, limit).to_json())

    @router.get("/v1/concept/annotations", response_model=ConceptPage,
                summary="A page of the annotations on a concept's edges (frequency, evidence, references)")
    async def concept_annotations(id: str = Query(..., max_length=2000), offset: int = Query(0, ge=0),
                                  limit: int = Query(20, ge=1, le=500)) -> Any:
        return await run(lambda: kg.concept_annotations(resolve(id, "id").entity, offset, limit).to_json())

    return router


def graph_router(ctx: ServiceContext) -> APIRouter:
    """Search, labels, neighbourhoods, paths, linking, retrieval and the differential; the bounds on ``k``,
    ``max_hops`` and ``max_paths`` are the server's settings."""
    router = APIRouter()
    kg, run, resolve, settings = ctx.kg, ctx.run, ctx.resolve, ctx.settings

    @router.get("/v1/search", response_model=SearchResponse, summary="Label search for autocomplete")
    async def search(q: str = Query(..., min_length=1, max_length=200),
                     limit: int = Query(10, ge=1, le=50)) -> Any:
        matches = await run(kg.linker.complete, q, limit)
        return {"query": q, "matches": [m.to_json() for m in matches]}

    @router.get("/v1/labels", response_model=LabelsResponse, summary="Labels of entities and relations by id")
    async def labels(id: list[str] = Query(default=[]), relation: list[str] = Query(default=[])) -> Any:
        if len(id) + len(relation) > settings.max_labels:
            raise InputError(f"at most {settings.max_labels} ids per request")
        return await run(lambda: labels_json(ctx, id, relation))

    @router.get("/v1/anchor", response_model=AnchorResponse, summary="An entity's typed neighbourhood")
    async def anchor(entity: str = Query(..., max_length=2000, description="CURIE, IRI or exact name"),
                     k: int = Query(10, ge=1, le=settings.max_k, description="neighbours per relation and direction"),
                     relation: list[str] = Query(default=[], description="only these relations (repeatable)"),
                     direction: str = Query("both", pattern=_DIRECTION),
                     rank_by: str | None = Query(None, max_length=500)) -> Any:
        def work() -> dict[str, Any]:
            resolved = resolve(entity)
            center = resolved.entity
            steps = kg.anchor(center, k=k, relations=relation or None, direction=direction, rank_by=rank_by)
            return {**anchor_json(center, steps), "resolved": resolved.to_json()}

        return await run(work)

    @router.get("/v1/bridge", response_model=BridgeResponse, summary="Every path of at most max_hops edges")
    async def bridge(source: str = Query(..., max_length=2000), target: str = Query(..., max_length=2000),
                     max_hops: int = Query(3, ge=1, le=settings.max_hops),
                     max_paths: int = Query(20, ge=1, le=settings.max_paths),
                     relation: list[str] = Query(default=[])) -> Any:
        return await run(lambda: bridge_result(ctx, source, target, max_hops, max_paths, relation))

    @router.get("/v1/link", response_model=LinkResponse, summary="Mentions of KG entities in a text, ranked")
    async def link(text: str = Query(..., min_length=1, max_length=2000), top: int = Query(5, ge=1, le=20),
                   whole: bool = Query(False, description="take the text as one mention")) -> Any:
        return await run(lambda: link_result(ctx, text, top, whole))

    @router.get("/v1/retrieve", response_model=RetrieveResponse, summary="LLM-free evidence for a question")
    async def retrieve(question: str = Query(..., min_length=1, max_length=4000),
                       budget: int = Query(100, ge=1, le=500)) -> Any:
        return (await run(kg.retrieve, question, budget)).to_json()

    @router.get("/v1/differential", response_model=DifferentialResponse,
                summary="Conditions ranked by how much of the findings each explains (no model)")
    async def differential(findings: str = Query(..., min_length=1, max_length=4000),
                           top: int = Query(10, ge=1, le=50)) -> Any:
        return (await run(lambda: differential_diagnosis(kg, findings, top=top))).to_json()

    return router


def labels_json(ctx: ServiceContext, ids: list[str], relations: list[str]) -> dict[str, Any]:
    """``/v1/labels``: entity labels and relation labels (with their inverse) by CURIE."""
    names = ctx.kg.labels([expand(i) for i in ids])
    rels = ctx.kg.relations([expand(r) for r in relations])
    return {"entities": {compress(k): v for k, v in names.items()},
            "relations": {compress(k): {"label": r.label, "inverse_label": r.inverse_label}
                          for k, r in rels.items()}}


def bridge_result(ctx: ServiceContext, source: str, target: str, max_hops: int, max_paths: int,
                  relations: list[str]) -> dict[str, Any]:
    """``/v1/bridge``: the paths between two resolved entities, the hubs whose edges were capped, and how each
    end was resolved."""
    from_a, from_b = ctx.resolve(source, "source"), ctx.resolve(target, "target")
    a, b = from_a.entity, from_b.entity
    paths = ctx.kg.bridge(a, b, max_hops=max_hops, max_paths=max_paths, relations=relations or None)
    hubs = [(ctx.kg.entity(iri), edges) for iri, edges in paths.capped]
    return {**bridge_json(a, b, paths, hubs), "resolved": [from_a.to_json(), from_b.to_json()]}


def link_result(ctx: ServiceContext, text: str, top: int, whole: bool) -> dict[str, Any]:
    """``/v1/link``: the mentions found in ``text``, or with ``whole`` the text taken as one mention."""
    if whole:
        from mirage_kg import Mention  # lazy in mirage_kg: the linker module loads with the first link

        candidates = ctx.kg.linker.link_one(text, top=top)
        return link_json([Mention(text, 0, len(text), tuple(candidates))] if candidates else [])
    return link_json(ctx.kg.link(text, top=top))
