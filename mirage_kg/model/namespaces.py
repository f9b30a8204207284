"""CURIEs in, CURIEs out: the prefix map shipped in ``ontologies/prefixes.json`` and the IRI <-> CURIE mapping."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from mirage_kg.errors import InputError

_HERE = Path(__file__).resolve().parent


def ontologies_dir() -> Path:
    """The shipped ``ontologies/`` folder (inside the wheel, or beside the package in a source checkout)."""
    for candidate in (_HERE.parent / "ontologies", _HERE.parent.parent / "ontologies"):
        if (candidate / "schema.ttl").is_file():
            return candidate
    raise FileNotFoundError("the shipped ontologies/ folder is missing; reinstall mirage-kg")


MKG = "https://w3id.org/mirage-kg/schema#"
ENTITY = "https://w3id.org/mirage-kg/entity/"
GRAPH = "https://w3id.org/mirage-kg/graph/"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
XSD = "http://www.w3.org/2001/XMLSchema#"

RDF_TYPE = RDF + "type"
RDFS_LABEL = RDFS + "label"
RDFS_SUBCLASS = RDFS + "subClassOf"
SKOS_PREF = SKOS + "prefLabel"
SKOS_ALT = SKOS + "altLabel"
SKOS_NOTATION = SKOS + "notation"
SKOS_DEFINITION = SKOS + "definition"
SKOS_EXACT = SKOS + "exactMatch"
FULLY_SPECIFIED_NAME = MKG + "fullySpecifiedName"  # SNOMED CT FSNs (their semantic tag marks the hierarchy)
SKOS_CLOSE = SKOS + "closeMatch"
MKG_CONCEPT = MKG + "Concept"
MKG_RELATION = MKG + "Relation"
SCHEMA_GRAPH = GRAPH + "schema"


@lru_cache(maxsize=1)
def prefixes() -> dict[str, str]:
    """Prefix -> namespace IRI, longest namespaces first so that compression picks the most specific."""
    raw: dict[str, str] = json.loads((ontologies_dir() / "prefixes.json").read_text(encoding="utf-8"))
    return dict(sorted(raw.items(), key=lambda kv: -len(kv[1])))


# scheme ":" then no characters an IRI may not hold (RFC 3987, loosely)
_ABSOLUTE_IRI = re.compile(r'[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>"{}|\\^`]*')


def expand(curie_or_iri: str) -> str:
    """``HP:0001945`` -> full IRI; ``<iri>`` and ``http(s)://`` IRIs pass through; anything else is an error."""
    text = curie_or_iri.strip()
    if text.startswith("<") and text.endswith(">"):
        if not _ABSOLUTE_IRI.fullmatch(text[1:-1]):  # "<38>" in free text is not an id
            raise InputError(f"{curie_or_iri!r} is not an absolute IRI (such as <http://example.org/x>)")
        return text[1:-1]
    if text.startswith(("http://", "https://", "urn:")):
        return text
    prefix, sep, local = text.partition(":")
    if sep:
        pmap = prefixes()
        if prefix in pmap:
            return pmap[prefix] + local
        for known, ns in pmap.items():  # tolerate hp:0001945, Hp:...
            if known.lower() == prefix.lower():
                return ns + local
    raise InputError(f"{curie_or_iri!r} is not a known CURIE or IRI (known prefixes: {', '.join(sorted(prefixes()))})")


def is_identifier(text: str) -> bool:
    """Whether ``text`` looks like a CURIE with a known prefix or an absolute IRI (not free text)."""
    if ":" not in text:  # every CURIE and IRI has one: free text is told apart without raising an error
        return False
    try:
        expand(text)
    except InputError:
        return False
    return " " not in text.strip()


@lru_cache(maxsize=1 << 15)  # ids are compressed again and again (every sort of bridge's paths): ~5 MB at most
def compress(iri: str) -> str:
    """Full IRI -> CURIE when a known namespace matches, else the IRI itself: the first namespace, longest
    first, that ``iri`` starts with and goes on past."""
    width, candidates = _namespaces_by_head()
    for prefix, ns in candidates.get(iri[:width], ()):
        if iri.startswith(ns) and len(iri) > len(ns):
            return f"{prefix}:{iri[len(ns):]}"
    return iri


@lru_cache(maxsize=1)
def _namespaces_by_head() -> tuple[int, dict[str, list[tuple[str, str]]]]:
    """The namespaces grouped by their first ``width`` characters (the shortest namespace's length), each group
    in ``prefixes()`` order: a new node's id is tested against the few that can match, not all (~20 tests)."""
    width = min((len(ns) for ns in prefixes().values()), default=0)
    groups: dict[str, list[tuple[str, str]]] = {}
    for prefix, ns in prefixes().items():
        groups.setdefault(ns[:width], []).append((prefix, ns))
    return width, groups


# Characters kept as they are in a minted IRI's local part; the rest is percent-encoded.
_SAFE = "-._~()!*,;=+$@'"


def mint(namespace: str, name: str) -> str:
    """An IRI for ``name`` in ``namespace``: spaces become ``_``, unsafe characters are percent-encoded."""
    return namespace + quote(name.strip().replace(" ", "_"), safe=_SAFE)
