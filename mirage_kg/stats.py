"""What a store holds: facts by relation, entities, and the label and type triples the model adds, counted apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from mirage_kg.namespaces import RDF, RDF_TYPE, RDFS_LABEL, SCHEMA_GRAPH, SKOS_ALT, SKOS_PREF, compress
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.terms import iri_ref

_SYSTEM = f"FILTER(?g NOT IN ({iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}))"
# A fact is an edge between two IRIs that is not a type assertion nor the reification of an annotated edge (the
# annotation node describes a fact, it is not one); labels and types are reported apart.
_NOT_FACTS = ", ".join(iri_ref(RDF + name) for name in ("type", "subject", "predicate", "object"))
_FACTS = f"""SELECT DISTINCT ?s ?p ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }} {_SYSTEM}
  FILTER(isIRI(?o) && ?p NOT IN ({_NOT_FACTS})) }}"""


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


def compute_stats(store: Store) -> Stats:
    """Counts over the data graphs (the schema and manifest graphs are excluded, but listed among the graphs)."""
    rel_rows = store.select(
        f"""SELECT ?p ?n (SAMPLE(?lab) AS ?label) WHERE {{
              {{ SELECT ?p (COUNT(*) AS ?n) WHERE {{ {_FACTS} }} GROUP BY ?p }}
              OPTIONAL {{ ?p {iri_ref(RDFS_LABEL)} ?lab }}
            }} GROUP BY ?p ?n ORDER BY DESC(?n) ?p"""
    )
    relations = [
        {"id": compress(r["p"].value), "label": r["label"].value if "label" in r else compress(r["p"].value),
         "count": int(r["n"].value)}
        for r in rel_rows
    ]
    facts = sum(int(r["count"]) for r in relations)  # type: ignore[arg-type]
    entities = _count(store, f"""SELECT (COUNT(DISTINCT ?e) AS ?n) WHERE {{
        {{ {_FACTS} }} VALUES ?pos {{ 1 2 }} BIND(IF(?pos = 1, ?s, ?o) AS ?e) }}""")
    labels = _count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?p ?o WHERE {{
        GRAPH ?g {{ ?s ?p ?o }} {_SYSTEM} VALUES ?p {{ {iri_ref(SKOS_PREF)} {iri_ref(SKOS_ALT)} {iri_ref(RDFS_LABEL)} }} }} }}""")
    types = _count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?o WHERE {{
        GRAPH ?g {{ ?s {iri_ref(RDF_TYPE)} ?o }} {_SYSTEM} }} }}""")
    distinct_data = _count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?p ?o WHERE {{
        GRAPH ?g {{ ?s ?p ?o }} {_SYSTEM} }} }}""")
    from mirage_kg.releases.provenance import releases

    sources = store.loaded_graphs()
    recorded = releases(store)
    graphs = []
    for name in store.graphs():
        release = recorded.get(name)
        graphs.append({"name": compress(name), "triples": store.triple_count(name), "source": sources.get(name),
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
