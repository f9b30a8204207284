"""What a store holds: facts by relation, entities, and the label and type triples the model adds, counted apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from mirage_kg.model.namespaces import RDF, RDF_TYPE, RDFS_LABEL, SCHEMA_GRAPH, SKOS_ALT, SKOS_PREF, compress
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import iri_ref

_SYSTEM = f"FILTER(?g NOT IN ({iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}))"
# A fact is an edge between two IRIs that is not a type assertion nor the reification of an annotated edge (the
# annotation node describes a fact, it is not one); labels and types are reported apart.
_NOT_FACTS = ", ".join(iri_ref(RDF + name) for name in ("type", "subject", "predicate", "object"))


@dataclass
class Stats:
    triples: int
    facts: int
    entities: int
    relations: list[dict[str, object]]
    labels: int
    types: int
    other: int
    graphs: list[dict[str, object]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "triples": self.triples,
            "facts": self.facts,
            "entities": self.entities,
            "relations": self.relations,
            "labels": self.labels,
            "types": self.types,
            "other": self.other,
            "graphs": self.graphs,
        }


def _count(store: Store, query: str) -> int:
    rows = store.select(query)
    return int(rows[0]["n"].value) if rows and "n" in rows[0] else 0


@dataclass(frozen=True)
class _PredicateCounts:
    """One predicate's triples in a graph: all of them, and those whose object is an IRI."""

    triples: int
    iri_objects: int


def _predicate_counts(store: Store, graph: str, earlier: list[str]) -> dict[str, _PredicateCounts]:
    """Per predicate, the triples of ``graph`` (one aggregate pass the store runs natively); with ``earlier``
    graphs, only those none of them holds too (so that a triple two data graphs share counts once)."""
    unseen = ""
    if earlier:
        others = " ".join(iri_ref(g) for g in earlier)
        unseen = f"FILTER NOT EXISTS {{ VALUES ?h {{ {others} }} GRAPH ?h {{ ?s ?p ?o }} }}"
    rows = store.select(f"""SELECT ?p (COUNT(*) AS ?n) (SUM(IF(isIRI(?o), 1, 0)) AS ?iri) WHERE {{
        GRAPH {iri_ref(graph)} {{ ?s ?p ?o }} {unseen} }} GROUP BY ?p""")
    return {r["p"].value: _PredicateCounts(int(r["n"].value), int(r["iri"].value)) for r in rows}


def compute_stats(store: Store) -> Stats:
    """Counts over the data graphs (the schema and manifest graphs are excluded, but listed among the graphs).

    Each data graph is counted in one aggregate pass per predicate (its triples, and those with an IRI object);
    a later graph counts only the triples no earlier one holds, so the totals are those of the union. Entities
    (the distinct ends of facts) take one more pass over the data graphs."""
    from mirage_kg.progress import progress_bar
    from mirage_kg.releases.provenance import releases

    names = store.graphs()
    data_graphs = [g for g in names if g not in (SCHEMA_GRAPH, MANIFEST_GRAPH)]
    per_graph: dict[str, int] = {}
    union: dict[str, list[int]] = {}
    with progress_bar("counting the KG", total=len(data_graphs) + 1, unit="passes") as advance:
        for index, graph in enumerate(data_graphs):
            counts = _predicate_counts(store, graph, [])
            per_graph[graph] = sum(c.triples for c in counts.values())
            if index:  # a triple an earlier graph holds too is counted there
                counts = _predicate_counts(store, graph, data_graphs[:index])
            for predicate, c in counts.items():
                held = union.setdefault(predicate, [0, 0])
                held[0] += c.triples
                held[1] += c.iri_objects
            advance(1)
        not_facts = {RDF + name for name in ("type", "subject", "predicate", "object")}
        fact_counts = {p: n for p, (_, n) in union.items() if p not in not_facts and n}
        entities = _entities(store, fact_counts, {p: union[p][0] for p in fact_counts})
        advance(1)
    labelled = _relation_labels(store, sorted(fact_counts))
    relations = [{"id": compress(p), "label": labelled.get(p) or compress(p), "count": n}
                 for p, n in sorted(fact_counts.items(), key=lambda item: (-item[1], item[0]))]
    facts = sum(fact_counts.values())
    labels = sum(union.get(p, (0, 0))[0] for p in (SKOS_PREF, SKOS_ALT, RDFS_LABEL))
    types = union.get(RDF_TYPE, (0, 0))[0]
    distinct_data = sum(n for n, _ in union.values())
    sources = store.loaded_graphs()
    recorded = releases(store)
    graphs = []
    for name in names:
        release = recorded.get(name)
        triples = per_graph[name] if name in per_graph else store.triple_count(name)
        graphs.append({"name": compress(name), "triples": triples, "source": sources.get(name),
                       "release": release.to_json() if release is not None else None})
    return Stats(
        triples=store.triple_count(),
        facts=facts,
        entities=entities,
        relations=relations,
        labels=labels,
        types=types,
        other=distinct_data - facts - labels - types,
        graphs=graphs,
    )


def _entities(store: Store, facts: dict[str, int], triples: dict[str, int]) -> int:
    """The distinct subjects and objects of facts. A predicate whose every triple is a fact (the counts say so)
    needs no test of its objects, which the store would decode one by one; only the others are filtered."""
    if not facts:
        return 0
    pure = " ".join(iri_ref(p) for p in sorted(facts) if facts[p] == triples[p])
    mixed = " ".join(iri_ref(p) for p in sorted(facts) if facts[p] != triples[p])
    parts = []
    if pure:
        parts.append(f"{{ VALUES ?p {{ {pure} }} {{ GRAPH ?g {{ ?e ?p ?o }} }} UNION {{ GRAPH ?g {{ ?s ?p ?e }} }} }}")
    if mixed:
        parts.append(f"""{{ VALUES ?p {{ {mixed} }} {{ GRAPH ?g {{ ?e ?p ?o }} FILTER(isIRI(?o)) }} UNION
                      {{ GRAPH ?g {{ ?s ?p ?e }} FILTER(isIRI(?e)) }} }}""")
    return _count(store, f"SELECT (COUNT(DISTINCT ?e) AS ?n) WHERE {{ {' UNION '.join(parts)} {_SYSTEM} }}")


def _relation_labels(store: Store, predicates: list[str]) -> dict[str, str]:
    """A label (``rdfs:label``, any graph) of each of ``predicates``, as ``SAMPLE`` picks one."""
    out: dict[str, str] = {}
    for start in range(0, len(predicates), 500):
        values = " ".join(iri_ref(p) for p in predicates[start:start + 500])
        for row in store.select(f"""SELECT ?p (SAMPLE(?lab) AS ?label) WHERE {{ VALUES ?p {{ {values} }}
                ?p {iri_ref(RDFS_LABEL)} ?lab }} GROUP BY ?p"""):
            if "label" in row:
                out[row["p"].value] = row["label"].value
    return out
