"""What one concept's page shows, read from the store: its definition, synonyms and cross-references, its parents
and children (``rdfs:subClassOf``), the annotations that qualify its edges (HPO's frequency, evidence, onset and
references), its facts counted by relation and read a page at a time, and which of these its sources do not give.

A merged concept (exact matches across sources, ``mirage_kg.graph.concepts``) is described as one: every member
contributes, and each definition names the member it came from. The fact count is the one number the concept's
facts page through (``Graph.walk``: a fact stored both ways, or by several members, counts once)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mirage_kg.errors import InputError
from mirage_kg.model.records import Direction, Entity, Step
from mirage_kg.model.namespaces import (MKG, MKG_CONCEPT, RDF, RDF_TYPE, RDFS_LABEL, RDFS_SUBCLASS, SKOS_ALT, SKOS_CLOSE,
                                  SKOS_DEFINITION, SKOS_EXACT, SKOS_PREF, compress)
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.graph.concepts import ConceptGroups
    from mirage_kg.model.records import Relation
    from mirage_kg.store.base import Store


class Graph(Protocol):
    """What a concept's record is read through: ``mirage_kg.graph.core.Graph`` (which offers it as ``Graph.concept``;
    named here structurally so that this module and the graph do not import each other)."""

    store: Store

    @property
    def groups(self) -> ConceptGroups: ...
    def labels(self, iris: Iterable[str]) -> dict[str, str]: ...
    def relations(self, iris: Iterable[str]) -> dict[str, Relation]: ...
    def walk(self, iri: str) -> list[tuple[str, Direction, str, str, str]]: ...
    def resolve_relations(self, relations: Sequence[str] | None) -> frozenset[str] | None: ...

__all__ = ["AnnotationRow", "ConceptRecord", "FactPage", "Page", "Xref", "annotations_page", "children_page",
           "describe", "facts_page"]

IAO_DEFINITION = "http://purl.obolibrary.org/obo/IAO_0000115"
DB_XREF = "http://www.geneontology.org/formats/oboInOwl#hasDbXref"
DEFINITION_PREDICATES = (SKOS_DEFINITION, IAO_DEFINITION)
#: annotation properties read from an annotation node (``mirage_kg.loaders.hpoa``), by their JSON name
ANNOTATION_FIELDS = {MKG + "frequency": "frequency", MKG + "evidence": "evidence", MKG + "onset": "onset",
                     MKG + "sex": "sex", MKG + "modifier": "modifiers", MKG + "reference": "references",
                     MKG + "negated": "negated"}
MAX_PAGE = 500
_SUBJECT, _PREDICATE, _OBJECT = RDF + "subject", RDF + "predicate", RDF + "object"
_MATCHES = frozenset({SKOS_EXACT, SKOS_CLOSE})


@dataclass(frozen=True)
class Page:
    """``items`` from ``offset`` of ``total``."""

    total: int
    offset: int
    items: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "offset": self.offset,
                "items": [i.to_json() if hasattr(i, "to_json") else i for i in self.items]}


@dataclass(frozen=True)
class Xref:
    """A cross-reference: ``exact`` or ``close`` (``skos:exactMatch``/``closeMatch``, an IRI) or ``db`` (an
    ``oboInOwl:hasDbXref`` the loader could not map to an IRI); ``label`` when the KG holds the target."""

    id: str
    kind: str
    label: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "label": self.label, "in_kg": self.label is not None}


@dataclass(frozen=True)
class AnnotationRow:
    """One annotated edge (HPOA row): ``subject`` -relation-> ``object`` with what the source says of it."""

    subject: Entity
    relation: str
    relation_label: str
    inverse_label: str  # the relation read from its object ("is a phenotype of")
    object: Entity
    frequency: str | None
    frequency_label: str | None
    evidence: str | None
    onset: str | None
    sex: str | None
    modifiers: tuple[str, ...]
    references: tuple[str, ...]
    negated: bool
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject.to_json(), "relation": self.relation, "relation_label": self.relation_label,
                "inverse_label": self.inverse_label, "object": self.object.to_json(), "frequency": self.frequency, "frequency_label": self.frequency_label,
                "evidence": self.evidence, "onset": self.onset, "sex": self.sex, "modifiers": list(self.modifiers),
                "references": list(self.references), "negated": self.negated, "source": self.source}


@dataclass(frozen=True)
class FactPage:
    """A page of a concept's facts: ``total`` facts in all, ``matching`` of them of ``relation``/``direction``,
    ``steps`` from ``offset`` (each starting at the concept)."""

    entity: Entity
    total: int
    matching: int
    offset: int
    relation: str | None
    direction: str
    steps: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity.to_json(), "total": self.total, "matching": self.matching,
                "offset": self.offset, "relation": self.relation, "direction": self.direction,
                "neighbours": [{"relation": s.relation.id, "relation_label": s.relation.label,
                                "direction": s.direction, "id": s.end.id, "label": s.end.label, "text": s.text}
                               for s in self.steps]}  # each as an anchor neighbour (json_output.neighbour_json)


@dataclass(frozen=True)
class ConceptRecord:
    """Everything the concept page shows. ``facts`` is the concept's one fact count (``relations`` splits it);
    ``lacks`` names the sections its sources give nothing for."""

    entity: Entity
    same_as: tuple[Entity, ...]
    types: tuple[Entity, ...]
    definitions: tuple[tuple[str, str | None, str], ...]  # (text, language, member id)
    synonyms: tuple[tuple[str, str | None], ...]
    xrefs: tuple[Xref, ...]
    parents: tuple[Entity, ...]
    children: Page
    facts: int
    relations: tuple[tuple[str, str, str, int], ...]  # (relation id, label, direction, count)
    annotations: Page
    sources: tuple[str, ...]

    @property
    def lacks(self) -> tuple[str, ...]:
        present = {"definition": self.definitions, "synonyms": self.synonyms, "cross-references": self.xrefs,
                   "parents": self.parents, "children": self.children.total,
                   "annotations": self.annotations.total}
        return tuple(name for name, value in present.items() if not value)

    def to_json(self) -> dict[str, Any]:
        return {"entity": self.entity.to_json(), "iri": self.entity.iri,
                "same_as": [e.to_json() for e in self.same_as], "types": [e.to_json() for e in self.types],
                "definitions": [{"text": t, "lang": lang, "source": src} for t, lang, src in self.definitions],
                "synonyms": [{"text": t, "lang": lang} for t, lang in self.synonyms],
                "xrefs": [x.to_json() for x in self.xrefs], "parents": [e.to_json() for e in self.parents],
                "children": self.children.to_json(), "facts": self.facts,
                "relations": [{"relation": r, "label": label, "direction": d, "count": n}
                              for r, label, d, n in self.relations],
                "annotations": self.annotations.to_json(), "sources": list(self.sources), "lacks": list(self.lacks)}


def _check_page(offset: int, limit: int) -> None:
    if offset < 0:
        raise InputError(f"offset must be at least 0, not {offset}")
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")


def _literals(graph: Graph, members: Sequence[str], predicates: Iterable[str]) -> list[tuple[str, str | None, str]]:
    """(text, language, member id) of each literal of ``predicates`` on the members, deduplicated, in order."""
    seen: dict[tuple[str, str | None], str] = {}
    for predicate in predicates:
        for member in members:
            for text, lang in graph.store.literals(member, predicate):
                seen.setdefault((text, lang), compress(member))
    return [(text, lang, member) for (text, lang), member in seen.items()]


def _entities(graph: Graph, iris: Iterable[str]) -> tuple[Entity, ...]:
    wanted = list(dict.fromkeys(iris))
    names = graph.labels(wanted)
    return tuple(sorted((Entity(i, names[i]) for i in wanted), key=lambda e: (e.label.lower(), e.id)))


def _members(graph: Graph, entity: Entity) -> tuple[str, ...]:
    return graph.groups.of(entity.iri)


def _children_iris(graph: Graph, members: Sequence[str]) -> list[str]:
    inside = set(members)
    found = {graph.groups.rep(child) for m in members for _, child in graph.store.links(m, "backward", RDFS_SUBCLASS)}
    return sorted(found - inside)


def children_page(graph: Graph, entity: Entity, offset: int = 0, limit: int = 20) -> Page:
    """The concept's direct subclasses (merged concepts once), by label, ``limit`` from ``offset``."""
    _check_page(offset, limit)
    children = _entities(graph, _children_iris(graph, _members(graph, entity)))
    return Page(len(children), offset, children[offset:offset + limit])


