"""What several structural checks share, fetched once per run (``Context``): the predicate profile, the declared
relations, the concept table, the edges of a set of predicates in batches, the components, the IS-A hierarchy.

Each check is one or a few aggregate queries plus a LIMITed query for its first examples (``count_and_examples``);
the graph-shaped ones fetch their edges once and finish in Python."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property

import numpy as np

from mirage_kg.model.namespaces import RDF, RDFS, SCHEMA_GRAPH, SKOS
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.validation import tsv_rows
from mirage_kg.validation.compact import IriTable, string_hashes
from mirage_kg.validation.structural.components import Components, find_components
from mirage_kg.validation.structural.edges import EdgeBatch, batches
from mirage_kg.validation.structural.queries import (ANNOTATION_TYPES, CONCEPT_PREDICATES, DATA, DESCRIBING, MAPPINGS,
                                                     META_TYPES, PREFIXES, RELATION_TYPES, VOCABULARIES, sort_key,
                                                     values)

FETCH_ALL = 10_000


def _int(rows: list[dict[str, Term]], name: str = "n") -> int:
    return int(rows[0][name].value) if rows and name in rows[0] else 0


class Context:
    """What several checks share, fetched once per run: the predicates in use, declarations, the IS-A edges."""

    def __init__(self, store: Store, max_examples: int = 5) -> None:
        self.store = store
        self.max_examples = max_examples

    def select(self, query: str) -> list[dict[str, Term]]:
        """All rows (paged under an endpoint's result cap when the query sets no LIMIT of its own)."""
        return list(self.store.select_all(PREFIXES + query))

    def count_and_examples(self, inner: str, order: Sequence[str]) -> tuple[int, list[dict[str, Term]]]:
        """``inner`` is a SELECT whose rows are the offending things: how many, and the first few by ``order``
        (variable names, ``-name`` for descending).

        Up to ``FETCH_ALL`` rows are fetched once, counted and sorted here; past that a COUNT and an ordered,
        LIMITed query run, so a check that finds millions never brings them all back."""
        rows = self.select(f"{inner}\nLIMIT {FETCH_ALL + 1}")
        if len(rows) <= FETCH_ALL:
            for var in reversed(order):
                name = var.lstrip("-")
                rows.sort(key=lambda row: sort_key(row.get(name)), reverse=var.startswith("-"))
            return len(rows), rows[: self.max_examples]
        total = _int(self.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ {inner} }}"))
        sparql_order = " ".join(f"DESC(?{v[1:]})" if v.startswith("-") else f"?{v}" for v in order)
        return total, self.select(f"{inner}\nORDER BY {sparql_order}\nLIMIT {self.max_examples}")

    @cached_property
    def profile(self) -> dict[str, dict[str | None, int]]:
        """predicate -> {object datatype (None for an IRI or blank node): triples}, over the data graphs.

        One scan of the store: Oxigraph decodes every quad for it (about 2 s per million), so every other
        check that would need to look at all objects reads this instead. A language-tagged literal is
        rdf:langString by its tag, not by ``DATATYPE``, which Virtuoso leaves unbound for it."""
        if self.store.indexed:  # Oxigraph's DATATYPE is rdf:langString for a tagged literal: one call per quad,
            # and a graph named instead of a filter on ?g, made this pass 1.9x faster on a UMLS-shaped store
            rows = [r for graph in self.data_graphs for r in self.select(
                f"""SELECT ?p ?dt (COUNT(*) AS ?n) WHERE {{ GRAPH {iri_ref(graph)} {{ ?s ?p ?o }}
                BIND(DATATYPE(?o) AS ?dt) }} GROUP BY ?p ?dt""")]
        else:
            rows = self.select(f"""SELECT ?p ?dt (COUNT(*) AS ?n) WHERE {{ GRAPH ?g {{ ?s ?p ?o }} {DATA}
                BIND(IF(isLiteral(?o) && LANG(?o) != "", rdf:langString, DATATYPE(?o)) AS ?dt) }} GROUP BY ?p ?dt""")
        profile: dict[str, dict[str | None, int]] = defaultdict(dict)
        for r in rows:
            kinds = profile[r["p"].value]
            dt = r["dt"].value if "dt" in r else None
            kinds[dt] = kinds.get(dt, 0) + int(r["n"].value)  # summed over the graphs
        return profile

    @cached_property
    def predicates(self) -> dict[str, int]:
        """Predicates with resource objects in the data graphs (rdf:type aside), with their edge counts."""
        return {p: kinds[None] for p, kinds in self.profile.items() if None in kinds and p != RDF + "type"}

    def _typed(self, types: Iterable[str]) -> set[str]:
        rows = self.select(f"SELECT DISTINCT ?r WHERE {{ ?r rdf:type ?k . {values('k', types)} FILTER(isIRI(?r)) }}")
        return {r["r"].value for r in rows}

    @cached_property
    def declared_relations(self) -> set[str]:
        # IS-A is the model's hierarchy relation (DESIGN section 4), declared or not
        return self._typed(RELATION_TYPES) | {RDFS + "subClassOf"}

    @cached_property
    def annotation_properties(self) -> set[str]:
        return self._typed(ANNOTATION_TYPES) - self.declared_relations

    @cached_property
    def undeclared(self) -> list[str]:
        """Predicates used between IRIs that are declared neither as a relation nor as an annotation."""
        return sorted(p for p in self.predicates if p not in self.declared_relations
                      and p not in self.annotation_properties and not p.startswith(VOCABULARIES))

    @cached_property
    def links(self) -> list[str]:
        """Predicates that link concepts: declared relations in use, and undeclared ones (reported apart)."""
        return sorted({p for p in self.predicates if p in self.declared_relations} | set(self.undeclared))

    @cached_property
    def concept_links(self) -> list[str]:
        """The links that make two concepts neighbours: mappings into other vocabularies aside."""
        return [p for p in self.links if p not in MAPPINGS]

    def edges(self, predicates: list[str], *, with_schema: bool = False) -> Iterator[tuple[str, str]]:
        """(subject, object) IRI pairs of the predicates' edges in the data graphs (and the schema graph when
        ``with_schema``), streamed through the store's pattern primitive (the embedded store's index, an
        endpoint's paged SELECT)."""
        skip = {MANIFEST_GRAPH} | (set() if with_schema else {SCHEMA_GRAPH})
        if self.store.indexed:  # one native pass per graph: no Term per value, no filter evaluated per quad
            graphs = self.data_graphs + ([SCHEMA_GRAPH] if with_schema and SCHEMA_GRAPH in self.graphs else [])
            for graph in graphs if predicates else ():
                rows = self.store.iri_rows(f"SELECT ?s ?o WHERE {{ {values('p', predicates)} "
                                           f"GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}", ("s", "o"))
                for subject, obj in rows:
                    if subject is not None and obj is not None:
                        yield subject, obj
            return
        for predicate in predicates:
            for quad in self.store.quads(predicate=predicate):
                if quad.graph not in skip and quad.subject.kind == "uri" and quad.object.kind == "uri":
                    yield quad.subject.value, quad.object.value

    @cached_property
    def reads_tsv(self) -> bool:
        """Whether the whole-graph passes read the engine's TSV results as hashes (``tsv_rows``): on the embedded
        store, when no two concepts share a hash (then only their strings tell them apart)."""
        return tsv_rows.readable(self.store) and not self.concepts.exact

    def each_edge_batch(self, predicates: list[str], consume: Callable[[EdgeBatch], None], *,
                        with_schema: bool = False) -> None:
        """``edges`` handed to ``consume`` a batch at a time, as hashes of their two ends
        (``compact.string_hashes``), each end's IRI read back on demand. On the embedded store no Python object
        is made per edge (``tsv_rows``)."""
        if not self.reads_tsv:
            for subjects, objects in batches(self.edges(predicates, with_schema=with_schema)):
                consume(EdgeBatch(string_hashes(subjects), string_hashes(objects), (subjects, objects)))
            return

        def edges_of(chunk: tsv_rows.TsvChunk) -> None:
            subjects, objects = chunk.iri_hashes(0), chunk.iri_hashes(1)
            both = chunk.is_iri(0) & chunk.is_iri(1)  # a literal or blank node at either end is no edge
            rows = None if bool(both.all()) else np.flatnonzero(both)
            if rows is not None:
                subjects, objects = subjects[rows], objects[rows]
            consume(EdgeBatch(subjects, objects, chunk=chunk, rows=rows))

        graphs = self.data_graphs + ([SCHEMA_GRAPH] if with_schema and SCHEMA_GRAPH in self.graphs else [])
        for graph in graphs if predicates else ():
            tsv_rows.each_chunk(self.store, f"SELECT ?s ?o WHERE {{ {values('p', predicates)} "
                                            f"GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}", ("s", "o"), edges_of)

    def concept_mask(self, predicate: str) -> np.ndarray:
        """Which concepts (by id) have ``predicate`` in some graph."""
        if not self.reads_tsv:
            return self.concepts.mask(self.subjects(predicate))
        seen = np.zeros(len(self.concepts), dtype=bool)

        def mark(chunk: tsv_rows.TsvChunk) -> None:
            found = self.concepts.ids_of_hashes(chunk.iri_hashes(0)[chunk.is_iri(0)])
            seen[found[found >= 0]] = True

        tsv_rows.each_chunk(self.store, f"SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s {iri_ref(predicate)} ?o }} }}",
                            ("s",), mark)
        return seen

    @cached_property
    def graphs(self) -> list[str]:
        return self.store.graphs()

    @cached_property
    def data_graphs(self) -> list[str]:
        """The named graphs that hold data: all but the schema and manifest graphs."""
        return [g for g in self.graphs if g not in (SCHEMA_GRAPH, MANIFEST_GRAPH)]

    @cached_property
    def concepts(self) -> IriTable:
        """Every concept's IRI (millions on a UMLS-size KG), each with an id in IRI order: the IRIs a data graph
        types, labels or links from, less vocabulary terms (META_TYPES) and what the schema graph describes.

        Streamed through the pattern primitive, one predicate at a time, and subtracted here: as one SPARQL query
        (a DISTINCT over every such subject with two MINUS) Virtuoso 7.2 with its default MaxQueryMem never
        finished it on HPO ("Low query memory limit"; its LIMIT/OFFSET pages ran past a million rows for 41k
        concepts), while simple pattern pages work on every endpoint and read the embedded store's index.
        Held as an ``IriTable`` (one blob and sorted hashes): the set of strings it replaces took ~120 bytes an
        IRI, 0.4 GB at UMLS size, with a second such set beside it for prefLabels."""
        skip = {SCHEMA_GRAPH, MANIFEST_GRAPH}
        predicates = sorted(set(CONCEPT_PREDICATES) | set(self.concept_links))
        vocabulary = {q.subject.value for meta in META_TYPES
                      for q in self.store.quads(predicate=RDF + "type", obj=Term("uri", meta))}
        described = {q.subject.value for q in self.store.quads(graph=SCHEMA_GRAPH)}

        def found_utf8() -> Iterator[bytes]:  # a row per concept (deduped natively), each as its UTF-8 bytes
            found: list[bytes] = []
            for graph in self.data_graphs:
                tsv_rows.each_chunk(self.store, f"SELECT DISTINCT ?s WHERE {{ {values('p', predicates)} "
                                                f"GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}", ("s",),
                                    lambda chunk: found.extend(line[1:-1] for line in chunk.data.split(b"\n")
                                                               if line[:1] == b"<"))
            yield from found

        def found_text() -> Iterator[str]:
            if self.store.indexed:  # the embedded store dedupes natively: a row per concept, not per triple
                for graph in self.data_graphs:
                    yield from (s for (s,) in self.store.iri_rows(
                        f"SELECT DISTINCT ?s WHERE {{ {values('p', predicates)} GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}",
                        ("s",)) if s is not None)
                return
            for predicate in predicates:
                yield from (q.subject.value for q in self.store.quads(predicate=predicate)
                            if q.graph not in skip and q.subject.kind == "uri")

        if tsv_rows.readable(self.store):  # compared as the TSV's UTF-8 bytes
            vocabulary_utf8 = {iri.encode() for iri in vocabulary}
            described_utf8 = {iri.encode() for iri in described}
            return IriTable(s for s in found_utf8() if s not in vocabulary_utf8 and s not in described_utf8)
        return IriTable(s for s in found_text() if s not in vocabulary and s not in described)

    @cached_property
    def components(self) -> Components:
        return find_components(self.concepts, self.links, self.each_edge_batch, self.max_examples)

    @cached_property
    def with_preflabel(self) -> np.ndarray:
        """Which concepts (by id) have a ``skos:prefLabel`` in some graph."""
        return self.concept_mask(SKOS + "prefLabel")

    @cached_property
    def described(self) -> np.ndarray:
        """Which concepts (by id) have a label (prefLabel, rdfs:label, altLabel) or a type in some graph."""
        described = self.with_preflabel.copy()
        for predicate in DESCRIBING[1:]:
            described |= self.concept_mask(predicate)
        return described

    def subjects(self, predicate: str) -> Iterator[str]:
        """IRIs that have ``predicate`` in any graph (the store's pattern primitive), streamed."""
        if self.store.indexed:
            rows = self.store.iri_rows(f"SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s {iri_ref(predicate)} ?o }} }}",
                                       ("s",))
            return (s for (s,) in rows if s is not None)
        return (q.subject.value for q in self.store.quads(predicate=predicate) if q.subject.kind == "uri")

    @cached_property
    def subclass_edges(self) -> list[tuple[str, str]]:
        """IS-A edges between IRIs, the schema's included (repeats across graphs dropped)."""
        return sorted(set(self.edges([RDFS + "subClassOf"], with_schema=True)))

    @cached_property
    def _parents(self) -> dict[str, set[str]]:
        parents: dict[str, set[str]] = defaultdict(set)
        for child, parent in self.subclass_edges:
            parents[child].add(parent)
        return parents

    @cached_property
    def _children(self) -> dict[str, set[str]]:
        children: dict[str, set[str]] = defaultdict(set)
        for child, parent in self.subclass_edges:
            children[parent].add(child)
        return children

    def related_classes(self, cls: str) -> set[str]:
        """``cls``, its ancestors and its descendants: the types a node may have and still fit ``cls``."""
        seen = {cls}
        for graph in (self._parents, self._children):
            stack = [cls]
            while stack:
                for nxt in graph.get(stack.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
        return seen
