"""The per-store state every graph query reads, cached until a load commits (the manifest's load records change):
the declarations that are not concepts, relation metadata, the degree index and adjacency file once opened, the
concepts merged by exact match, and what hub reads cost. ``GraphBase`` holds the store and rebuilds the state when
the store says it changed (an endpoint is asked every 2 s)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import TYPE_CHECKING

from mirage_kg.graph.concepts import ConceptGroups, exact_match_pairs
from mirage_kg.graph.facts import DECLARATION_TYPES, Direction, Neighbour
from mirage_kg.index.caching import load_records
from mirage_kg.model.namespaces import RDF_TYPE, SCHEMA_GRAPH
from mirage_kg.model.records import Relation
from mirage_kg.model.terms import iri_ref
from mirage_kg.store.base import Store

if TYPE_CHECKING:
    from mirage_kg.index.adjacency import AdjacencyFile
    from mirage_kg.index.degree import DiskDegrees, MemoryDegrees

    DegreeTable = DiskDegrees | MemoryDegrees

_SPARQL_RECHECK_S = 2.0  # how often a remote store's manifest is re-read to notice loads


@dataclass
class GraphState:
    """What the graph knows of one store state (``token``: the manifest's load records), filled as queries ask."""

    token: tuple[tuple[str, ...], ...]
    non_concepts: frozenset[str]
    relations: dict[str, Relation] = field(default_factory=dict)
    declared_relations: dict[str, str] | None = None  # lower-cased label/local name -> IRI
    degrees: DegreeTable | None = None  # embedded: the whole degree index (on disk past 200k triples)
    degrees_version: int | None = None  # the store's write count when ``degrees`` was opened
    degree_file_sought: bool = False  # whether labels looked for an index file already built for this state
    hub_anchors_sought: bool = False  # whether the degree index's file was given its hubs' anchors (if it lacked them)
    adjacency: AdjacencyFile | None = None  # every node's edges, in a file beside the degree index's (bridge reads it)
    adjacency_sought: bool = False  # whether ``adjacency`` was looked for (and built where missing) for this state
    degree_cache: dict[str, int] = field(default_factory=dict)  # remote: degrees fetched so far
    groups: ConceptGroups | None = None  # concepts merged by exact match (mirage_kg.graph.concepts)
    concept_count: int | None = None  # nodes with facts: the N of the specificity (IDF) ranking
    hub_relations: dict[str, list[tuple[str, Direction]]] = field(default_factory=dict)  # hub -> (relation, direction)
    #: (hub, relations) -> its capped edges for bridge (``PATH_HUB_EDGES``)
    path_hub_edges: dict[tuple[str, frozenset[str] | None], list[Neighbour]] = field(default_factory=dict)


class GraphBase:
    """The store, the options every query reads, and the cached per-store state (``GraphState``).
    ``cache_dir`` is where caches built from the store (the degree index) go when the store has no folder.
    ``merge_equivalents`` (default on) makes anchor and bridge treat a concept and its exact matches (in other
    sources) as one node."""

    def __init__(self, store: Store, *, cache_dir: FsPath | None = None, merge_equivalents: bool = True) -> None:
        self.store = store
        self.merge_equivalents = merge_equivalents
        self.cache_dir = FsPath(cache_dir) if cache_dir is not None else None
        self._state_: GraphState | None = None
        self._checked_at = 0.0
        self._checked_version: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.location})"

    # --- state ---------------------------------------------------------------------------------------------------
    def _state(self) -> GraphState:
        """The cached schema-level state, rebuilt when a load has committed since (remote: checked every 2 s)."""
        now = time.monotonic()
        state = self._state_
        version = self.store.version
        if state is not None:
            if version is not None and version == self._checked_version:  # nothing written since: no manifest read
                return state
            if not self.store.indexed and now - self._checked_at < _SPARQL_RECHECK_S:
                return state
        token = load_records(self.store)
        self._checked_at, self._checked_version = now, version
        if state is None or state.token != token:
            state = self._state_ = GraphState(token=token, non_concepts=self._find_non_concepts())
        return state

    @property
    def token(self) -> tuple[tuple[str, ...], ...]:
        """The manifest's load records: a new value after every committed load (caches built on the graph key
        on it)."""
        return self._state().token

    def refresh(self) -> None:
        """Forget cached state (for changes made with raw updates rather than ``load``)."""
        self._state_ = None

    def non_concepts(self) -> frozenset[str]:
        """IRIs that are relation, property, class-schema or ontology declarations rather than concepts."""
        return self._state().non_concepts

    def _find_non_concepts(self) -> frozenset[str]:
        types = " ".join(iri_ref(t) for t in DECLARATION_TYPES)
        rows = self.store.select_all(
            f"SELECT DISTINCT ?x WHERE {{ {{ GRAPH {iri_ref(SCHEMA_GRAPH)} {{ ?x ?p ?o }} }} UNION "
            f"{{ GRAPH ?g {{ ?x {iri_ref(RDF_TYPE)} ?t }} VALUES ?t {{ {types} }} }} FILTER(isIRI(?x)) }}")
        return frozenset(r["x"].value for r in rows)

    def is_concept(self, iri: str) -> bool:
        return iri not in self._state().non_concepts

    # --- merged concepts and specificity ------------------------------------------------------------------------
    @property
    def groups(self) -> ConceptGroups:
        """The concepts merged by ``skos:exactMatch`` (empty when ``merge_equivalents`` is off)."""
        state = self._state()
        if state.groups is not None:
            return state.groups
        if not self.merge_equivalents:
            state.groups = ConceptGroups()
        else:
            state.groups = ConceptGroups.from_pairs(exact_match_pairs(self.store, state.non_concepts))
        return state.groups
