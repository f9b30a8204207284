"""What a fact is, in the terms every graph query shares: the predicates that never make one, the types that mark a
declaration rather than a concept, the one vocabulary of edge directions, ``Neighbour`` (a fact edge seen from one
node), and the SPARQL text those rules become (checked IRIs, the non-fact filter, VALUES chunks).

A *fact* is an edge between two concepts: an IRI object, not ``rdf:type`` nor a label, outside the schema and
manifest graphs (as in ``mirage_kg.graph.stats``); relation and class declarations are not concepts. Edge
directions: ``"forward"`` (the edge leaves the node it is read from) and ``"backward"``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple

import pyoxigraph as ox

from mirage_kg.errors import InputError
from mirage_kg.model.namespaces import (MKG, MKG_RELATION, OWL, RDF, RDF_TYPE, RDFS_LABEL, SCHEMA_GRAPH, SKOS_ALT,
                                        SKOS_DEFINITION, SKOS_NOTATION, SKOS_PREF)
from mirage_kg.model.terms import iri_ref
from mirage_kg.store.base import LOADED_AT, LOADED_FROM, MANIFEST_GRAPH, PENDING

#: predicates that never make a fact (their objects are classes, literals or bookkeeping)
NON_FACT_PREDICATES: frozenset[str] = frozenset({
    RDF_TYPE, RDFS_LABEL, SKOS_PREF, SKOS_ALT, SKOS_NOTATION, SKOS_DEFINITION, LOADED_FROM, LOADED_AT, PENDING,
    MKG + "inverseLabel", MKG + "forwardTemplate", MKG + "backwardTemplate",
    # reification of annotated edges (HPO annotations): the node describes an edge, it is not one
    RDF + "subject", RDF + "predicate", RDF + "object",
})
#: types that mark a declaration (a relation, property or ontology), never a concept
DECLARATION_TYPES: tuple[str, ...] = (
    MKG_RELATION, RDF + "Property", OWL + "ObjectProperty", OWL + "DatatypeProperty", OWL + "AnnotationProperty",
    OWL + "TransitiveProperty", OWL + "SymmetricProperty", OWL + "FunctionalProperty", OWL + "Ontology",
)
INVERSE_LABEL = MKG + "inverseLabel"
FORWARD_TEMPLATE = MKG + "forwardTemplate"
BACKWARD_TEMPLATE = MKG + "backwardTemplate"

Direction = Literal["forward", "backward"]
#: one step of a path as the search walks it: (stored subject, relation, stored object, direction walked)
Hop = tuple[str, str, str, Direction]
#: what ``anchor(direction=...)`` accepts (the older "out"/"in" spellings too) -> the one vocabulary
DIRECTIONS = {"forward": "forward", "out": "forward", "backward": "backward", "in": "backward", "both": "both"}
VALUES_CHUNK = 400  # IRIs per VALUES block: keeps queries well under any endpoint's size limit

NOT_FACT = ", ".join(iri_ref(p) for p in sorted(NON_FACT_PREDICATES))
SYSTEM_GRAPHS = f"{iri_ref(SCHEMA_GRAPH)}, {iri_ref(MANIFEST_GRAPH)}"


def checked_iri(iri: str) -> str:
    """``iri`` if it is an absolute IRI that can be written into a query; else a ``MirageError``."""
    iri_ref(iri)  # QueryError for characters that would end or corrupt the token
    try:
        ox.NamedNode(iri)  # RFC 3987 syntax
    except ValueError as exc:
        raise InputError(f"{iri!r} is not a valid absolute IRI ({exc}); give a CURIE with a known prefix or a "
                         "full IRI") from None
    return iri


class Neighbour(NamedTuple):
    """A fact edge seen from one node: the relation, which way it runs from that node, and the node at its other
    end. A named tuple so adjacency lists unpack as ``(relation, direction, node)``."""

    relation: str
    direction: Direction
    node: str


def in_filter(var: str, relations: frozenset[str] | None) -> str:
    """The FILTER that keeps ``var`` to ``relations`` (None: no filter; empty: nothing passes)."""
    if relations is None:
        return ""
    if not relations:
        return "FILTER(false)"
    return f"FILTER({var} IN ({', '.join(iri_ref(r) for r in sorted(relations))}))"


def chunks(items: Sequence[Any], size: int = VALUES_CHUNK) -> Iterable[Sequence[Any]]:
    """``items`` in slices of ``size``: one VALUES block each."""
    for i in range(0, len(items), size):
        yield items[i:i + size]
