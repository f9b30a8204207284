"""``compute_stats`` counts per graph in aggregate passes, yet its totals are those of the union of the data
graphs: checked against plain DISTINCT queries over the union, on graphs that share triples, a predicate with
IRI, literal and blank-node objects, literal types and reification triples (embedded store and SPARQL endpoint)."""

from __future__ import annotations

from pathlib import Path

from mirage_kg.loaders import get_loader
from mirage_kg.loaders.base import LoadOptions, LoadReport
from mirage_kg.model.namespaces import RDF, RDF_TYPE, RDFS_LABEL, SCHEMA_GRAPH, SKOS_ALT, SKOS_PREF, compress
from mirage_kg.graph.stats import compute_stats
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.model.terms import iri_ref

EX = "https://example.org/"
ONE, TWO, THREE = EX + "graph/one", EX + "graph/two", EX + "graph/three"
SYSTEM = f"FILTER(?g NOT IN ({iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}))"
NOT_FACTS = ", ".join(iri_ref(RDF + name) for name in ("type", "subject", "predicate", "object"))


def _fill(store: Store, folder: Path) -> None:
    """Three data graphs, loaded as a user loads them (a SPARQL store shows only graphs its manifest records)."""
    shared = f"""<{EX}a> <{EX}treats> <{EX}b> . <{EX}a> <{SKOS_PREF}> "A"@en . <{EX}a> <{RDF_TYPE}> <{EX}Drug> ."""
    graphs = {
        ONE: f"""{shared} <{EX}b> <{EX}treats> <{EX}c> . <{EX}c> <{EX}note> <{EX}d> . <{EX}c> <{EX}note> "free text" .
                 <{EX}e> <{EX}note> [] . <{EX}b> <{SKOS_ALT}> "bee" .""",
        TWO: f"""{shared} <{EX}c> <{EX}note> <{EX}d> . <{EX}f> <{EX}causes> <{EX}a> . <{EX}f> <{RDF_TYPE}> "not a class" .
                 <{EX}r> <{RDF}subject> <{EX}f> . <{EX}f> <{RDFS_LABEL}> "F" .""",
        THREE: f"""<{EX}f> <{EX}causes> <{EX}a> . <{EX}g> <{EX}causes> <{EX}h> . <{EX}b> <{SKOS_ALT}> "bee" .""",
    }
    for number, (graph, text) in enumerate(graphs.items()):
        path = folder / f"part{number}.ttl"
        path.write_text(text + "\n", encoding="utf-8")
        get_loader("rdf").load(store, path, LoadOptions(graph=graph), LoadReport())


def _reference_count(store: Store, query: str) -> int:
    rows = store.select(query)
    return int(rows[0]["n"].value)


def test_counts_are_those_of_the_union(store: Store, tmp_path: Path) -> None:
    _fill(store, tmp_path)
    result = compute_stats(store)
    facts = f"""SELECT DISTINCT ?s ?p ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }} {SYSTEM}
                FILTER(isIRI(?o) && ?p NOT IN ({NOT_FACTS})) }}"""
    by_relation = {r["p"].value: int(r["n"].value) for r in store.select(
        f"SELECT ?p (COUNT(*) AS ?n) WHERE {{ {facts} }} GROUP BY ?p")}
    assert {EX + "treats": 2, EX + "note": 1, EX + "causes": 2} == by_relation
    assert {r["id"]: r["count"] for r in result.relations} == {compress(p): n for p, n in by_relation.items()}
    assert [r["count"] for r in result.relations] == [2, 2, 1]  # most facts first
    assert result.facts == 5
    entities = _reference_count(store, f"""SELECT (COUNT(DISTINCT ?e) AS ?n) WHERE {{ {{ {facts} }}
        VALUES ?pos {{ 1 2 }} BIND(IF(?pos = 1, ?s, ?o) AS ?e) }}""")
    assert result.entities == entities == 7  # a b c d f g h
    labels = _reference_count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?p ?o WHERE {{
        GRAPH ?g {{ ?s ?p ?o }} {SYSTEM} VALUES ?p {{ {iri_ref(SKOS_PREF)} {iri_ref(SKOS_ALT)} {iri_ref(RDFS_LABEL)} }}
        }} }}""")
    assert result.labels == labels == 3
    types = _reference_count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?o WHERE {{
        GRAPH ?g {{ ?s {iri_ref(RDF_TYPE)} ?o }} {SYSTEM} }} }}""")
    data = _reference_count(store, f"""SELECT (COUNT(*) AS ?n) WHERE {{ SELECT DISTINCT ?s ?p ?o WHERE {{
        GRAPH ?g {{ ?s ?p ?o }} {SYSTEM} }} }}""")
    assert result.types == types == 2
    assert result.other == data - result.facts - labels - types == 3  # the literal note, the blank one, rdf:subject
    per_graph = {g["name"]: g["triples"] for g in result.graphs}
    for graph in (ONE, TWO, THREE):
        assert per_graph[compress(graph)] == store.triple_count(graph)
    assert result.triples == store.triple_count()


def test_no_facts_no_entities(store: Store, tmp_path: Path) -> None:
    (tmp_path / "labels.ttl").write_text(f'<{EX}a> <{SKOS_PREF}> "A"@en .\n', encoding="utf-8")
    get_loader("rdf").load(store, tmp_path / "labels.ttl", LoadOptions(graph=ONE), LoadReport())
    result = compute_stats(store)
    assert (result.facts, result.entities, result.labels, result.relations) == (0, 0, 1, [])


