"""Structural checks of a KG, each a stable id with a level, answered by a few SPARQL queries on any ``Store``.

Each check is one or a few aggregate queries plus a LIMITed query for its first examples; the two graph-shaped
checks (IS-A cycles, connected components) fetch their edges once and finish in Python (Tarjan, union-find).
Data means every named graph except the schema and manifest graphs, as in ``mirage_kg.graph.stats``."""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import islice

import numpy as np

from mirage_kg.model.namespaces import MKG, MKG_RELATION, OWL, RDF, RDFS, SCHEMA_GRAPH, SKOS, XSD, compress
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.validation import tsv_rows
from mirage_kg.validation.compact import ComponentLabels, IriTable, groups_with_several, hashes_of, string_hashes
from mirage_kg.validation.report import Example, Finding, Level

PREFIXES = f"""PREFIX rdf: <{RDF}>
PREFIX rdfs: <{RDFS}>
PREFIX owl: <{OWL}>
PREFIX skos: <{SKOS}>
PREFIX xsd: <{XSD}>
PREFIX MKG: <{MKG}>
"""
DATA = f"FILTER(?g NOT IN ({iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}))"

# Types that declare a relation (an edge-forming predicate) ...
RELATION_TYPES = (MKG_RELATION, OWL + "ObjectProperty")
# ... and types that mark a subject as vocabulary rather than a concept.
META_TYPES = RELATION_TYPES + (RDF + "Property", RDF + "Statement") + tuple(OWL + t for t in (
    "DatatypeProperty", "AnnotationProperty", "Ontology", "TransitiveProperty", "SymmetricProperty",
    "FunctionalProperty", "InverseFunctionalProperty", "AllDisjointClasses", "Axiom", "Restriction")) + tuple(
    "http://www.w3.org/ns/shacl#" + t for t in ("NodeShape", "PropertyShape"))
# What makes an IRI a concept when it is a subject in a data graph: a type, a label, or a link (added per run).
CONCEPT_PREDICATES = (RDF + "type", SKOS + "prefLabel", SKOS + "altLabel", RDFS + "label")
ANNOTATION_TYPES = (OWL + "DatatypeProperty", OWL + "AnnotationProperty")
# Undeclared predicates from these W3C / OBO vocabularies are annotations or modelling, not KG relations.
VOCABULARIES = (RDF, RDFS, OWL, SKOS, XSD, "http://www.w3.org/ns/shacl#", "http://purl.org/dc/terms/",
                "http://purl.org/dc/elements/1.1/", "http://www.w3.org/ns/prov#", "http://xmlns.com/foaf/0.1/",
                "http://www.geneontology.org/formats/oboInOwl#", "http://rdfs.org/ns/void#")
# Mapping predicates point into other vocabularies by design: their targets need no description here.
MAPPINGS = tuple(SKOS + m for m in ("exactMatch", "closeMatch", "broadMatch", "narrowMatch", "relatedMatch")) + (
    OWL + "sameAs",)
# Properties whose values are text: xsd:string or rdf:langString, nothing else.
TEXT_PROPERTIES = tuple(SKOS + p for p in ("prefLabel", "altLabel", "hiddenLabel", "definition")) + (
    RDFS + "label", RDFS + "comment", MKG + "inverseLabel", MKG + "forwardTemplate", MKG + "backwardTemplate")
# xsd datatypes whose lexical forms SPARQL can check by casting (derived integer types are checked as integers).
_INTEGER_TYPES = ("integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
                  "nonPositiveInteger", "negativeInteger", "unsignedLong", "unsignedInt", "unsignedShort",
                  "unsignedByte")
_CASTS = {"boolean": "boolean", "decimal": "decimal", "double": "double", "float": "float", "date": "date",
          "dateTime": "dateTime", "time": "time", **{t: "integer" for t in _INTEGER_TYPES}}


def values(var: str, iris: Iterable[str]) -> str:
    """A VALUES block binding ``?var`` to IRIs (safely escaped)."""
    return f"VALUES ?{var} {{ {' '.join(iri_ref(i) for i in iris)} }}"


def values_terms(var: str, terms: Iterable[Term]) -> str:
    """A VALUES block binding ``?var`` to terms (literals included), each written as SPARQL."""
    return f"VALUES ?{var} {{ {' '.join(t.sparql() for t in terms)} }}"


def _int(rows: list[dict], name: str = "n") -> int:
    return int(rows[0][name].value) if rows and name in rows[0] else 0


FETCH_ALL = 10_000
_NUMERIC = {XSD + t for t in ("integer", "decimal", "double", "float", "int", "long")}


def _sort_key(term: Term | None) -> tuple[int, float, str]:
    if term is None:
        return (0, 0.0, "")
    if term.kind == "literal" and term.datatype in _NUMERIC:
        return (1, float(term.value), "")
    return (2, 0.0, term.value)


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return f'"{text[:limit]}..."' if len(text) > limit else f'"{text}"'


