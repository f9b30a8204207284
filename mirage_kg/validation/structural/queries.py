"""What the structural checks' SPARQL is made of: the prefixes, the filter that keeps to the data graphs, the
vocabularies that tell relations, concepts and mappings apart, VALUES blocks, and how examples are ordered and
shown. Data means every named graph except the schema and manifest graphs, as in ``mirage_kg.graph.stats``."""

from __future__ import annotations

from collections.abc import Iterable

from mirage_kg.model.namespaces import MKG, MKG_RELATION, OWL, RDF, RDFS, SCHEMA_GRAPH, SKOS, XSD, compress
from mirage_kg.model.terms import Term, iri_ref
from mirage_kg.store.base import MANIFEST_GRAPH
from mirage_kg.validation.report import Example

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
# What a described IRI has: a label or a type.
DESCRIBING = (SKOS + "prefLabel", RDFS + "label", SKOS + "altLabel", RDF + "type")


def values(var: str, iris: Iterable[str]) -> str:
    """A VALUES block binding ``?var`` to IRIs (safely escaped)."""
    return f"VALUES ?{var} {{ {' '.join(iri_ref(i) for i in iris)} }}"


def values_terms(var: str, terms: Iterable[Term]) -> str:
    """A VALUES block binding ``?var`` to terms (literals included), each written as SPARQL."""
    return f"VALUES ?{var} {{ {' '.join(t.sparql() for t in terms)} }}"


_NUMERIC = {XSD + t for t in ("integer", "decimal", "double", "float", "int", "long")}


def sort_key(term: Term | None) -> tuple[int, float, str]:
    if term is None:
        return (0, 0.0, "")
    if term.kind == "literal" and term.datatype in _NUMERIC:
        return (1, float(term.value), "")
    return (2, 0.0, term.value)


def quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return f'"{text[:limit]}..."' if len(text) > limit else f'"{text}"'


def example(iri: str, detail: str) -> Example:
    return Example(id=compress(iri), detail=detail, iri=iri)
