"""Cross-source equivalence by label: disease concepts of different sources (OMIM, Orphanet, DECIPHER, MONDO,
ICD-10-CM) whose normalised labels are the same become ``skos:exactMatch`` (or ``skos:closeMatch``) pairs, each
with a reified record of the label it rests on and the kind of match, in a named graph of their own.

Used where the sources themselves give no mapping (MONDO as cellxgene ships it has no xrefs; HPOA names OMIM and
Orphanet diseases but never maps one to the other). A pair is exact only when the label picks out one concept in
each of the two sources and joining them never puts two concepts of one source in the same group; every other
shared label is a close match, which graph queries walk as an edge but never merge."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from mirage_kg.loaders.base import literal_nt
from mirage_kg.loaders.nt_terms import SOURCE_VERSION
from mirage_kg.model.namespaces import ENTITY, GRAPH, MKG, RDF, SKOS_ALT, SKOS_CLOSE, SKOS_EXACT, SKOS_PREF, compress
from mirage_kg.store.base import Store
from mirage_kg.model.terms import iri_ref

#: the prefixes whose concepts are diseases (HPO terms are phenotypes: never matched to a disease by name)
DISEASE_PREFIXES = ("MONDO", "OMIM", "ORPHA", "DECIPHER", "ICD10CM")
MATCHED_LABEL = MKG + "matchedLabel"
MATCH_KIND = MKG + "matchKind"
ANNOTATION_NS = ENTITY + "annotation/label-match/"
#: a label held by more concepts than this is a generic heading ("Other specified disorders"), not a name
MAX_HOLDERS = 6


@dataclass(frozen=True)
class LabelMatch:
    """One mapping: ``subject`` and ``object`` (IRIs) share ``label`` (normalised); ``kind`` says which labels
    (``prefLabel=prefLabel`` or ``prefLabel=altLabel``); ``exact`` picks skos:exactMatch over closeMatch."""

    subject: str
    object: str
    label: str
    kind: str
    exact: bool


def label_match_graph_name(source_graphs: Sequence[str]) -> str:
    """The graph of the matches between these source graphs: named by a digest of their names (releases)."""
    digest = hashlib.sha256("\n".join(sorted(source_graphs)).encode("utf-8")).hexdigest()[:12]
    return GRAPH + "mappings/label-match/" + digest


def _source_of(iri: str) -> str | None:
    curie = compress(iri)
    prefix, sep, local = curie.partition(":")
    if not sep or prefix not in DISEASE_PREFIXES:
        return None
    if prefix == "ICD10CM" and (local.startswith("chapter-") or "-" in local):
        return None  # chapters and blocks are headings, not diseases
    return prefix


def disease_labels(store: Store, graphs: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """IRI -> (preferred labels, synonyms) of the disease concepts in ``graphs``."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for graph in graphs:
        rows = store.select_all(
            f"SELECT ?e ?k ?l WHERE {{ GRAPH {iri_ref(graph)} {{ ?e ?k ?l }} "
            f"VALUES ?k {{ {iri_ref(SKOS_PREF)} {iri_ref(SKOS_ALT)} }} FILTER(isIRI(?e) && isLiteral(?l)) }}")
        for row in rows:
            iri = row["e"].value
            if _source_of(iri) is None:
                continue
            pref, alt = out.setdefault(iri, ([], []))
            (pref if row["k"].value == SKOS_PREF else alt).append(row["l"].value)
    return out


def find_label_matches(labels: dict[str, tuple[list[str], list[str]]]) -> list[LabelMatch]:
    """The matches between concepts of different sources, exact first (preferred label on both sides, then a
    preferred label against a synonym), deterministic."""
    from mirage_kg.linking.text import normalise

    holders: dict[str, dict[str, set[str]]] = {}  # key -> source -> concepts holding it (any label)
    pref_of: dict[str, set[str]] = {}  # key -> concepts whose preferred label it is
    for iri in sorted(labels):
        pref, alt = labels[iri]
        source = _source_of(iri)
        assert source is not None
        for text in pref:
            key = normalise(text)
            if key:
                pref_of.setdefault(key, set()).add(iri)
                holders.setdefault(key, {}).setdefault(source, set()).add(iri)
        for text in alt:
            key = normalise(text)
            if key:
                holders.setdefault(key, {}).setdefault(source, set()).add(iri)
    parent: dict[str, str] = {}
    sources_in: dict[str, set[str]] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    def join(a: str, b: str) -> bool:
        """Union a's and b's groups unless that would hold two concepts of one source."""
        ra, rb = root(a), root(b)
        if ra == rb:
            return True
        sa = sources_in.setdefault(ra, {_source_of(a) or ""})
        sb = sources_in.setdefault(rb, {_source_of(b) or ""})
        if sa & sb:
            return False
        parent[rb] = ra
        sources_in[ra] = sa | sb
        return True

    candidates: list[tuple[int, str, str, str, str]] = []  # (pass, key, a, b, kind)
    for key in sorted(pref_of):
        per_source = holders[key]
        if sum(len(v) for v in per_source.values()) > MAX_HOLDERS or len(per_source) < 2:
            continue
        for a in sorted(pref_of[key]):
            for source, held in sorted(per_source.items()):
                if source == _source_of(a):
                    continue
                for b in sorted(held):
                    both_pref = b in pref_of[key]
                    if both_pref and b < a:
                        continue  # each preferred pair once
                    candidates.append((0 if both_pref else 1, key, a, b,
                                       "prefLabel=prefLabel" if both_pref else "prefLabel=altLabel"))
    out: list[LabelMatch] = []
    for rank, key, a, b, kind in sorted(candidates):
        unique = len(holders[key].get(_source_of(a) or "", ())) == 1 and len(holders[key][_source_of(b) or ""]) == 1
        exact = unique and join(a, b)
        out.append(LabelMatch(a, b, key, kind, exact))
    return out


def label_match_lines(matches: Sequence[LabelMatch], graph: str, described: str) -> Iterator[str]:
    """N-Triples: each match as a mapping edge plus a reified record (rdf:subject/predicate/object, the label and
    the kind of match), and the graph's description."""
    yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(described)} .\n"
    ns = ANNOTATION_NS + graph.rsplit("/", 1)[-1] + "/"
    subject, predicate, obj = iri_ref(RDF + "subject"), iri_ref(RDF + "predicate"), iri_ref(RDF + "object")
    label, kind = iri_ref(MATCHED_LABEL), iri_ref(MATCH_KIND)
    for number, match in enumerate(matches, 1):
        relation = iri_ref(SKOS_EXACT if match.exact else SKOS_CLOSE)
        a, b, node = iri_ref(match.subject), iri_ref(match.object), f"<{ns}{number}>"
        yield (f"{a} {relation} {b} .\n{node} {subject} {a} .\n{node} {predicate} {relation} .\n{node} {obj} {b} .\n"
               f"{node} {label} {literal_nt(match.label)} .\n{node} {kind} {literal_nt(match.kind)} .\n")