class Context:
    """What several checks share, fetched once per run: the predicates in use, declarations, the IS-A edges."""

    def __init__(self, store: Store, max_examples: int = 5) -> None:
        self.store = store
        self.max_examples = max_examples

    def select(self, query: str) -> list[dict]:
        """All rows (paged under an endpoint's result cap when the query sets no LIMIT of its own)."""
        return list(self.store.select_all(PREFIXES + query))

    def count_and_examples(self, inner: str, order: Sequence[str]) -> tuple[int, list[dict]]:
        """``inner`` is a SELECT whose rows are the offending things: how many, and the first few by ``order``
        (variable names, ``-name`` for descending).

        Up to ``FETCH_ALL`` rows are fetched once, counted and sorted here; past that a COUNT and an ordered,
        LIMITed query run, so a check that finds millions never brings them all back."""
        rows = self.select(f"{inner}\nLIMIT {FETCH_ALL + 1}")
        if len(rows) <= FETCH_ALL:
            for var in reversed(order):
                name = var.lstrip("-")
                rows.sort(key=lambda row: _sort_key(row.get(name)), reverse=var.startswith("-"))
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
            for subjects, objects in _batches(self.edges(predicates, with_schema=with_schema)):
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

        def found() -> Iterator[str] | Iterator[bytes]:
            if tsv_rows.readable(self.store):  # a row per concept (deduped natively), each as its UTF-8 bytes
                found: list[bytes] = []
                for graph in self.data_graphs:
                    tsv_rows.each_chunk(self.store, f"SELECT DISTINCT ?s WHERE {{ {values('p', predicates)} "
                                                    f"GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}", ("s",),
                                        lambda chunk: found.extend(line[1:-1] for line in chunk.data.split(b"\n")
                                                                   if line[:1] == b"<"))
                yield from found
                return
            if self.store.indexed:  # the embedded store dedupes natively: a row per concept, not per triple
                for graph in self.data_graphs:
                    yield from (s for (s,) in self.store.iri_rows(
                        f"SELECT DISTINCT ?s WHERE {{ {values('p', predicates)} GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} }}",
                        ("s",)) if s is not None)
                return
            for predicate in predicates:
                yield from (q.subject.value for q in self.store.quads(predicate=predicate)
                            if q.graph not in skip and q.subject.kind == "uri")

        if tsv_rows.readable(self.store):
            vocabulary = {iri.encode() for iri in vocabulary}  # type: ignore[misc]
            described = {iri.encode() for iri in described}  # type: ignore[misc]
        return IriTable(s for s in found() if s not in vocabulary and s not in described)  # type: ignore[misc]

    @cached_property
    def components(self) -> Components:
        return _components(self)

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


@dataclass(frozen=True)
class StructuralCheck:
    """A check: its stable id, level, what its count counts, and the function that runs it."""

    id: str
    level: Level
    counts: str
    description: str
    run: Callable[[Context], tuple[int, list[Example]]]


def _example(iri: str, detail: str) -> Example:
    return Example(id=compress(iri), detail=detail, iri=iri)


# --- the checks -------------------------------------------------------------------------------------------------
def schema_missing(ctx: Context) -> tuple[int, list[Example]]:
    if ctx.store.ask(f"ASK {{ GRAPH {iri_ref(SCHEMA_GRAPH)} {{ ?s ?p ?o }} }}"):
        return 0, []
    return 1, [Example(id=compress(SCHEMA_GRAPH), detail=(
        "the store has no MIRAGE-KG schema graph, so the model's relations, classes, domains and ranges are "
        "unknown to the checks; load it: mirage-kg load ontologies/schema.ttl --graph GRAPH:schema"))]


DESCRIBING = (SKOS + "prefLabel", RDFS + "label", SKOS + "altLabel", RDF + "type")


def dangling_reference(ctx: Context) -> tuple[int, list[Example]]:
    """Link targets (mappings aside) with no label and no type anywhere: the targets come from the components'
    pass over the links, whether a concept has a label or type from one pass over each describing predicate's
    subjects, and whether a target outside the concepts has one from lookups of those few. (A query with
    ``FILTER NOT EXISTS`` per distinct target took 17-44 s at 2.2M triples; ``MINUS`` builds its right side whole,
    every label and type triple, gigabytes at UMLS size.)"""
    preds = ctx.concept_links
    if not preds:
        return 0, []
    components = ctx.components
    concepts = components.targets & ~ctx.described
    outside = sorted(components.outside_targets - _described_outside(ctx, sorted(components.outside_targets)))
    total = int(np.count_nonzero(concepts)) + len(outside)
    if not total:
        return 0, []
    first = sorted(ctx.concepts.iris(np.flatnonzero(concepts)[: ctx.max_examples]) + outside[: ctx.max_examples])
    shown = first[: ctx.max_examples]
    if not shown:
        return total, []
    refs = {r["o"].value: r for r in ctx.select(f"""SELECT ?o (COUNT(*) AS ?n) (MIN(STR(?s)) AS ?from) WHERE {{
        {values('o', shown)} GRAPH ?g {{ ?s ?p ?o }} {DATA} {values('p', preds)} }}
        GROUP BY ?o""")}
    return total, [_example(o, f"no label and no type; target of {refs[o]['n'].value} "
                               f"edge(s), e.g. from {compress(refs[o]['from'].value)}") for o in shown]


def _described_outside(ctx: Context, iris: list[str], chunk: int = 500) -> set[str]:
    """The IRIs among ``iris`` that have a label or a type in some graph (a VALUES-bound lookup per chunk)."""
    described: set[str] = set()
    for at in range(0, len(iris), chunk):
        branches = " UNION ".join(f"{{ ?o {iri_ref(p)} ?any }}" for p in DESCRIBING)
        described.update(r["o"].value for r in ctx.select(
            f"SELECT DISTINCT ?o WHERE {{ {values('o', iris[at: at + chunk])} {branches} }}"))
    return described


def missing_preflabel(ctx: Context) -> tuple[int, list[Example]]:
    missing = np.flatnonzero(~ctx.with_preflabel)  # ids: in IRI order
    return len(missing), [_example(x, "no skos:prefLabel") for x in ctx.concepts.iris(missing[: ctx.max_examples])]


Part = tuple[str, ...]  # consecutive variables of a grouping check's SELECT whose values together form one key


def _select_variables(query: str) -> tuple[str, ...]:
    """The variables a ``SELECT ?a ?b WHERE`` query projects, in order."""
    head = query[query.index("SELECT") + len("SELECT"): query.index("WHERE")]
    return tuple(name.lstrip("?") for name in head.split())


def _part_hashes(variables: tuple[str, ...], part: Part) -> Callable[[tsv_rows.TsvChunk], np.ndarray]:
    first, last = variables.index(part[0]), variables.index(part[-1])
    if variables[first:last + 1] != part:
        raise ValueError(f"{part} are not consecutive variables of {variables}")
    return lambda chunk: chunk.span_hashes(first, last)


def _hashed_rows(ctx: Context, query: str, *parts: Part) -> list[np.ndarray]:
    """One pass over a SELECT's rows (streamed): for each part (consecutive variables), the hash of its values on
    every row. The grouping checks count with these instead of a GROUP BY, which the embedded store holds whole
    (a hash set per group: 2-3 GB for the notations or prefLabels of a UMLS-size KG). On the embedded store the
    hashes come from the engine's TSV (``tsv_rows``: no Python object per row), elsewhere from ``Term``\\ s."""
    hashed: list[list[np.ndarray]] = [[] for _ in parts]
    variables = _select_variables(query)
    if tsv_rows.readable(ctx.store):
        readers = [_part_hashes(variables, part) for part in parts]

        def hash_parts(chunk: tsv_rows.TsvChunk) -> None:
            for out, read in zip(hashed, readers):
                out.append(read(chunk))

        tsv_rows.each_chunk(ctx.store, PREFIXES + query, variables, hash_parts)
    else:
        rows = iter(ctx.store.select_all(PREFIXES + query))
        while chunk := list(islice(rows, ROW_BATCH)):
            for out, part in zip(hashed, parts):
                out.append(hashes_of([tuple(row.get(name) for name in part) for row in chunk]))
    return [np.concatenate(h) if h else np.zeros(0, dtype=np.int64) for h in hashed]


def _first_rows(ctx: Context, query: str, key: Part, flagged: np.ndarray, rank: Callable[[dict, int], object],
                n: int) -> list[tuple[dict, int]]:
    """A second pass over the rows, for the examples: one row per key in ``flagged`` (sorted hashes of ``key``,
    as ``_hashed_rows`` made them), the ``n`` smallest by ``rank(row, position of its key in flagged)``, each
    with that position; only those rows are kept (and, on the embedded store, only rows of a flagged key are
    read into ``Term``\\ s)."""
    done = np.zeros(len(flagged), dtype=bool)
    variables = _select_variables(query)

    def matches(hashes: np.ndarray) -> Iterator[tuple[int, int]]:
        at = np.minimum(np.searchsorted(flagged, hashes), len(flagged) - 1)
        for i in np.flatnonzero(flagged[at] == hashes).tolist():
            if not done[at[i]]:
                done[at[i]] = True
                yield i, int(at[i])

    best: list[tuple[object, int, dict, int]] = []  # (rank, arrival, row, at): trimmed to the n smallest
    arrivals = iter(range(1 << 62))  # ties keep the order rows came in, as heapq.nsmallest over a stream does

    def offer(row: dict, at: int) -> None:
        best.append((rank(row, at), next(arrivals), row, at))
        if len(best) >= 4 * n + 64:
            best[:] = heapq.nsmallest(n, best, key=lambda item: (item[0], item[1]))

    if not n:
        return []
    if tsv_rows.readable(ctx.store):
        read = _part_hashes(variables, key)

        def offer_matches(chunk: tsv_rows.TsvChunk) -> None:
            for i, at in matches(read(chunk)):
                offer(chunk.terms(i, variables), at)

        tsv_rows.each_chunk(ctx.store, PREFIXES + query, variables, offer_matches)
    else:
        rows = iter(ctx.store.select_all(PREFIXES + query))
        while chunk := list(islice(rows, ROW_BATCH)):
            for i, at in matches(hashes_of([tuple(row.get(name) for name in key) for row in chunk])):
                offer(chunk[i], at)
    return [(row, at) for _, _, row, at in heapq.nsmallest(n, best, key=lambda item: (item[0], item[1]))]


def multiple_preflabels(ctx: Context) -> tuple[int, list[Example]]:
    # counted from hashes of (concept, language) and label; the labels concatenated for the shown concepts only
    where = f"GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} BIND(LANG(?l) AS ?lang)"
    rows = f"SELECT ?x ?lang ?l WHERE {{ {where} }}"  # ?lang unbound on a value that is not a literal
    keys, labels, concepts = _hashed_rows(ctx, rows, ("x", "lang"), ("l",), ("x",))
    _, _, first = groups_with_several(keys, labels)
    flagged = np.unique(concepts[first])
    if not len(flagged):
        return 0, []
    concepts_only = f"SELECT ?x WHERE {{ GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} }}"  # the labels unread
    shown_rows = [row for row, _ in _first_rows(ctx, concepts_only, ("x",), flagged,
                                                lambda r, _: _sort_key(r["x"]), ctx.max_examples)]
    if not shown_rows:
        return len(flagged), []
    inner = f"""SELECT ?x (SAMPLE(?lang) AS ?language) (MAX(?k) AS ?most) WHERE {{
        {{ SELECT ?x ?lang (COUNT(DISTINCT ?l) AS ?k) WHERE {{ {values_terms('x', [r['x'] for r in shown_rows])}
           {where} }} GROUP BY ?x ?lang HAVING (COUNT(DISTINCT ?l) > 1) }}
    }} GROUP BY ?x"""
    found = sorted(ctx.select(inner), key=lambda r: _sort_key(r["x"]))
    shown = " ".join(f"({r['x'].sparql()} {r['language'].sparql()})" for r in found)
    labels_of = {(d["x"].value, d["lang"].value): d["all"].value for d in ctx.select(
        f"""SELECT ?x ?lang (GROUP_CONCAT(DISTINCT STR(?l); separator=" | ") AS ?all) WHERE {{ {where}
        VALUES (?x ?lang) {{ {shown} }} }} GROUP BY ?x ?lang""")}
    out = []
    for r in found:
        lang = r["language"].value or "no language"
        text = labels_of[(r["x"].value, r["language"].value)]
        out.append(_example(r["x"].value, f"{r['most'].value} prefLabels in {lang!r}: {text[:200]}"))
    return len(flagged), out


def ambiguous_label(ctx: Context) -> tuple[int, list[Example]]:
    # Counted from hashes of (lower-cased label, language) and concept: a GROUP BY with COUNT(DISTINCT) held a
    # hash set per label (GBs at UMLS size); the members are concatenated for the shown groups only.
    where = f"""GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} FILTER(isIRI(?x))
        BIND(LCASE(STR(?l)) AS ?key) BIND(LANG(?l) AS ?lang)"""
    rows = f"SELECT ?x ?key ?lang WHERE {{ {where} }}"
    keys, concepts = _hashed_rows(ctx, rows, ("key", "lang"), ("x",))
    flagged, counts, _ = groups_with_several(keys, concepts)
    if not len(flagged):
        return 0, []
    keys_only = f"SELECT ?key ?lang WHERE {{ {where} }}"  # the concepts unread
    first_rows = _first_rows(ctx, keys_only, ("key", "lang"), flagged,
                             lambda r, at: (-int(counts[at]), _sort_key(r["key"]), _sort_key(r["lang"])),
                             ctx.max_examples)
    shown_rows = [row for row, _ in first_rows]
    count_of = {(row["key"], row["lang"]): int(counts[at]) for row, at in first_rows}
    if not shown_rows:
        return len(flagged), []
    shown = " ".join(f"({r['key'].sparql()} {r['lang'].sparql()})" for r in shown_rows)
    details = {(d["key"].value, d["lang"].value): d for d in ctx.select(
        f"""SELECT ?key ?lang (SAMPLE(STR(?l)) AS ?label) (GROUP_CONCAT(DISTINCT STR(?x); separator=" ") AS ?all)
        WHERE {{ {where} VALUES (?key ?lang) {{ {shown} }} }} GROUP BY ?key ?lang""")}
    out = []
    for r in shown_rows:
        d = details[(r["key"].value, r["lang"].value)]
        members = sorted(d["all"].value.split(" "))
        names = ", ".join(compress(m) for m in members[:5]) + (", ..." if len(members) > 5 else "")
        out.append(_example(members[0], f"prefLabel {_quote(d['label'].value)} is on "
                                        f"{count_of[(r['key'], r['lang'])]} concepts: {names}"))
    return len(flagged), out


def _cycle_path(members: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through the component, as the nodes in walking order, for the example's detail."""
    inside = set(members)
    start = min(members)
    path, seen, node = [start], {start}, start
    while True:
        nxt = min(n for n in edges[node] if n in inside)
        if nxt in seen:
            return path[path.index(nxt):] + [nxt]
        path.append(nxt)
        seen.add(nxt)
        node = nxt


def isa_cycle(ctx: Context) -> tuple[int, list[Example]]:
    """Strongly connected components of the IS-A edges (SciPy over hashed ids: Tarjan over dicts and sets of
    strings took ~2 GB at UMLS size), plus ``x subClassOf x``; the IRIs of the classes in a cycle are read on a
    second pass over the edges, only when there is one."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    batches: list[tuple[np.ndarray, np.ndarray]] = []
    ctx.each_edge_batch([RDFS + "subClassOf"], lambda batch: batches.append((batch.subjects, batch.objects)),
                        with_schema=True)
    if not batches:
        return 0, []
    child = np.concatenate([c for c, _ in batches])
    parent = np.concatenate([p for _, p in batches])
    batches.clear()
    loops = np.unique(child[child == parent])  # x subClassOf x
    nodes, ends = np.unique(np.concatenate((child, parent)), return_inverse=True)
    graph = coo_matrix((np.ones(len(child), dtype=np.int8), (ends[: len(child)], ends[len(child):])),
                       shape=(len(nodes), len(nodes))).tocsr()
    del child, parent, ends
    _, labels = connected_components(graph, directed=True, connection="strong")
    del graph
    sizes = np.bincount(labels)
    in_cycle = sizes[labels] > 1
    members = np.union1d(nodes[in_cycle], loops)
    if len(members) == 0:
        return 0, []
    names: dict[int, str] = {}
    edges: dict[str, set[str]] = defaultdict(set)
    def name_cycle_edges(batch: EdgeBatch) -> None:
        inside = np.isin(batch.subjects, members) & np.isin(batch.objects, members)
        for at in np.flatnonzero(inside).tolist():
            child, parent = batch.iri(at, 0), batch.iri(at, 1)
            names[int(batch.subjects[at])], names[int(batch.objects[at])] = child, parent
            edges[child].add(parent)

    ctx.each_edge_batch([RDFS + "subClassOf"], name_cycle_edges, with_schema=True)
    groups: dict[int, list[str]] = defaultdict(list)
    for node, label in zip(nodes[in_cycle].tolist(), labels[in_cycle].tolist()):
        groups[label].append(names[node])
    cycles = [sorted(members_) for members_ in groups.values()]
    cycles += [[names[node]] for node in loops.tolist()]
    cycles.sort(key=lambda c: (-len(c), c[0]))
    out = []
    for cycle in cycles[: ctx.max_examples]:
        path = _cycle_path(cycle, edges)
        walk = " -> ".join(compress(n) for n in path[:8]) + (" -> ..." if len(path) > 8 else "")
        out.append(_example(cycle[0], f"{len(cycle)} class(es) in a subClassOf cycle: {walk}"))
    return len(cycles), out


def undeclared_relation(ctx: Context) -> tuple[int, list[Example]]:
    ranked = sorted(ctx.undeclared, key=lambda p: (-ctx.predicates[p], p))
    return len(ranked), [_example(p, f"used by {ctx.predicates[p]:,} edge(s) but not declared as a MKG:Relation "
                                     f"or owl:ObjectProperty") for p in ranked[: ctx.max_examples]]


def unused_relation(ctx: Context) -> tuple[int, list[Example]]:
    inner = f"""SELECT DISTINCT ?r WHERE {{ GRAPH ?g {{ ?r rdf:type ?k }} {DATA} {values('k', RELATION_TYPES)}
        FILTER(isIRI(?r)) FILTER NOT EXISTS {{ ?s ?r ?o }} }}"""
    total, rows = ctx.count_and_examples(inner, ["r"])
    return total, [_example(r["r"].value, "declared in a data graph but no edge uses it") for r in rows]


def _is_meta(cls: str) -> bool:
    return cls.startswith((RDF, RDFS, OWL, SKOS))


def _signature_violations(ctx: Context, axiom: str, end: str) -> tuple[int, list[Example]]:
    """Edges whose ``end`` node (?s for domain, ?o for range) has a type outside the declared class's hierarchy.

    A node fits a class when one of its types is the class, a subclass or a superclass of it (a node typed only
    MKG:Concept may still be a Disease); a node with no type, or only vocabulary types, is not judged."""
    decl = ctx.select(f"""SELECT DISTINCT ?p ?c WHERE {{ ?p {axiom} ?c . ?p rdf:type ?k . {values('k', RELATION_TYPES)}
        FILTER(isIRI(?c) && !STRSTARTS(STR(?c), "{XSD}") && ?c != rdfs:Literal) }}""")
    declared: dict[str, set[str]] = defaultdict(set)
    for r in decl:
        declared[r["p"].value].add(r["c"].value)
    expected = {p: classes for p, classes in declared.items() if p in ctx.predicates}
    total, examples = 0, []
    if not declared:
        return 0, []
    observed = []
    if expected:  # the types the relation's subjects (objects) actually have: a short list, judged in Python
        observed = ctx.select(f"""SELECT DISTINCT ?p ?t WHERE {{ {values('p', expected)}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(isIRI(?o)) ?{end} rdf:type ?t FILTER(isIRI(?t)) }}""")
    seen_types: dict[str, set[str]] = defaultdict(set)
    for r in observed:
        if not _is_meta(r["t"].value):
            seen_types[r["p"].value].add(r["t"].value)
    for prop in sorted(expected):
        fits = set.intersection(*(ctx.related_classes(c) for c in expected[prop]))
        bad = sorted(seen_types[prop] - fits)
        if not bad:
            continue
        good = sorted(seen_types[prop] & fits)
        keep_out = f"MINUS {{ ?{end} rdf:type ?good . {values('good', good)} }}" if good else ""
        inner = f"""SELECT ?s ?o (MIN(STR(?bad)) AS ?type) WHERE {{ GRAPH ?g {{ ?s {iri_ref(prop)} ?o }} {DATA}
            FILTER(isIRI(?o)) ?{end} rdf:type ?bad . {values('bad', bad)} {keep_out} }} GROUP BY ?s ?o"""
        n, rows = ctx.count_and_examples(inner, [end, "s", "o"])
        total += n
        want = " and ".join(compress(c) for c in sorted(expected[prop]))
        for r in rows:
            node = r[end].value
            examples.append(_example(node, f"{compress(r['s'].value)} {compress(prop)} {compress(r['o'].value)}: "
                                           f"{compress(node)} is a {compress(r['type'].value)}, "
                                           f"the {'domain' if end == 's' else 'range'} is {want}"))
    if end == "o":  # a relation with a class range whose object is a literal
        inner = f"""SELECT DISTINCT ?s ?p ?o WHERE {{ {values('p', declared)} GRAPH ?g {{ ?s ?p ?o }} {DATA}
            FILTER(isLiteral(?o)) }}"""
        n, rows = ctx.count_and_examples(inner, ["s", "p", "o"])
        total += n
        examples += [_example(r["s"].value, f"{compress(r['p'].value)} {_quote(r['o'].value)}: a literal where "
                                            f"{' and '.join(compress(c) for c in sorted(declared[r['p'].value]))} "
                                            f"is expected") for r in rows]
    return total, examples[: ctx.max_examples]


def domain_violation(ctx: Context) -> tuple[int, list[Example]]:
    return _signature_violations(ctx, "rdfs:domain", "s")


def range_violation(ctx: Context) -> tuple[int, list[Example]]:
    return _signature_violations(ctx, "rdfs:range", "o")


def inactive_reference(ctx: Context) -> tuple[int, list[Example]]:
    if not ctx.concept_links:
        return 0, []
    preds = values("p", ctx.concept_links)  # bound first in each branch: 200x faster than after the UNION
    inner = f"""SELECT DISTINCT ?s ?p ?o ?x WHERE {{
        ?x MKG:active ?a FILTER(STR(?a) IN ("false", "0"))
        {{ {preds} GRAPH ?g {{ ?x ?p ?o }} BIND(?x AS ?s) }} UNION {{ {preds} GRAPH ?g {{ ?s ?p ?x }} BIND(?x AS ?o) }}
        {DATA} FILTER(isIRI(?s) && isIRI(?o)) }}"""
    total, rows = ctx.count_and_examples(inner, ["x", "s", "p", "o"])
    return total, [_example(r["x"].value, f"{compress(r['s'].value)} {compress(r['p'].value)} "
                                          f"{compress(r['o'].value)}, and {compress(r['x'].value)} is inactive")
                   for r in rows]


def duplicate_id(ctx: Context) -> tuple[int, list[Example]]:
    # as ambiguous_label: counted from hashes, the members and graphs concatenated for the shown codes only
    where = f"GRAPH ?g {{ ?x skos:notation ?code }} {DATA} FILTER(isIRI(?x))"
    rows = f"SELECT ?x ?code WHERE {{ {where} }}"
    codes, carriers = _hashed_rows(ctx, rows, ("code",), ("x",))
    flagged, counts, _ = groups_with_several(codes, carriers)
    if not len(flagged):
        return 0, []
    codes_only = f"SELECT ?code WHERE {{ {where} }}"  # the carriers unread
    first_rows = _first_rows(ctx, codes_only, ("code",), flagged,
                             lambda r, at: (-int(counts[at]), _sort_key(r["code"])), ctx.max_examples)
    shown_rows = [row for row, _ in first_rows]
    count_at = [int(counts[at]) for _, at in first_rows]
    if not shown_rows:
        return len(flagged), []
    details = {d["code"]: d for d in ctx.select(
        f"""SELECT ?code (GROUP_CONCAT(DISTINCT STR(?x); separator=" ") AS ?all)
        (GROUP_CONCAT(DISTINCT STR(?g); separator=" ") AS ?graphs) WHERE {{ {values_terms('code', [r['code'] for r in shown_rows])}
        {where} }} GROUP BY ?code""")}
    out = []
    for r, k in zip(shown_rows, count_at):
        d = details[r["code"]]
        members = sorted(d["all"].value.split(" "))
        graphs = sorted(compress(g) for g in d["graphs"].value.split(" "))
        out.append(_example(members[0], f"notation {_quote(r['code'].value)} is on {k} IRIs: "
                                        f"{', '.join(compress(m) for m in members[:5])} (graphs: {', '.join(graphs)})"))
    return len(flagged), out


def literal_datatype(ctx: Context) -> tuple[int, list[Example]]:
    """Three kinds of wrong literal, each queried only on the predicates the profile shows can have one."""
    text = {XSD + "string", RDF + "langString"}
    branches = []
    castable = [(p, dt) for p, kinds in ctx.profile.items() for dt in kinds
                if dt is not None and dt.startswith(XSD) and dt[len(XSD):] in _CASTS]
    if castable:  # ill-typed: the lexical form does not cast to its own datatype
        pairs = " ".join(f"({iri_ref(p)} {iri_ref(dt)})" for p, dt in castable)
        casts = " ".join(f"IF(?dt = xsd:{dt}, xsd:{cast}(STR(?o)), " for dt, cast in _CASTS.items())
        branches.append(f"""SELECT ?s ?p ?o ("ill" AS ?why) ?dt WHERE {{ VALUES (?p ?dt) {{ {pairs} }}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(DATATYPE(?o) = ?dt)
            BIND({casts}"unreachable"{')' * len(_CASTS)} AS ?ok) FILTER(!BOUND(?ok)) }}""")
    ranges = ctx.select(f"""SELECT DISTINCT ?p ?r WHERE {{ ?p rdfs:range ?r
        FILTER(isIRI(?r) && STRSTARTS(STR(?r), "{XSD}")) }}""")
    off = []
    for r in ranges:
        allowed = text if r["r"].value == XSD + "string" else {r["r"].value}
        if any(dt not in allowed for dt in ctx.profile.get(r["p"].value, {})):
            off.append(f"({iri_ref(r['p'].value)} {iri_ref(r['r'].value)})")
    if off:  # a value outside the property's declared xsd range (an IRI, or another datatype)
        branches.append(f"""SELECT ?s ?p ?o ("range" AS ?why) ?dt WHERE {{ VALUES (?p ?dt) {{ {' '.join(off)} }}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(!isLiteral(?o)
                || (?dt = xsd:string && LANG(?o) = "" && DATATYPE(?o) NOT IN (xsd:string, rdf:langString))
                || (?dt != xsd:string && (LANG(?o) != "" || DATATYPE(?o) != ?dt))) }}""")
    not_text = [p for p in TEXT_PROPERTIES if any(dt not in text for dt in ctx.profile.get(p, {}))]
    if not_text:  # a label, definition or template that is not a string
        branches.append(f"""SELECT ?s ?p ?o ("text" AS ?why) (xsd:string AS ?dt) WHERE {{ {values('p', not_text)}
            GRAPH ?g {{ ?s ?p ?o }} {DATA}
            FILTER(!isLiteral(?o) || (LANG(?o) = "" && DATATYPE(?o) NOT IN (xsd:string, rdf:langString)))
            }}""")
    if not branches:
        return 0, []
    inner = f"SELECT DISTINCT ?s ?p ?o ?why ?dt WHERE {{ {' UNION '.join(f'{{ {b} }}' for b in branches)} }}"
    total, rows = ctx.count_and_examples(inner, ["s", "p", "o"])
    out = []
    for r in rows:
        obj = r["o"]
        shown = _quote(obj.value) if obj.kind == "literal" else compress(obj.value)
        found = compress(obj.datatype) if obj.kind == "literal" and obj.datatype else (
            "rdf:langString" if obj.lang else ("xsd:string" if obj.kind == "literal" else "an IRI"))
        if r["why"].value == "ill":
            detail = f"{compress(r['p'].value)} {shown}: not a valid {compress(r['dt'].value)}"
        elif r["why"].value == "text":
            detail = f"{compress(r['p'].value)} {shown}: {found} where a string or language-tagged string is expected"
        else:
            detail = f"{compress(r['p'].value)} {shown}: {found} where the range is {compress(r['dt'].value)}"
        out.append(_example(r["s"].value, detail))
    return total, out


# Rows read into Python objects at a time (strings, dicts of terms: ~1 KB a row with their lists: 16k rows, ~16 MB),
# and id pairs merged at a time
ROW_BATCH = 1 << 14
UNION_BATCH = 1 << 20


def _batches(pairs: Iterable[tuple[str, str]], size: int = ROW_BATCH) -> Iterator[tuple[list[str], list[str]]]:
    """(subjects, objects) lists of up to ``size`` edges at a time."""
    pairs = iter(pairs)
    while chunk := list(islice(pairs, size)):
        yield [a for a, _ in chunk], [b for _, b in chunk]


class EdgeBatch:
    """Edges of one pass, as the hashes of their subjects and objects (``compact.string_hashes``), each end's IRI
    read back for a row on demand: from the strings when the edges came as strings, else from the TSV chunk."""

    def __init__(self, subjects: np.ndarray, objects: np.ndarray, names: tuple[list[str], list[str]] | None = None,
                 *, chunk: tsv_rows.TsvChunk | None = None, rows: np.ndarray | None = None) -> None:
        self.subjects, self.objects = subjects, objects
        self._names, self._chunk, self._rows = names, chunk, rows

    def __len__(self) -> int:
        return len(self.subjects)

    def hashes(self, end: int) -> np.ndarray:
        """The subjects' (``end`` 0) or objects' (1) hashes."""
        return self.objects if end else self.subjects

    def iri(self, row: int, end: int) -> str:
        if self._names is not None:
            return self._names[end][row]
        assert self._chunk is not None
        return self._chunk.iri(row if self._rows is None else int(self._rows[row]), end)

    def ids(self, table: IriTable, end: int) -> np.ndarray:
        """Each end's id in ``table`` (-1 outside it): by string where the table needs strings, else by hash."""
        if self._names is not None and table.exact:
            return table.ids(self._names[end])
        return table.ids_of_hashes(self.hashes(end))


class _PairBatches:
    """Id pairs gathered into arrays of about ``size`` and handed to ``merge``: each union costs a pass over
    every node, so batches of a few thousand edges are merged a million at a time."""

    def __init__(self, merge: Callable[[np.ndarray, np.ndarray], object], size: int = UNION_BATCH) -> None:
        self._merge, self._size = merge, size
        self._lefts: list[np.ndarray] = []
        self._rights: list[np.ndarray] = []
        self._held = 0

    def add(self, left: np.ndarray, right: np.ndarray) -> None:
        self._lefts.append(left)
        self._rights.append(right)
        self._held += len(left)
        if self._held >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._lefts:
            left, right = np.concatenate(self._lefts), np.concatenate(self._rights)
            self._lefts, self._rights, self._held = [], [], 0
            self._merge(left, right)


@dataclass(frozen=True)
class Components:
    """The connected components of the concept graph, as the checks need them: how many, the largest's size,
    the next ones (their smallest IRI and size) in order, and which concepts (by id) some link touches."""

    count: int
    largest: int
    following: tuple[tuple[str, int], ...]
    linked: np.ndarray
    #: which concepts (by id) are the target of a link (mappings aside), and the targets outside the concepts
    targets: np.ndarray
    outside_targets: frozenset[str]


def _components(ctx: Context) -> Components:
    """Connected components of the concept graph (edges of the linking predicates, direction ignored), ordered
    largest first, then by smallest IRI; the link edges are streamed once in batches and merged as ids
    (``ComponentLabels``): a node outside the concept table (the target of a link, say) gets an id after them."""
    table = ctx.concepts
    known = len(table)
    if not ctx.links:
        return Components(0, 0, (), np.zeros(known, dtype=bool), np.zeros(known, dtype=bool), frozenset())
    outside: dict[int, int] = {}  # the hash of a linked IRI that is not a concept -> its node id: few on a sound KG
    outside_names: dict[int, str] = {}  # node id -> IRI, for those
    merged = ComponentLabels(known)
    targets = np.zeros(known, dtype=bool)
    outside_target_ids: set[int] = set()

    def ids(batch: EdgeBatch, end: int) -> np.ndarray:
        found = batch.ids(table, end)
        missing = np.flatnonzero(found < 0)
        for at, key in zip(missing.tolist(), batch.hashes(end)[missing].tolist()):
            node = outside.get(key)
            if node is None:
                node = outside[key] = known + len(outside)
                outside_names[node] = batch.iri(at, end)
            found[at] = node
        return found

    def target_ids(batch: EdgeBatch) -> np.ndarray:
        found = ids(batch, 1)
        targets[found[found < known]] = True
        outside_target_ids.update(found[found >= known].tolist())
        return found

    pending = _PairBatches(lambda left, right: (merged.grow(known + len(outside)), merged.union(left, right)))
    ctx.each_edge_batch(ctx.concept_links, lambda batch: pending.add(ids(batch, 0), target_ids(batch)))
    pending.flush()
    outside_targets = {outside_names[node] for node in outside_target_ids}
    mappings = [p for p in ctx.links if p in MAPPINGS]

    def concept_pair(batch: EdgeBatch) -> None:
        # a mapping between two concepts of this KG joins them; one to an outside IRI does not
        left, right = batch.ids(table, 0), batch.ids(table, 1)
        both = (left >= 0) & (right >= 0)
        pending.add(left[both], right[both])

    if mappings:
        ctx.each_edge_batch(mappings, concept_pair)
        pending.flush()
    nodes = np.flatnonzero(merged.touched)
    labels = merged.labels[nodes]
    if len(nodes) == 0:
        return Components(0, 0, (), np.zeros(known, dtype=bool), targets, frozenset(outside_targets))
    roots, sizes = np.unique(labels, return_counts=True)
    # each component's smallest IRI: its smallest concept id (ids are in IRI order), or an outside IRI
    smallest = np.full(len(roots), np.iinfo(np.int64).max, dtype=np.int64)
    concept_nodes = nodes < known
    np.minimum.at(smallest, np.searchsorted(roots, labels[concept_nodes]), nodes[concept_nodes])
    outside_smallest: dict[int, str] = {}
    for node, iri in outside_names.items():
        if merged.touched[node]:
            at = int(np.searchsorted(roots, merged.labels[node]))
            outside_smallest[at] = min(iri, outside_smallest.get(at, iri))

    def smallest_iri(at: int) -> str:
        names = [table.iri(int(smallest[at]))] if smallest[at] < known else []
        return min(names + ([outside_smallest[at]] if at in outside_smallest else []))

    # only components as large as the (examples + 1)-th largest can be shown: their smallest IRIs decide the order
    shown = ctx.max_examples + 1
    floor = np.sort(sizes)[::-1][min(shown, len(sizes)) - 1]
    candidates = sorted(((-int(sizes[at]), smallest_iri(int(at))) for at in np.flatnonzero(sizes >= floor)))
    return Components(count=len(roots), largest=-candidates[0][0],
                      following=tuple((iri, -size) for size, iri in candidates[1:shown]),
                      linked=merged.touched[:known].copy(), targets=targets,
                      outside_targets=frozenset(outside_targets))


def disconnected_component(ctx: Context) -> tuple[int, list[Example]]:
    components = ctx.components
    if components.count < 2:
        return 0, []
    out = [_example(iri, f"a component of {size:,} concept(s) not connected to the largest "
                         f"({components.largest:,} concepts)") for iri, size in components.following]
    return components.count - 1, out


def isolated_node(ctx: Context) -> tuple[int, list[Example]]:
    # A retired concept (MKG:active false) is expected to have lost its edges.
    inactive = ctx.concepts.mask(x for (x,) in ctx.store.iri_rows(PREFIXES + 'SELECT DISTINCT ?x WHERE { '
                                 '?x MKG:active ?a FILTER(STR(?a) IN ("false", "0")) }', ("x",)) if x is not None)
    isolated = np.flatnonzero(~ctx.components.linked & ~inactive)  # ids: in IRI order
    return len(isolated), [_example(x, "no edge to or from any other concept")
                           for x in ctx.concepts.iris(isolated[: ctx.max_examples])]


CHECKS: tuple[StructuralCheck, ...] = (
    StructuralCheck("schema-missing", "warning", "stores",
                    "the store lacks the schema graph the other checks read relations and classes from",
                    schema_missing),
    StructuralCheck("dangling-reference", "error", "IRIs",
                    "an edge points to an IRI that has no label and no type anywhere in the store", dangling_reference),
    StructuralCheck("missing-preflabel", "warning", "concepts",
                    "a concept has no skos:prefLabel (it will read as its CURIE)", missing_preflabel),
    StructuralCheck("multiple-preflabels", "error", "concepts",
                    "a concept has more than one skos:prefLabel in one language", multiple_preflabels),
    StructuralCheck("ambiguous-label", "warning", "labels",
                    "one prefLabel (ignoring case) names several concepts", ambiguous_label),
    StructuralCheck("isa-cycle", "error", "cycles",
                    "rdfs:subClassOf edges form a cycle", isa_cycle),
    StructuralCheck("undeclared-relation", "warning", "predicates",
                    "edges use a predicate the schema does not declare as a relation", undeclared_relation),
    StructuralCheck("unused-relation", "info", "relations",
                    "a data graph declares a relation that no edge uses", unused_relation),
    StructuralCheck("domain-violation", "error", "edges",
                    "an edge's subject is typed outside the relation's rdfs:domain", domain_violation),
    StructuralCheck("range-violation", "error", "edges",
                    "an edge's object is typed outside the relation's rdfs:range, or is a literal", range_violation),
    StructuralCheck("inactive-reference", "warning", "edges",
                    "an edge touches a concept marked MKG:active false", inactive_reference),
    StructuralCheck("duplicate-id", "error", "identifiers",
                    "one skos:notation value is carried by several IRIs", duplicate_id),
    StructuralCheck("literal-datatype", "error", "triples",
                    "a literal is ill-typed, does not match its property's xsd range, or a label is not text",
                    literal_datatype),
    StructuralCheck("disconnected-component", "info", "components",
                    "concepts form components not connected to the largest one", disconnected_component),
    StructuralCheck("isolated-node", "info", "concepts",
                    "a concept has no edge to or from another concept", isolated_node),
)
CHECK_IDS = tuple(c.id for c in CHECKS)


def run_structural(store: Store, *, max_examples: int = 5, only: Iterable[str] | None = None,
                   timings: dict[str, float] | None = None) -> list[Finding]:
    """Run the structural checks (all, or those in ``only``); one finding per check that found something."""
    wanted = set(only) if only is not None else set(CHECK_IDS)
    unknown = wanted - set(CHECK_IDS)
    if unknown:
        raise ValueError(f"unknown structural check(s): {', '.join(sorted(unknown))}; known: {', '.join(CHECK_IDS)}")
    from mirage_kg.progress import progress_bar

    ctx = Context(store, max_examples)
    findings = []
    chosen = [check for check in CHECKS if check.id in wanted]
    # a check's time includes the shared passes it is the first to need (the concept table, the components)
    with progress_bar("validate: structural checks", total=len(chosen), unit="checks") as advance:
        for check in chosen:
            started = time.perf_counter()
            count, examples = check.run(ctx)
            if timings is not None:
                timings[check.id] = time.perf_counter() - started
            if count:
                findings.append(Finding(check.id, check.level, count, tuple(examples[:max_examples])))
            advance(1)
    return findings
