"""RDF terms as plain values, the same whichever store produced them, and safe SPARQL serialisation.

Ids and labels never reach a query by string pasting: ``iri_ref`` and ``literal`` escape every character that
could end a token (the SPARQL 1.1 grammar's IRIREF and STRING_LITERAL_QUOTE productions), and reject what cannot
be escaped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as TypingLiteral

from mirage_kg.errors import QueryError

TermKind = TypingLiteral["uri", "literal", "bnode", "triple"]


@dataclass(frozen=True, slots=True)
class Term:
    """One RDF term as a SPARQL JSON result describes it."""

    kind: TermKind
    value: str
    lang: str | None = None
    datatype: str | None = None

    def __str__(self) -> str:
        return self.value

    def sparql(self) -> str:
        """The term written safely into SPARQL or N-Triples."""
        if self.kind == "uri":
            return iri_ref(self.value)
        if self.kind == "literal":
            return literal(self.value, lang=self.lang, datatype=self.datatype)
        if self.kind == "bnode":
            return f"_:{self.value}"
        raise QueryError(f"cannot write a {self.kind} term into a query")


# Characters the IRIREF production forbids; we refuse rather than guess a repair.
_IRI_FORBIDDEN = set('<>"{}|^`\\ ') | {chr(c) for c in range(0x21)}


def iri_ref(iri: str) -> str:
    """``<iri>`` for SPARQL/N-Triples, refusing characters that would end or corrupt the token."""
    bad = _IRI_FORBIDDEN.intersection(iri)
    if bad or not iri:
        raise QueryError(f"not a valid IRI for a query: {iri!r} (contains {''.join(sorted(bad))!r})")
    return f"<{iri}>"


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_ESCAPE_TABLE = str.maketrans(_ESCAPES)


def escape_string(text: str) -> str:
    """Escape a string for the inside of a double-quoted SPARQL or N-Triples literal."""
    return text.translate(_ESCAPE_TABLE)


def literal(value: str, *, lang: str | None = None, datatype: str | None = None) -> str:
    """A double-quoted literal with escapes, optional language tag or datatype."""
    body = f'"{escape_string(value)}"'
    if lang:
        if not all(part.isalnum() for part in lang.split("-")):
            raise QueryError(f"not a valid language tag: {lang!r}")
        return f"{body}@{lang}"
    if datatype and datatype != "http://www.w3.org/2001/XMLSchema#string":
        return f"{body}^^{iri_ref(datatype)}"
    return body
