"""Typed request and response bodies of the HTTP API (they make ``/openapi.json``).

The shapes are the CLI's ``--json`` records, made by the same functions (``mirage_kg.anchor_json`` and friends,
``Answer.to_json``); these models describe and check them, and let extra keys through so a field added to a shared
record reaches clients without a second edit here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AnchorResponse", "AskRequest", "ConceptFactsResponse", "ConceptPage", "ConceptResponse", "AskResponse", "BridgeResponse", "DifferentialResponse", "EntityResponse",
    "ErrorResponse", "LabelsResponse", "LinkResponse", "RetrieveResponse", "SearchResponse", "SparqlRequest",
    "SparqlResponse",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class EntityRef(_Open):
    id: str = Field(description="CURIE (or IRI when no prefix is known)")
    label: str


class Neighbour(_Open):
    relation: str
    relation_label: str
    direction: Literal["forward", "backward"] = Field(description="forward: the stored fact points from the anchor")
    id: str
    label: str
    text: str = Field(description="the fact read aloud")


class AnchorResponse(_Open):
    """``mirage-kg query anchor --json``."""

    entity: EntityRef
    neighbours: list[Neighbour]


class ConceptPage(_Open):
    """A page of a concept's children or annotations: ``items`` from ``offset`` of ``total``."""

    total: int
    offset: int
    items: list[dict[str, Any]]


class ConceptResponse(_Open):
    """``mirage_kg``'s ``Graph.concept(...).to_json()``: what the concept page shows."""

    entity: EntityRef
    iri: str
    same_as: list[EntityRef] = Field(description="members of the same merged concept (exact matches)")
    types: list[EntityRef]
    definitions: list[dict[str, Any]] = Field(description="text, lang, source (the member it came from)")
    synonyms: list[dict[str, Any]]
    xrefs: list[dict[str, Any]] = Field(description="id, kind (exact, close, db), label and in_kg when the KG holds it")
    parents: list[EntityRef]
    children: ConceptPage
    facts: int = Field(description="the concept's facts, a merged concept's counted once: the one fact count")
    relations: list[dict[str, Any]] = Field(description="that count split by relation and direction")
    annotations: ConceptPage = Field(description="annotated edges: frequency, evidence, onset, references")
    sources: list[str] = Field(description="the named graphs (source releases) that hold the concept")
    lacks: list[str] = Field(description="sections the sources give nothing for")


class ConceptFactsResponse(_Open):
    """A page of a concept's facts, each as an anchor neighbour."""

    entity: EntityRef
    total: int = Field(description="all the concept's facts")
    matching: int = Field(description="those of the relation and direction asked for")
    offset: int
    relation: str | None
    direction: str
    neighbours: list[Neighbour]


class PathStep(_Open):
    subject: str
    relation: str
    object: str
    direction: Literal["forward", "backward"] = Field(description="how the path walks the stored triple")


class PathOut(_Open):
    length: int
    nodes: list[str]
    steps: list[PathStep]
    text: str


class BridgeResponse(_Open):
    """``mirage-kg query bridge --json``."""

    source: EntityRef
    target: EntityRef
    paths: list[PathOut]


class CandidateOut(_Open):
    id: str
    label: str
    score: float
    method: str


class MentionOut(_Open):
    text: str
    start: int
    end: int
    candidates: list[CandidateOut]


class LinkResponse(_Open):
    """``mirage-kg link --json``."""

    mentions: list[MentionOut]


class LabelMatchOut(_Open):
    id: str
    label: str = Field(description="the concept's preferred label")
    matched: str = Field(description="the label that starts with the query")
    synonym: bool


class SearchResponse(_Open):
    """Label search for autocomplete: labels starting with the query, then labels with a word that does."""

    query: str
    matches: list[LabelMatchOut]


class EntityResponse(_Open):
    entity: EntityRef
    iri: str
    degree: int = Field(description="facts that name the entity, either way")


class RelationLabel(_Open):
    label: str
    inverse_label: str | None = None


class LabelsResponse(_Open):
    entities: dict[str, str]
    relations: dict[str, RelationLabel]


class RetrieveResponse(_Open):
    """``mirage-kg retrieve --json``."""

    question: str
    entities: list[dict[str, Any]]
    evidence: list[dict[str, Any]]


class DifferentialResponse(_Open):
    """``mirage-kg query differential --json``: the linked findings and the candidate conditions, best first."""

    question: str
    findings: list[dict[str, Any]]
    conditions: int
    candidates: list[dict[str, Any]]
    notes: list[str]


class SparqlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="a read-only SPARQL 1.1 query; updates are refused (403)")
    timeout: float | None = Field(default=None, gt=0, description="seconds; capped by the server's limit")


class SparqlResponse(_Open):
    """SPARQL 1.1 JSON results (``head`` + ``results`` or ``boolean``); CONSTRUCT/DESCRIBE give ``triples``."""

    head: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    boolean: bool | None = None
    triples: list[list[dict[str, str]]] | None = None


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000)
    stream: bool = Field(default=False, description="answer as server-sent events of progress")
    n_q: int | None = Field(default=None, ge=1, le=8, description="most sub-questions")
    n_r: int | None = Field(default=None, ge=0, le=10, description="most KG searches per chain")
    k: int | None = Field(default=None, ge=1, le=50, description="anchor neighbours per relation and direction")
    max_hops: int | None = Field(default=None, ge=1, le=4, description="bridge path length")
    samples: int | None = Field(default=None, ge=1, le=4, description="chains per sub-question")
    seed: int | None = None
    cache: bool = Field(default=True, description="answer from the server's answer cache when it holds this "
                                                  "question asked with the same store, model and settings (the "
                                                  "record then says so under `cache`); false asks the model again")

    def overrides(self) -> dict[str, Any]:
        return self.model_dump(exclude={"question", "stream", "cache"}, exclude_none=True)


class SupportOut(_Open):
    verdict: Literal["grounded", "partial", "unsupported"] = Field(
        description="grounded: every sentence rests on cited claims; partial: the answer rests on cited claims but "
                    "some of the model's text did not (replaced or shown apart); unsupported: no claim supports it")
    reason: str


class FlagOut(_Open):
    code: str = Field(description="harmful_instruction, unsupported_dose, forged_result_block, budget_spent, "
                                  "unsupported_text, check_unavailable, ...")
    message: str
    sentence: int | None = Field(description="index into sentences, or null: the whole answer or text not shown")


class SentenceOut(_Open):
    text: str
    claims: list[int] = Field(description="indexes into claims")
    supported: bool
    reason: str


class AskResponse(_Open):
    """``mirage-kg ask --json``: the same record, key for key."""

    question: str
    answer: str = Field(description="what the knowledge graph supports; never the model's unsupported text")
    abstained: bool
    support: SupportOut
    flags: list[FlagOut]
    unsupported_text: str = Field(description="the model's own words no claim supports, to show apart under a "
                                              "label saying so (harmful sentences and doses withheld)")
    sentences: list[SentenceOut]
    sub_questions: list[str]
    claims: list[dict[str, Any]]
    conflicts: list[dict[str, Any]]
    dropped_claims: list[dict[str, Any]]
    chains: list[dict[str, Any]]
    notes: list[str]
    timings: dict[str, float]
    tokens: dict[str, int]


class ErrorBody(BaseModel):
    status: int
    type: str = Field(description="the error class, e.g. UnknownEntityError")
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody
