"""Paths as evidence: raw paths (stored triples, each with the direction it is walked) made into ``Path`` records
whose steps carry labels and relation readings (so they read as sentences, ``Step.text``), whether a cited path's
triples are all in the store, and which sources (named graphs) hold a triple."""

from __future__ import annotations

from collections.abc import Iterable

from mirage_kg.graph.entities import EntityGraph
from mirage_kg.graph.facts import SYSTEM_GRAPHS, Hop, chunks
from mirage_kg.model.records import Entity, Path, Step
from mirage_kg.model.terms import iri_ref
from mirage_kg.store.base import Store

#: a raw path: (subject, relation, object, direction walked) per step, the ends stored as they are in the store
RawPath = tuple[Hop, ...]


def materialise(graph: EntityGraph, raw_paths: list[RawPath]) -> list[Path]:
    """``raw_paths`` as ``Path`` records: each node with its label, each relation with its readings."""
    iris = {n for path in raw_paths for s, _, o, _ in path for n in (s, o)}
    names = graph.labels(iris)
    relmeta = graph.relations({p for path in raw_paths for _, p, _, _ in path})
    return [Path(tuple(Step(Entity(s, names[s]), relmeta[p], Entity(o, names[o]), d)
                       for s, p, o, d in path)) for path in raw_paths]


def path_exists(store: Store, path: Path) -> bool:
    """Whether every step's triple is in the store (a cited path must be real)."""
    if not path.steps:
        return False
    if store.indexed:
        return all(next(store.quads(s.subject.iri, s.relation.iri, s.object.iri), None) is not None
                   for s in path.steps)
    body = " ".join(f"GRAPH ?g{i} {{ {iri_ref(s.subject.iri)} {iri_ref(s.relation.iri)} {iri_ref(s.object.iri)} }}"
                    for i, s in enumerate(path.steps))
    return store.ask(f"ASK {{ {body} }}")


def triple_sources(store: Store, triples: Iterable[tuple[str, str, str]]
                   ) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """The named graphs (sources) that hold each triple, the schema and manifest graphs left out."""
    wanted = list(dict.fromkeys(triples))
    out: dict[tuple[str, str, str], set[str]] = {t: set() for t in wanted}
    for chunk in chunks(wanted, 200):
        values = " ".join(f"({iri_ref(s)} {iri_ref(p)} {iri_ref(o)})" for s, p, o in chunk)
        rows = store.select(
            f"SELECT ?s ?p ?o ?g WHERE {{ VALUES (?s ?p ?o) {{ {values} }} GRAPH ?g {{ ?s ?p ?o }} "
            f"FILTER(?g NOT IN ({SYSTEM_GRAPHS})) }}")
        for r in rows:
            out[(r["s"].value, r["p"].value, r["o"].value)].add(r["g"].value)
    return {t: tuple(sorted(g)) for t, g in out.items()}


def verbalise(item: Step | Path) -> str:
    """The sentence(s) for a step or a path, read in its walking direction."""
    return item.text