def _annotation_nodes(graph: Graph, members: Sequence[str]) -> list[tuple[str, str, str, str, str | None, bool]]:
    """(node, subject, predicate, object, frequency, negated) of every annotation node whose edge has a member at
    either end, one query for the lot (the same on an endpoint)."""
    values = " ".join(iri_ref(m) for m in members)
    rows = graph.store.select(
        f"SELECT DISTINCT ?a ?s ?p ?o ?f ?n WHERE {{ VALUES ?m {{ {values} }} "
        f"{{ GRAPH ?g {{ ?a {iri_ref(_SUBJECT)} ?m }} }} UNION {{ GRAPH ?g {{ ?a {iri_ref(_OBJECT)} ?m }} }} "
        f"GRAPH ?h {{ ?a {iri_ref(_SUBJECT)} ?s ; {iri_ref(_PREDICATE)} ?p ; {iri_ref(_OBJECT)} ?o }} "
        f"OPTIONAL {{ GRAPH ?i {{ ?a {iri_ref(MKG + 'frequency')} ?f }} }} "
        f"OPTIONAL {{ GRAPH ?j {{ ?a {iri_ref(MKG + 'negated')} ?n }} }} }}")
    found: dict[str, tuple[str, str, str, str, str | None, bool]] = {}
    for r in rows:
        node = r["a"].value
        if node not in found and r["p"].value not in _MATCHES:  # how a match was made: shown as a cross-reference
            negated = r.get("n") is not None and r["n"].value in ("true", "1")
            found[node] = (node, r["s"].value, r["p"].value, r["o"].value,
                           r["f"].value if r.get("f") is not None else None, negated)
    return list(found.values())


def annotations_page(graph: Graph, entity: Entity, offset: int = 0, limit: int = 20) -> Page:
    """The annotations on the concept's edges (where it is the annotated disease or the annotated feature):
    asserted before negated (``NOT`` rows), the most frequent first, then by the other end's label; ``limit`` from
    ``offset``, each with its frequency, evidence, onset, sex, modifiers, references and source graph."""
    _check_page(offset, limit)
    members = _members(graph, entity)
    nodes = _annotation_nodes(graph, members)
    inside = set(members)
    names = graph.labels({x for _, s, _, o, _, _ in nodes for x in (s, o)})
    nodes.sort(key=lambda n: (n[5], -_share_for_order(n[4]), names[n[3] if n[1] in inside else n[1]].lower(),
                              compress(n[2]), n[0]))
    page = nodes[offset:offset + limit]
    details: dict[str, dict[str, list[str]]] = {n[0]: {} for n in page}
    source: dict[str, str] = {}
    if page and graph.store.indexed:  # an index lookup per node (a query with both VALUES took seconds)
        for node, *_ in page:
            for q in graph.store.quads(node, None, None):
                if q.predicate.value in ANNOTATION_FIELDS:
                    details[node].setdefault(ANNOTATION_FIELDS[q.predicate.value], []).append(q.object.value)
                    source[node] = compress(q.graph)
    elif page:
        keys = " ".join(iri_ref(k) for k in ANNOTATION_FIELDS)
        rows = graph.store.select(
            f"SELECT ?a ?k ?v ?g WHERE {{ VALUES ?a {{ {' '.join(iri_ref(n[0]) for n in page)} }} "
            f"GRAPH ?g {{ ?a ?k ?v }} VALUES ?k {{ {keys} }} }}")
        for r in rows:
            details[r["a"].value].setdefault(ANNOTATION_FIELDS[r["k"].value], []).append(r["v"].value)
            source[r["a"].value] = compress(r["g"].value)
    relations = graph.relations({n[2] for n in page})
    items = []
    for node, s, p, o, frequency, negated in page:
        got = details[node]
        items.append(AnnotationRow(
            Entity(s, names[s]), compress(p), relations[p].label,
            relations[p].inverse_label or f"is the {relations[p].label} target of", Entity(o, names[o]), frequency,
            _frequency_label(frequency), _first(got.get("evidence")), _first(got.get("onset")),
            _first(got.get("sex")), tuple(sorted(got.get("modifiers", []))), tuple(sorted(got.get("references", []))),
            negated, source.get(node, "")))
    return Page(len(nodes), offset, tuple(items))


def _first(values: list[str] | None) -> str | None:
    return sorted(values)[0] if values else None


def _share_for_order(frequency: str | None) -> float:
    """How frequent an annotation reads for ordering: an ``n/m`` cohort by the lower end of its 95% Wilson interval
    (1/1 is not "100%" ahead of a very frequent feature seen in hundreds), anything else as ``frequency_value``."""
    from mirage_kg.graph.ranking import frequency_value

    share = frequency_value(frequency)
    n, _, m = (frequency or "").partition("/")
    if not (n.strip().isdigit() and m.strip().isdigit() and int(m) > 0):
        return share
    z, total = 1.96, int(m)
    centre = share + z * z / (2 * total)
    spread = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    return (centre - spread) / (1 + z * z / total)


#: HPO's frequency terms as HPO defines them (the KG may not hold the terms themselves)
FREQUENCY_NAMES = {"HP:0040280": "Obligate (100%)", "HP:0040281": "Very frequent (80-99%)",
                   "HP:0040282": "Frequent (30-79%)", "HP:0040283": "Occasional (5-29%)",
                   "HP:0040284": "Very rare (1-4%)", "HP:0040285": "Excluded (0%)"}


def _frequency_label(frequency: str | None) -> str | None:
    """How a person reads an HPOA frequency: the HPO frequency term's name and range, or ``n/m`` as a share."""
    from mirage_kg.graph.ranking import frequency_value

    if not frequency:
        return None
    if frequency in FREQUENCY_NAMES:
        return FREQUENCY_NAMES[frequency]
    if "/" in frequency:
        return f"{frequency} ({frequency_value(frequency):.0%})"
    return frequency


def _walk_steps(graph: Graph, entity: Entity) -> list[tuple[str, Direction, str, str, str]]:
    """Every fact at the concept's node (a merged concept as one), sorted by relation, direction, neighbour."""
    return graph.walk(entity.iri)


def facts_page(graph: Graph, entity: Entity, relation: str | None = None, direction: str = "both",
               offset: int = 0, limit: int = 50) -> FactPage:
    """The concept's facts, ``limit`` from ``offset``, of ``relation`` (an id, IRI or label; None: all) and
    ``direction`` (forward, backward or both), ordered by relation, direction (forward first) and neighbour label;
    ``total`` counts all its facts, ``matching`` those of the relation and direction asked for."""
    _check_page(offset, limit)
    want = {"out": "forward", "in": "backward"}.get(direction, direction)
    if want not in ("forward", "backward", "both"):
        raise InputError(f"direction must be forward (out), backward (in) or both, not {direction!r}")
    edges = _walk_steps(graph, entity)
    rels = graph.resolve_relations([relation]) if relation else None
    chosen = [e for e in edges if (rels is None or e[0] in rels) and (want == "both" or e[1] == want)]
    names = graph.labels({e[2] for e in chosen})
    chosen.sort(key=lambda e: (compress(e[0]), 0 if e[1] == "forward" else 1, names[e[2]].lower(), compress(e[2])))
    page = chosen[offset:offset + limit]
    ends = graph.labels({x for e in page for x in (e[3], e[4])} | {entity.iri})
    meta = graph.relations({e[0] for e in page})
    steps = tuple(Step(entity if s == entity.iri else Entity(s, ends[s]), meta[p],
                       entity if o == entity.iri else Entity(o, ends[o]), d)
                  for p, d, _, s, o in page)
    return FactPage(entity, len(edges), len(chosen), offset, compress(next(iter(rels))) if rels and len(rels) == 1
                    else relation, want, steps)


def describe(graph: Graph, entity: Entity, limit: int = 20) -> ConceptRecord:
    """The concept's record, with the first ``limit`` children and annotations (page the rest with
    ``children_page`` and ``annotations_page``; facts with ``facts_page``)."""
    _check_page(0, limit)
    members = _members(graph, entity)
    store = graph.store
    inside = set(members)
    names = {label for label, _, _ in _literals(graph, members, (SKOS_PREF, RDFS_LABEL))}
    synonyms = tuple(sorted({(t, lang) for t, lang, _ in _literals(graph, members, (SKOS_ALT,)) if t not in names},
                            key=lambda s: s[0].lower()))
    xref_iris: dict[str, str] = {}
    for kind, predicate in (("exact", SKOS_EXACT), ("close", SKOS_CLOSE)):
        for member in members:
            for direction in ("forward", "backward"):
                for _, other in store.links(member, direction, predicate):
                    if other not in inside:
                        xref_iris.setdefault(other, kind)
    for member in members[1:]:
        xref_iris.setdefault(member, "exact")
    labelled = {i: n for i, n in graph.labels(xref_iris).items() if n != compress(i)}  # held by the KG
    xrefs = [Xref(compress(i), kind, labelled.get(i)) for i, kind in xref_iris.items()]
    xrefs += [Xref(text, "db") for text, _, _ in _literals(graph, members, (DB_XREF,))]
    xrefs.sort(key=lambda x: (x.kind != "exact", x.id))
    parents = _entities(graph, {graph.groups.rep(o) for m in members for _, o in store.links(m, "forward", RDFS_SUBCLASS)}
                        - inside)
    types = _entities(graph, {o for m in members for _, o in store.links(m, "forward", RDF_TYPE)} - {MKG_CONCEPT})
    edges = _walk_steps(graph, entity)
    counts: dict[tuple[str, str], int] = {}
    for p, d, *_ in edges:
        counts[(p, d)] = counts.get((p, d), 0) + 1
    meta = graph.relations({p for p, _ in counts})
    relations = tuple(sorted(((compress(p), meta[p].label, d, n) for (p, d), n in counts.items()),
                             key=lambda r: (-r[3], r[1], r[2])))
    sources = tuple(sorted({compress(q.graph) for m in members for q in store.quads(m, None, None)}))
    same_as = tuple(e for e in _entities(graph, members) if e.iri != entity.iri)
    return ConceptRecord(entity, same_as, types, tuple(_literals(graph, members, DEFINITION_PREDICATES)), synonyms,
                         tuple(xrefs), parents, children_page(graph, entity, 0, limit), len(edges), relations,
                         annotations_page(graph, entity, 0, limit), sources)
