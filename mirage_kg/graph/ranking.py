"""Clinically meaningful ranking: neighbours by specificity (inverse document frequency of the neighbour in the
KG) weighted by how often the source says the feature occurs (HPOA frequencies), and bridge paths by how specific
their intermediate nodes are, so hallmark features rise above generic findings and hubs (inheritance modes,
top-level classes) sink. Seen from the feature, the entities that annotate it (a phenotype's diseases) rank by how
often they have it, summed over the sources that agree, times how well attested they are (their degree): the
diseases where the feature is a hallmark come before rare syndromes that merely list it.

``rank="degree"`` keeps the older order: best-connected neighbours first, paths by node ids."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from mirage_kg.model.namespaces import MKG, RDF
from mirage_kg.store.base import Store
from mirage_kg.model.terms import Term, iri_ref

RANKINGS = ("specificity", "degree")
#: the version of the specificity ranking, part of what a filed hub anchor depends on
RANKING_VERSION = 2
FREQUENCY = MKG + "frequency"

#: HPO's frequency terms (HP:0040279 subtree) -> the middle of the range each stands for
FREQUENCY_TERMS = {
    "HP:0040280": 1.0,  # obligate (100%)
    "HP:0040281": 0.9,  # very frequent (80-99%)
    "HP:0040282": 0.55,  # frequent (30-79%)
    "HP:0040283": 0.17,  # occasional (5-29%)
    "HP:0040284": 0.025,  # very rare (1-4%)
    "HP:0040285": 0.0,  # excluded (0%)
}
#: an annotation that gives no frequency: as likely as not
UNKNOWN_FREQUENCY = 0.5
_FRACTION = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def frequency_value(text: str | None) -> float:
    """An HPOA frequency (an HPO frequency term, ``n/m`` or ``x%``) as a share in [0, 1]; unknown -> 0.5."""
    if not text:
        return UNKNOWN_FREQUENCY
    text = text.strip()
    if text in FREQUENCY_TERMS:
        return FREQUENCY_TERMS[text]
    match = _FRACTION.match(text)
    if match and int(match.group(2)) > 0:
        return min(int(match.group(1)) / int(match.group(2)), 1.0)
    match = _PERCENT.match(text)
    if match:
        return min(float(match.group(1)) / 100.0, 1.0)
    return UNKNOWN_FREQUENCY


def specificity(degree: int, concepts: int) -> float:
    """Inverse document frequency of a node of ``degree`` among ``concepts`` nodes: rare nodes say more."""
    return math.log((concepts + 1) / (degree + 1)) + 1e-6


def annotation_frequencies(store: Store, concepts: Sequence[str]) -> dict[tuple[str, str, str], float]:
    """(subject, relation, object) -> the highest frequency among the annotation records (rdf:subject /
    rdf:predicate / rdf:object with ``MKG:frequency``) of the edges at ``concepts`` (as subject or object);
    edges with no record are absent."""
    out: dict[tuple[str, str, str], float] = {}
    if store.indexed:  # walk the index: the records at each concept, then each record's fields
        def value(node: Term, graph: str, predicate: str) -> str | None:
            found = next(store.quads(node, predicate, None, graph), None)
            return found.object.value if found is not None else None

        records = {(q.subject, q.graph) for concept in concepts for end in (RDF + "subject", RDF + "object")
                   for q in store.quads(None, end, concept)}
        for node, graph in sorted(records, key=lambda r: (r[0].value, r[1])):
            subject, relation = value(node, graph, RDF + "subject"), value(node, graph, RDF + "predicate")
            target = value(node, graph, RDF + "object")
            if subject is None or relation is None or target is None:
                continue
            key = (subject, relation, target)
            out[key] = max(out.get(key, 0.0), frequency_value(value(node, graph, FREQUENCY)))
        return out
    for start in range(0, len(concepts), 200):
        values = " ".join(iri_ref(c) for c in concepts[start:start + 200])
        record = (f"?a {iri_ref(RDF + 'subject')} ?s ; {iri_ref(RDF + 'predicate')} ?p ; "
                  f"{iri_ref(RDF + 'object')} ?o . OPTIONAL {{ ?a {iri_ref(FREQUENCY)} ?f }}")
        rows = store.select(
            f"SELECT ?s ?p ?o ?f WHERE {{ VALUES ?c {{ {values} }} GRAPH ?g {{ {record} }} "
            f"FILTER(?s = ?c || ?o = ?c) }}")
        for r in rows:
            key = (r["s"].value, r["p"].value, r["o"].value)
            out[key] = max(out.get(key, 0.0), frequency_value(r["f"].value if "f" in r else None))
    return out


def neighbour_scores(edges: Iterable[tuple[str, str, str]], degree: Mapping[str, int], concepts: int,
                     frequencies: Mapping[tuple[str, str, str], float], members: Iterable[str],
                     node_of: Callable[[str], str] = lambda iri: iri) -> dict[tuple[str, str, str], float]:
    """Scores for anchor's neighbours, ``edges`` being (relation, direction, neighbour node) at the anchor whose
    stored concepts are ``members`` (several when sources are merged; ``node_of`` maps a concept to its node).
    The support of an annotated edge is the sum, over the annotation records of it (one per source or member), of
    the frequency each gives (so what several sources agree on ranks higher); 1 for an edge with no annotation.
    An edge to a feature (the anchor is the annotated entity, or nothing is annotated) scores the feature's
    specificity times its support: hallmark features first. An edge from an entity that annotates the anchor as
    its feature (a disease seen from its phenotype) scores the support times ``log(1 + degree)`` of that entity:
    the diseases that have the feature often and are well attested first, not the rarest syndrome listing it."""
    center = set(members)
    support: dict[tuple[str, str, str], dict[str, float]] = {}
    annotates_center: set[tuple[str, str, str]] = set()
    for (subject, relation, obj), frequency in frequencies.items():
        if subject in center:  # the anchor's (merged) members annotating one feature: summed over the members
            key = (relation, "forward", node_of(obj))
        elif obj in center:  # the entities annotating the anchor: summed over each one's (merged) members
            key = (relation, "backward", node_of(subject))
            annotates_center.add(key)
        else:
            continue
        per_member = support.setdefault(key, {})
        per_member[subject] = max(per_member.get(subject, 0.0), frequency)

    def score(key: tuple[str, str, str]) -> float:
        held = sum(support[key].values()) if key in support else 1.0
        if key in annotates_center:
            return held * math.log1p(degree.get(key[2], 0))
        return specificity(degree.get(key[2], 0), concepts) * held

    return {key: score(key) for key in edges}


def path_cost(inner_degrees: Sequence[int]) -> float:
    """How hub-like a path's intermediate nodes are: the sum of their log degrees (lower is more specific)."""
    return sum(math.log1p(d) for d in inner_degrees)
