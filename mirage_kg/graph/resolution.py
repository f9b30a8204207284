"""Name resolution that explains itself: a CURIE, an IRI or a name -> the concept it stands for, how it was found
(id, exact, synonym, normalised, fuzzy, embedding) and, for a merged concept, which ids of other sources it
stands for too. The CLI prints the explanation and puts it in its JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirage_kg.graph.concepts import rank_key
from mirage_kg.model.records import Entity
from mirage_kg.model.namespaces import compress
from mirage_kg.model.terms import iri_ref

if TYPE_CHECKING:
    from mirage_kg.kg import KnowledgeGraph


@dataclass(frozen=True)
class Resolution:
    """What a name or id resolved to, and how: ``method`` is id, exact, synonym, normalised, fuzzy or embedding;
    ``same_as`` lists the other members of its merged concept (then the output says "merged")."""

    text: str
    entity: Entity
    method: str
    score: float = 1.0
    same_as: tuple[Entity, ...] = ()

    @property
    def merged(self) -> bool:
        return bool(self.same_as)

    @property
    def ids(self) -> tuple[str, ...]:
        return (self.entity.id, *(e.id for e in self.same_as))

    def describe(self) -> str:
        how = f"{self.method} match" if self.method != "id" else "id"
        if self.method in ("fuzzy", "embedding"):
            how += f", score {self.score:.2f}"
        line = f"{self.text!r} -> {self.entity.id} ({self.entity.label}) by {how}"
        if self.same_as:
            line += "; merged concept: " + ", ".join(f"{e.id} ({e.label})" for e in self.same_as)
        return line

    def to_json(self) -> dict[str, object]:
        return {"text": self.text, "id": self.entity.id, "label": self.entity.label, "method": self.method,
                "score": round(self.score, 4), "merged": self.merged,
                "same_as": [e.to_json() for e in self.same_as]}


#: two links closer than this are a tie a user must break; wider gaps are the linker's confident choice
AMBIGUITY_MARGIN = 0.02


def resolve_name(kg: KnowledgeGraph, text: str, margin: float = AMBIGUITY_MARGIN) -> Resolution:
    """A CURIE, an IRI or a name -> what it stands for, and how it was found. A name that is exactly the label of
    one concept, or of concepts that are all one merged concept, resolves to it (a preferred label beats a
    synonym); otherwise the linker's best candidate when it clearly beats the rest (merged candidates count
    once). ``UnknownEntityError`` when nothing matches, ``AmbiguousNameError`` (listing the ids) on a tie."""
    from mirage_kg.errors import AmbiguousNameError, UnknownEntityError
    from mirage_kg.model.namespaces import is_identifier

    name = text.strip()
    if is_identifier(name):
        entity = kg.entity(name)
        return Resolution(text, entity, "id", 1.0, tuple(kg.same_as(entity)))
    groups = kg.groups
    hits = _named(kg, name) if name else []
    if hits:
        by_node: dict[str, list[tuple[int, str]]] = {}
        for kind, iri in hits:
            by_node.setdefault(groups.rep(iri), []).append((kind, iri))
        preferred = [n for n, found in by_node.items() if any(kind == 0 for kind, _ in found)]
        nodes = list(by_node) if len(by_node) == 1 else preferred
        if len(nodes) == 1:
            kind, iri = min(by_node[nodes[0]], key=lambda h: (h[0], rank_key(h[1])))
            entity = kg.entity(iri)
            return Resolution(text, entity, "exact" if kind == 0 else "synonym", 1.0, tuple(kg.same_as(entity)))
        names = kg.labels(iri for _, iri in hits)
        listing = "; ".join(f"{compress(min(by_node[n], key=lambda h: h[0])[1])} "
                            f"({names[min(by_node[n], key=lambda h: h[0])[1]]})" for n in sorted(by_node, key=rank_key))
        raise AmbiguousNameError(text, f"it names {len(by_node)} different concepts: {listing}")
    candidates = kg.linker.link_one(name, top=8)
    if not candidates:
        raise UnknownEntityError(text, "no entity has that name or one close to it; try `mirage-kg link`")
    best = candidates[0]
    rivals = [c for c in candidates[1:] if best.score - c.score < margin
              and groups.rep(c.entity.iri) != groups.rep(best.entity.iri)]
    if rivals:
        listing = "; ".join(f"{c.entity.id} ({c.entity.label}, {c.method} {c.score:.2f})" for c in [best, *rivals])
        raise AmbiguousNameError(text, f"candidates: {listing}")
    return Resolution(text, best.entity, best.method, best.score, tuple(kg.same_as(best.entity)))


def _named(kg: KnowledgeGraph, text: str) -> list[tuple[int, str]]:
    """(0 for a preferred label or rdfs:label, 1 for a synonym; IRI) of the concepts labelled exactly ``text``."""
    from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_ALT, SKOS_PREF
    from mirage_kg.model.terms import literal

    rows = kg.store.select(
        f"SELECT DISTINCT ?e ?k WHERE {{ VALUES ?l {{ {literal(text)} {literal(text, lang='en')} }} "
        f"VALUES ?k {{ {iri_ref(SKOS_PREF)} {iri_ref(RDFS_LABEL)} {iri_ref(SKOS_ALT)} }} "
        f"GRAPH ?g {{ ?e ?k ?l }} FILTER(isIRI(?e)) }}")
    return sorted({(1 if r["k"].value == SKOS_ALT else 0, r["e"].value) for r in rows if kg.is_concept(r["e"].value)})
