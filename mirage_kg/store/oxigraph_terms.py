"""pyoxigraph's terms and formats as the stores speak them: a native term as a plain ``Term`` and back, and the
media types pyoxigraph parses and writes (used by the embedded store and by an endpoint's loads and exports)."""

from __future__ import annotations

import pyoxigraph as ox

from mirage_kg.model.terms import Term

#: media type -> pyoxigraph's parser and serializer format (what ``RDF_FORMATS`` names), for every store that
#: parses or writes RDF with pyoxigraph
OXIGRAPH_FORMATS = {
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "application/n-quads": ox.RdfFormat.N_QUADS,
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/trig": ox.RdfFormat.TRIG,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}
#: the media types whose statements carry their own graph name
QUAD_FORMATS = {"application/n-quads", "application/trig"}
_XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"


def to_term(node: object) -> Term:
    """A pyoxigraph term as a plain ``Term``."""
    if isinstance(node, ox.NamedNode):
        return Term("uri", node.value)
    if isinstance(node, ox.Literal):
        dt = node.datatype.value if node.datatype is not None else None
        # a plain string has no datatype in SPARQL JSON results: the same Term whichever store answered
        return Term("literal", node.value, node.language, None if node.language or dt == _XSD_STRING else dt)
    if isinstance(node, ox.BlankNode):
        return Term("bnode", node.value)
    return Term("triple", str(node))


def to_node(term: Term) -> ox.NamedNode | ox.Literal | ox.BlankNode:
    if term.kind == "uri":
        return ox.NamedNode(term.value)
    if term.kind == "bnode":
        return ox.BlankNode(term.value)
    if term.lang:
        return ox.Literal(term.value, language=term.lang)
    if term.datatype:
        return ox.Literal(term.value, datatype=ox.NamedNode(term.datatype))
    return ox.Literal(term.value)
