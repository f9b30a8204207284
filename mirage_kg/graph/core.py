"""The graph API the reasoner and the CLI share: entity lookup, anchor (an entity's neighbourhood), bridge (the
paths between two entities), verbalisation and path checks, the same over the embedded store and any endpoint.

``Graph`` reads a store only through the ``Store`` contract; the entity linker and the retriever are built on top of
it (``mirage_kg.linking.linker``, ``mirage_kg.retrieval.retriever``) and joined to it by ``mirage_kg.kg.KnowledgeGraph``.
What a fact is, and the one vocabulary of edge directions, is ``mirage_kg.graph.facts``.

``Graph`` is composed of one layer per job, each a class in its own module extending the one below it:

- ``state.GraphBase``: the store and the per-store state, rebuilt when a load commits;
- ``indexes.IndexedGraph``: the degree index and adjacency file beside the store, degrees;
- ``entities.EntityGraph``: entity lookup, labels, relations;
- ``neighbours.NeighbourGraph``: a node's fact edges, merged concepts walked as one;
- ``anchor.AnchorGraph`` and ``paths.PathGraph`` (side by side over ``NeighbourGraph``): anchor, bridge;
- ``verbalise``: paths made into records that read as sentences, path checks, sources (plain functions).

Layers, not collaborators, because the jobs share one cached state and call each other both ways through it (the
degree index files the hubs' anchors, which anchor ranks; anchor and bridge read labels from the degree index's
file), and because a subclass's override must reach every caller (``KnowledgeGraph.similarity`` ranks anchor's
neighbours): every call stays late-bound through ``self``, and each module imports only the layers below it, so
there is no import circle. The one call downwards-up, the degree index filing the hubs' anchors, is the hook
``IndexedGraph._file_hub_anchors``."""

from __future__ import annotations

from collections.abc import Iterable

from mirage_kg.graph import verbalise as text
from mirage_kg.graph.anchor import AnchorGraph
from mirage_kg.graph.concept_record import (ConceptRecord, FactPage, Page, annotations_page, children_page, describe,
                                            facts_page)
from mirage_kg.graph.paths import PathGraph
from mirage_kg.model.records import Entity, Path, Step


class Graph(AnchorGraph, PathGraph):
    """Graph queries over a ``Store``: entities, labels, relations, neighbours, anchor, bridge, path checks.
    ``cache_dir`` is where caches built from the store (the degree index) go when the store has no folder.
    ``merge_equivalents`` (default on) makes anchor and bridge treat a concept and its exact matches (in other
    sources) as one node."""

    # --- a concept's page (mirage_kg.graph.concept_record) ---------------------------------------------------------
    def concept(self, entity: str | Entity, limit: int = 20) -> ConceptRecord:
        """What the concept's page shows: definition, synonyms, cross-references, types, parents, the first
        ``limit`` children and annotations (frequency, evidence, references), its one fact count and that count
        split by relation, its sources, and which sections its sources give nothing for."""
        return describe(self, self.entity(entity), limit)

    def concept_facts(self, entity: str | Entity, relation: str | None = None, direction: str = "both",
                      offset: int = 0, limit: int = 50) -> FactPage:
        """A page of the concept's facts (of one relation and direction when given), with their counts."""
        return facts_page(self, self.entity(entity), relation, direction, offset, limit)

    def concept_children(self, entity: str | Entity, offset: int = 0, limit: int = 20) -> Page:
        """A page of the concept's direct subclasses, by label, with their count."""
        return children_page(self, self.entity(entity), offset, limit)

    def concept_annotations(self, entity: str | Entity, offset: int = 0, limit: int = 20) -> Page:
        """A page of the annotations on the concept's edges (HPOA frequency, evidence, references), with their
        count."""
        return annotations_page(self, self.entity(entity), offset, limit)

    # --- checks and text (mirage_kg.graph.verbalise) -----------------------------------------------------------
    def path_exists(self, path: Path) -> bool:
        """Whether every step's triple is in the store (a cited path must be real)."""
        return text.path_exists(self.store, path)

    def sources(self, triples: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], tuple[str, ...]]:
        """The named graphs (sources) that hold each triple."""
        return text.triple_sources(self.store, triples)

    def verbalise(self, item: Step | Path) -> str:
        """The sentence(s) for a step or a path, read in its walking direction."""
        return text.verbalise(item)
